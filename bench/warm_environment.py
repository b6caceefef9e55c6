"""Run inside a service function's execution environment (devstack runner probe) before the latency burst: build
what its first invocation would (the runtime from the composition root, the Kubernetes client, boto3 and the
clients a create uses), i.e. the cold path bench/packaging.py measures.

Why the bench does this: Lambda runs each new environment's cold path on its own CPU, in parallel; the devstack
runs 10 of them at once on 2 cores beside moto and the emulator, which delayed the burst's first hostname by 9 to
13 s. The environments' caches (subnets, shared security groups) stay empty: their first passes still fill them.
bench.lambda_model charges the cold starts (the measured cold path) and those first passes' extra reads.
"""

from __future__ import annotations

import time
from typing import Any


def build_cold_path() -> dict[str, Any]:
    from ccm.aws.clients import AwsClients
    from ccm.wiring.services import runtime

    started = time.perf_counter()
    built = runtime()
    clients = built.clients
    assert isinstance(clients, AwsClients)
    for service in ("elbv2", "ec2", "dynamodb"):
        clients.client(service)
    return {"cold_path_ms": round((time.perf_counter() - started) * 1000, 1)}
