"""What the chaos tests do to the devstack: a driver (Kubernetes writes that retry injected faults like any
client), fault clearing, quiesce (drain + fast-forward of SQS retry delays, the periodic passes) and a purge. The
invariants live in tests/chaos/invariants.py, what AWS does on its own in tests/chaos/periodic.py; both are
re-exported here for the tests.

The driver writes through the API server over HTTP (POST/PUT/DELETE) and reads through the emulator's store, so
injected Kubernetes faults (GET/PATCH rules, see test_chaos_stateful) land on the system under test, not on us.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

from kubernetes import client as k8s

from ccm.aws import faults
from ccm.contracts import kube as p
from devstack.stack import Stack
from tests.chaos.invariants import SERVICE_NAME_TAG as SERVICE_NAME_TAG
from tests.chaos.invariants import SERVICE_UID_TAG as SERVICE_UID_TAG
from tests.chaos.invariants import TARGET_LABELS as TARGET_LABELS
from tests.chaos.invariants import Expected as Expected
from tests.chaos.invariants import aws as aws
from tests.chaos.invariants import aws_view, dlqs
from tests.chaos.invariants import ip_target_strangers as ip_target_strangers
from tests.chaos.invariants import ip_targets_by_key as ip_targets_by_key
from tests.chaos.invariants import queue_depth as queue_depth
from tests.chaos.invariants import read as read
from tests.chaos.invariants import ready_endpoints as ready_endpoints
from tests.chaos.invariants import violations as violations
from tests.chaos.periodic import instance_state_event as instance_state_event
from tests.chaos.periodic import redrive as redrive
from tests.chaos.periodic import run_sweeper, safety_pass

RETRIED_STATUSES = (409, 429, 500, 503)


# -- the driver ---------------------------------------------------------------------------------------------------
def retrying(call: Callable[[], Any], attempts: int = 8) -> Any:
    """Retry what an injected fault may have failed (a real client retries 429/5xx and conflicts too)."""
    for attempt in range(attempts):
        try:
            return call()
        except k8s.ApiException as err:
            injected = err.status in RETRIED_STATUSES and "AlreadyExists" not in str(err.body)
            if not injected or attempt == attempts - 1:
                raise
            time.sleep(0.05)
    raise AssertionError("unreachable")


def service_body(
    namespace: str, name: str, lb: bool, ports: list[tuple[int, str]], annotations: dict[str, str]
) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name, "namespace": namespace, "annotations": dict(annotations)},
        "spec": {
            "type": "LoadBalancer" if lb else "ClusterIP",
            "selector": {"app": name},
            "ports": [
                {"name": f"{proto.lower()}{port}", "port": port, "protocol": proto, "targetPort": 8080}
                for port, proto in ports
            ],
        },
    }


def create_service(stack: Stack, body: dict[str, Any]) -> dict[str, Any]:
    ns = body["metadata"]["namespace"]
    core = stack.core()
    raw = retrying(lambda: core.create_namespaced_service(ns, body, _preload_content=False))
    created: dict[str, Any] = json.loads(raw.data)
    return created


def replace_service(stack: Stack, namespace: str, name: str, change: Callable[[dict[str, Any]], None]) -> Any:
    """Read-modify-PUT with the resourceVersion precondition; retried on conflicts and injected faults."""
    core = stack.core()

    def attempt() -> Any:
        live = read(stack, "services", namespace, name)
        if live is None:
            return None
        change(live)
        raw = core.replace_namespaced_service(name, namespace, live, _preload_content=False)
        return json.loads(raw.data)

    return retrying(attempt)


def delete_service(stack: Stack, namespace: str, name: str) -> None:
    core = stack.core()

    def attempt() -> None:
        try:
            core.delete_namespaced_service(name, namespace)
        except k8s.ApiException as err:
            if err.status != 404:
                raise

    retrying(attempt)


def replace_node(stack: Stack, name: str, change: Callable[[dict[str, Any]], None]) -> None:
    core = stack.core()

    def attempt() -> None:
        live = read(stack, "nodes", None, name)
        if live is None:
            return
        change(live)
        core.replace_node(name, live, _preload_content=False)

    retrying(attempt)


# -- faults and quiesce -------------------------------------------------------------------------------------------
def clear_faults(stack: Stack) -> None:
    assert stack.emulator is not None and stack.runner is not None
    stack.emulator.faults.clear()
    if stack.aws_proxy is not None:
        stack.aws_proxy.clear()
    faults.arm(stack.faults_file, {})  # type: ignore[attr-defined]
    stack.runner.clear_faults()
    if stack.watcher_process is None or stack.watcher_process.poll() is not None:
        stack.watcher_process = None
        stack.start_watcher()


def fast_forward_queues(stack: Stack, longer_than: float = 3.0) -> int:
    """Make every message that waits out a retry delay (or a timed-out invocation's visibility) visible now:
    the test's stand-in for time passing. Only call with the runner paused: nothing is in flight then, so an
    invisible message is one waiting for its retry, and its receive count is kept (DLQ logic stays real).
    Short waits (the membership coalescing deferrals, <= 2 s) are left alone."""
    from moto.core import DEFAULT_ACCOUNT_ID
    from moto.core.utils import unix_time_millis
    from moto.sqs.models import sqs_backends

    moved = 0
    for queue in sqs_backends[DEFAULT_ACCOUNT_ID][stack.config.region].queues.values():
        with queue._messages_lock:
            now = unix_time_millis()
            for message in queue._messages:
                if message.visible_at - now > longer_than * 1000:
                    message.visible_at = now
                    moved += 1
    return moved


def drain(stack: Stack, deadline: float) -> bool:
    """Drain the queues, fast-forwarding retry delays; False if still busy at `deadline` (time.monotonic())."""
    assert stack.runner is not None
    while time.monotonic() < deadline:
        try:
            stack.runner.drain(min(3.0, max(0.5, deadline - time.monotonic())))
            return True
        except TimeoutError:
            stack.runner.pause()
            try:
                fast_forward_queues(stack)
            finally:
                stack.runner.resume()
    return False


def quiesce(
    stack: Stack,
    converged: Callable[[], list[str]],
    timeout: float,
    settle: float = 0.0,
    tick_every: float = 10.0,
    ticks: list[float] | None = None,
    before_clear: Callable[[], None] | None = None,
    sweeps: list[dict[str, Any]] | None = None,
    sweep_every: float = 20.0,
) -> list[str]:
    """Let the armed faults play out while the queues drain (at most `settle` seconds), then clear every fault
    and drain until `converged()` reports no problem; returns the last problems seen (empty on success).

    Time passes here, so the periodic work of the real system happens too: the safety pass (every 5 minutes in
    AWS) runs once the faults are cleared and again every `tick_every` seconds while the world has not converged
    (what a deletion lost with the watcher down needs). Each tick's time is appended to `ticks`. Likewise the
    sweeper (every 15 minutes in AWS, grace 0 here) runs when a leak is reported, at most every `sweep_every`
    seconds, when `sweeps` is given (its summaries are appended)."""
    settled = time.monotonic() + settle
    while settle and drain(stack, settled) and converged():
        time.sleep(0.3)
    if before_clear is not None:
        before_clear()
    clear_faults(stack)
    deadline = time.monotonic() + timeout
    problems = ["not checked yet"]
    last_tick = -tick_every
    last_sweep = time.monotonic()  # a leak gets `sweep_every` seconds to be cleaned up by the reconcilers first
    while True:
        if time.monotonic() - last_tick >= tick_every:
            safety_pass(stack)
            last_tick = time.monotonic()
            if ticks is not None:
                ticks.append(last_tick)
        if not drain(stack, deadline):
            return problems
        problems = converged()
        if not problems:
            return []
        leaking = any(problem.startswith("leak:") for problem in problems)
        if sweeps is not None and leaking and time.monotonic() - last_sweep >= sweep_every:
            sweeps.append(run_sweeper(stack))
            last_sweep = time.monotonic()
        time.sleep(0.3)  # the watcher may still hold deltas (relist after a restart or 410)


def purge(stack: Stack, namespace: str) -> None:
    """Force the world back to its seeded state after a failed example, so the next one starts clean."""
    assert stack.emulator is not None and stack.world is not None
    view = aws_view(stack)
    elbv2, ec2, sqs = aws(stack, "elbv2"), aws(stack, "ec2"), aws(stack, "sqs")
    for arn in view.lbs:
        elbv2.delete_load_balancer(LoadBalancerArn=arn)
    for name in view.clbs:
        aws(stack, "elb").delete_load_balancer(LoadBalancerName=name)
    for arn in view.tgs:
        elbv2.delete_target_group(TargetGroupArn=arn)
    node_sg = ec2.describe_security_groups(GroupIds=[stack.world.node_sg_id])["SecurityGroups"][0]
    stale = [r for r in node_sg["IpPermissions"] if r.get("UserIdGroupPairs")]
    if stale:
        ec2.revoke_security_group_ingress(GroupId=stack.world.node_sg_id, IpPermissions=stale)
    for group in view.sgs:
        ec2.delete_security_group(GroupId=group)
    for dlq in dlqs(stack):
        sqs.purge_queue(QueueUrl=stack.queue_urls[dlq])
    for svc in stack.emulator.list("services", namespace):
        if p.meta(svc).get("finalizers"):
            svc["metadata"]["finalizers"] = []
            stack.emulator.update(svc)
        stack.emulator.delete("services", namespace, svc["metadata"]["name"])
