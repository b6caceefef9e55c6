"""Every function at LogLevel=DEBUG (the runbook's advice when debugging): the runtime puts the root
logger at DEBUG in each execution environment, so every `extra=` and every library's DEBUG line is really formatted.
The functions still converge without a failed invocation (the sweeper is invoked as its schedule would), and no
credential reaches their logs: EKS tokens are minted here (kube_auth="eks") and botocore, at DEBUG, would log the
signature of every signed request."""

from __future__ import annotations

import re
import time
import uuid
from collections.abc import Iterator

import pytest

from devstack.stack import Stack, StackConfig

from .helpers import create_lb_service, delete_service, hostname

FUNCTIONS = ("ServiceReconcilerFunction", "NodeReconcilerFunction", "RouteReconcilerFunction")
SIGNATURE = re.compile(r"Signature[=:]\s*[0-9a-f]{64}")


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    config = StackConfig(
        state_dir=tmp_path_factory.mktemp("devstack-debug"),
        log_level="DEBUG",
        routes=True,
        kube_auth="eks",
        concurrency=2,
        resync_seconds=3600,
    )
    with Stack(config) as running:
        yield running


def test_every_function_at_debug_converges_and_logs_no_credential(stack: Stack) -> None:
    assert stack.runner is not None
    create_lb_service(stack, "debug-web", [80])
    stack.wait_for(lambda: hostname(stack, "debug-web"), timeout=60, what="debug-web hostname")
    delete_service(stack, "debug-web", timeout=60)
    stack.runner.drain(60)
    scheduled = {"version": "0", "id": str(uuid.uuid4()), "detail-type": "Scheduled Event", "source": "aws.events"}
    swept = stack.runner.invoke("SweeperFunction", {**scheduled, "time": time.strftime("%Y-%m-%dT%H:%M:%SZ")})
    assert swept is not None and "error" not in swept and swept["response"]["failed"] == 0, swept

    for function in (*FUNCTIONS, "SweeperFunction"):
        if function != "SweeperFunction":  # invoked directly above, not through a queue
            invocations = [i for i in stack.runner.log if i.function == function]
            assert invocations, f"{function} never ran"
            failed = [i for i in invocations if i.outcome not in ("success", "partial")]
            assert failed == [], failed
        levels = {r.get("level") for r in stack.runner.log_records(function)}
        assert "DEBUG" in levels, f"{function}: no DEBUG line, so the root logger was not at DEBUG"
    logged = "\n".join(stack.runner.logs())
    assert "k8s-aws-v1." not in logged  # no EKS token
    messages = "\n".join(str(r.get("message", "")) for r in stack.runner.log_records())
    assert not SIGNATURE.findall(messages)  # no SigV4 signature (of a token's presigned URL or of any request)
