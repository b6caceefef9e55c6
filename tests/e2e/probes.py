"""Run inside the functions' execution environments (EventSourceRunner.probe loads this file there; the tests never
import it): what only an environment knows, its runtime's AWS call counter and the parameters its clients sent."""

from __future__ import annotations

import sys
import time
from typing import Any

_recorded: dict[str, list[tuple[float, str, dict[str, Any]]]] = {}


def calls(runtime_module: str) -> dict[str, int]:
    """Every AWS call (service:Operation -> count) of this environment's runtime; {} if it has not built one."""
    runtime = sys.modules[runtime_module].runtime.instance
    return {} if runtime is None else dict(runtime.clients.counter.snapshot())


def record(runtime_module: str, token: str, service: str, operations: list[str]) -> None:
    """From now on keep (time, operation, parameters) of each call of `operations` through the runtime's `service`
    client (a botocore event hook, as the call counter uses). Builds the runtime if no invocation did yet; the
    handler then reuses it, as a warm Lambda does."""
    seen = _recorded.setdefault(token, [])
    client = sys.modules[runtime_module].runtime().clients.client(service)
    prefix = f"provide-client-params.{client.meta.service_model.service_id.hyphenize()}"
    for operation in operations:

        def hook(params: dict[str, Any], op: str = operation, **_: Any) -> None:
            seen.append((time.time(), op, dict(params)))

        client.meta.events.register(f"{prefix}.{operation}", hook)


def recorded(token: str) -> list[tuple[float, str, dict[str, Any]]]:
    return _recorded.get(token, [])
