"""A schedule that drives a message into the DLQ on purpose and proves that redrive recovers it (docs/runbook.md,
"Dead-letter queues"): the reconciler cannot read the Service for longer than maxReceiveCount receives, the delta
is dead-lettered, nothing else would ever deliver it again (the resync is an hour away), and once the cause is
fixed a redrive converges the Service."""

from __future__ import annotations

import time
import uuid

from devstack.stack import Stack
from tests.chaos import world as w


def test_a_dead_lettered_delta_is_recovered_by_redrive(stack: Stack) -> None:
    assert stack.emulator is not None and stack.runner is not None
    ns, name = f"redrive-{uuid.uuid4().hex[:6]}", "web"
    stack.emulator.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
    assert w.queue_depth(stack, "ServicesDLQ") == 0
    # The API server fails every read of this Service by the reconciler (the watcher lists and watches instead).
    outage = stack.emulator.faults.arm(1000, status=500, method="GET", path_regex=rf"/namespaces/{ns}/services/{name}$")
    w.create_service(stack, w.service_body(ns, name, True, [(80, "TCP")], {}))

    deadline = time.monotonic() + 120
    while w.queue_depth(stack, "ServicesDLQ") == 0:
        assert time.monotonic() < deadline, "the failing delta never reached the DLQ"
        w.drain(stack, time.monotonic() + 5)  # retry delays fast-forwarded, receive counts kept
    reads = 1000 - outage.remaining
    assert reads >= 5, f"dead-lettered after {reads} failed reads; maxReceiveCount is 5"

    stack.emulator.faults.clear()  # the cause is fixed, yet nothing happens: the only hint is in the DLQ
    assert w.drain(stack, time.monotonic() + 30)
    live = w.read(stack, "services", ns, name)
    assert live is not None and not (live.get("status") or {}).get("loadBalancer"), "converged without a redrive?"

    moved = w.redrive(stack, "ServicesDLQ", "ServicesQueue")
    model = {name: w.Expected(lb=True, valid=True, deleted=False)}
    problems = w.quiesce(stack, lambda: w.violations(stack, ns, model, stack.baseline), 60)  # type: ignore[attr-defined]
    assert moved >= 1 and problems == [], problems
    print(f"redrive: dead-lettered after {reads} failed reads; {moved} message redriven; converged")

    w.delete_service(stack, ns, name)
    model[name].deleted = True
    assert w.quiesce(stack, lambda: w.violations(stack, ns, model, stack.baseline), 60) == []  # type: ignore[attr-defined]
