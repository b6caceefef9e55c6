"""The service controller's decision table (ccm.service.decisions), row by row, end to end on the devstack:
kubernetes client -> emulator -> watcher -> SQS -> service Lambda -> ELBv2/EC2 (moto server) -> status/events."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from ccm.contracts import kube as p
from devstack.stack import Stack
from tests.e2e.helpers import (
    DELETE_TIMEOUT,
    A,
    annotate,
    create_lb_service,
    ensured,
    events_for,
    hostname,
    lb_name,
    mutating,
    nlb,
    patch_service,
    read_service,
    record_calls,
    service_calls,
    tagged_for_service,
    wait_event,
)

OUR_CLASS = "ccm.aws/serverless"


def served(stack: Stack, name: str, timeout: float = 60) -> dict[str, Any]:
    stack.wait_for(lambda: hostname(stack, name), timeout=timeout, what=f"{name} hostname")
    ensured(stack, name)  # the hostname is written before the rest of the pass (and of a burst's next pass)
    svc = read_service(stack, name)
    assert svc is not None
    return svc


def quiet(stack: Stack) -> None:
    assert stack.runner is not None
    stack.runner.drain(60)


def no_finalizer(stack: Stack, name: str) -> dict[str, Any]:
    result: dict[str, Any] = stack.wait_for(
        lambda: (s := read_service(stack, name)) and p.FINALIZER not in (s["metadata"].get("finalizers") or []) and s,
        what=f"{name} without our finalizer",
    )
    return result


def test_create_update_delete_leaves_nothing_tagged(stack: Stack):
    create_lb_service(stack, "rows", [80])
    svc = served(stack, "rows")
    assert p.FINALIZER in svc["metadata"]["finalizers"]
    assert {"EnsuringLoadBalancer", "EnsuredLoadBalancer"} <= {e["reason"] for e in events_for(stack, "rows")}
    arn = nlb(stack, svc)["LoadBalancerArn"]  # type: ignore[index]

    annotate(stack, "rows", {A + "healthcheck-interval": "12", A + "additional-resource-tags": "team=rows"})
    stack.wait_for(
        lambda: (lb := nlb(stack, svc)) and lb["TargetGroups"][80]["HealthCheckIntervalSeconds"] == 12,
        what="update applied",
    )
    assert nlb(stack, svc)["LoadBalancerArn"] == arn  # type: ignore[index]
    assert tagged_for_service(stack, svc)  # LB, target group, managed group

    stack.core().delete_namespaced_service("rows", "default")
    stack.wait_for(
        lambda: read_service(stack, "rows") is None, timeout=DELETE_TIMEOUT, what="finalizer removed and Service gone"
    )
    quiet(stack)
    assert tagged_for_service(stack, svc) == []
    elbv2, ec2 = stack.aws("elbv2"), stack.aws("ec2")
    assert all(
        not tg["TargetGroupName"].startswith("k8s-default-rows-")
        for tg in elbv2.describe_target_groups()["TargetGroups"]
    )
    groups = ec2.describe_security_groups(Filters=[{"Name": "group-name", "Values": [f"k8s-elb-{lb_name(svc)}"]}])
    assert groups["SecurityGroups"] == []
    deleted = events_for(stack, "rows", uid=svc["metadata"]["uid"])
    assert {"DeletingLoadBalancer", "DeletedLoadBalancer"} <= {e["reason"] for e in deleted}


def test_type_change_to_cluster_ip_while_the_watcher_was_down_still_cleans_up(stack: Stack):
    create_lb_service(stack, "flip", [80])
    svc = served(stack, "flip")
    stack.stop_watcher()  # the pipeline is down while the type changes
    try:
        patch_service(stack, "flip", {"spec": {"type": "ClusterIP"}})
        quiet(stack)
        assert nlb(stack, svc) is not None  # nobody told us yet
    finally:
        stack.start_watcher()  # relist: ClusterIP with our finalizer -> needsCleanup
    stack.wait_for(lambda: nlb(stack, svc) is None, timeout=DELETE_TIMEOUT, what="LB deleted after catching up")
    live = no_finalizer(stack, "flip")
    assert not ((live.get("status") or {}).get("loadBalancer") or {}).get("ingress")
    quiet(stack)
    assert tagged_for_service(stack, svc) == []
    stack.core().delete_namespaced_service("flip", "default")


def test_uid_change_deletes_the_old_lb_before_creating_the_new_one(stack: Stack):
    assert stack.runner is not None
    create_lb_service(stack, "reborn", [80])
    old = served(stack, "reborn")
    old_arn = nlb(stack, old)["LoadBalancerArn"]  # type: ignore[index]
    calls = record_calls(stack, "elbv2", ["DeleteLoadBalancer", "CreateLoadBalancer"])
    stack.runner.pause()  # reconciles stop while the Service is replaced under the same name
    try:
        core = stack.core()
        core.delete_namespaced_service("reborn", "default")
        # The user forces the deletion (drops the finalizer) and re-creates the Service: a new UID.
        patch_service(stack, "reborn", {"metadata": {"finalizers": None}})
        stack.wait_for(lambda: read_service(stack, "reborn") is None, timeout=DELETE_TIMEOUT, what="old Service gone")
        create_lb_service(stack, "reborn", [80])
    finally:
        stack.runner.resume()
    new = served(stack, "reborn")
    assert new["metadata"]["uid"] != old["metadata"]["uid"]
    stack.wait_for(lambda: nlb(stack, old) is None, timeout=DELETE_TIMEOUT, what="old LB deleted")
    quiet(stack)
    assert [(op, params.get("LoadBalancerArn") or params.get("Name")) for op, params in calls] == [
        ("DeleteLoadBalancer", old_arn),
        ("CreateLoadBalancer", lb_name(new)),
    ]
    assert tagged_for_service(stack, old, by_name=False) == []  # the new one carries the same name tag
    assert nlb(stack, new)["DNSName"] == hostname(stack, "reborn")  # type: ignore[index]
    stack.core().delete_namespaced_service("reborn", "default")
    stack.wait_for(lambda: read_service(stack, "reborn") is None, timeout=DELETE_TIMEOUT, what="deleted")


def test_foreign_class_and_lbc_annotation_are_left_alone_our_class_is_handled(stack: Stack):
    quiet(stack)
    before = service_calls(stack)
    create_lb_service(stack, "theirs", [80], loadBalancerClass="example.com/other-lb")
    create_lb_service(stack, "lbc", [80], {A + "type": "external"})
    create_lb_service(stack, "ours", [80], loadBalancerClass=OUR_CLASS)
    ours = served(stack, "ours")
    assert nlb(stack, ours) is not None and p.FINALIZER in ours["metadata"]["finalizers"]
    quiet(stack)
    made = mutating(service_calls(stack) - before)
    assert made["elbv2:CreateLoadBalancer"] == 1  # only ours
    for name in ("theirs", "lbc"):
        svc = read_service(stack, name)
        assert svc is not None
        assert not svc["metadata"].get("finalizers")
        assert not ((svc.get("status") or {}).get("loadBalancer") or {}).get("ingress")
        assert nlb(stack, svc) is None and tagged_for_service(stack, svc) == []
        assert events_for(stack, name) == []
        stack.core().delete_namespaced_service(name, "default")
    stack.core().delete_namespaced_service("ours", "default")
    stack.wait_for(lambda: read_service(stack, "ours") is None, timeout=DELETE_TIMEOUT, what="ours deleted")


# name -> (spec and annotations, exact Warning message)
HARD_RULES: dict[str, tuple[dict[str, Any], str]] = {
    "affinity": ({"sessionAffinity": "ClientIP"}, 'unsupported load balancer affinity: "ClientIP"'),
    "lb-ip": ({"loadBalancerIP": "192.0.2.10"}, "LoadBalancerIP cannot be specified for AWS ELB"),
    "clb-udp": (
        {"annotations": {A + "type": "clb"}, "ports": [{"name": "dns", "port": 53, "protocol": "UDP"}]},
        f"Protocol UDP not supported by LoadBalancer: UDP needs {A}type: nlb",
    ),
    "clb-mixed": (
        {
            "annotations": {A + "type": "clb"},
            "ports": [{"name": "web", "port": 80, "protocol": "TCP"}, {"name": "dns", "port": 53, "protocol": "UDP"}],
        },
        "mixed protocol is not supported for LoadBalancer (Classic ELB)",
    ),
}


@pytest.fixture(scope="module")
def hard_rule_services(stack: Stack) -> Iterator[dict[str, Any]]:
    """Every hard-rule violation created at once; the AWS calls they caused (none may mutate)."""
    quiet(stack)
    before = service_calls(stack)
    for name, (spec, _) in HARD_RULES.items():
        spec = dict(spec)
        annotations = spec.pop("annotations", None)
        ports = spec.pop("ports", [80])
        create_lb_service(stack, name, ports, annotations, **spec)
    for name in HARD_RULES:
        wait_event(stack, name, "SyncLoadBalancerFailed")
    quiet(stack)
    yield {"calls": service_calls(stack) - before}
    for name in HARD_RULES:
        stack.core().delete_namespaced_service(name, "default")
    for name in HARD_RULES:
        stack.wait_for(lambda n=name: read_service(stack, n) is None, timeout=DELETE_TIMEOUT, what=f"{name} deleted")


@pytest.mark.parametrize("name", list(HARD_RULES))
def test_hard_rules_warn_with_the_exact_reason_and_change_nothing(
    stack: Stack, hard_rule_services: dict[str, Any], name: str
):
    _, message = HARD_RULES[name]
    warnings = [e for e in events_for(stack, name) if e["type"] == "Warning"]
    assert {(e["reason"], e["message"]) for e in warnings} == {
        ("SyncLoadBalancerFailed", f"Error syncing load balancer: {message}")
    }
    svc = read_service(stack, name)
    assert svc is not None and not ((svc.get("status") or {}).get("loadBalancer") or {}).get("ingress")
    assert nlb(stack, svc) is None and tagged_for_service(stack, svc) == []
    assert mutating(hard_rule_services["calls"]) == {}  # not one AWS change for any of them
