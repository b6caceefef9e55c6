"""Invalid input end to end: a bad annotation (or spec field) added to a live Service yields a Warning event
`SyncLoadBalancerFailed` (upstream's reason) naming the annotation and its value, no mutating AWS call at all
(counted with the reconciler's own botocore hooks) and the same AWS state (read back with boto3), and the Service
keeps its load balancer; fixing the annotation resumes normal reconciling of the same LB. A well-formed reference
to something AWS does not hold (yet) is read before the first write: a Warning per attempt, retried, nothing
created."""

from __future__ import annotations

import json
from typing import Any

import pytest
from kubernetes.client.rest import ApiException

from devstack.stack import Stack
from tests.e2e.helpers import (
    DELETE_TIMEOUT,
    A,
    create_lb_service,
    dlq_depth,
    events_for,
    gone,
    hostname,
    managed_group,
    mutating,
    nlb,
    patch_service,
    read_service,
    service_calls,
    tagged_for_service,
)

SOURCE_RANGES = "service.beta.kubernetes.io/load-balancer-source-ranges"
CERT = "arn:aws:acm:us-east-1:123456789012:certificate/0e2a7c6b-1111-2222-3333-444455556666"
FAILED = "SyncLoadBalancerFailed"  # upstream's reason for every failed sync, bad input included
MISSING_SG = "sg-0123456789abcdef0"  # well formed, never created


def shown(annotation: str, value: str) -> str:
    """How the Warning quotes an annotation and its value."""
    return f"{annotation}={json.dumps(value)}"


# case -> (annotations, spec fields, what the Warning message must contain)
CASES: dict[str, tuple[dict[str, str], dict[str, Any], list[str]]] = {
    "unknown backend protocol": ({A + "backend-protocol": "quic"}, {}, [shown(A + "backend-protocol", "quic")]),
    "unknown health-check protocol": (
        {A + "healthcheck-protocol": "GRPC"},
        {},
        [shown(A + "healthcheck-protocol", "GRPC"), "must be one of TCP, HTTP, HTTPS"],
    ),
    "non-numeric threshold": (
        {A + "healthcheck-healthy-threshold": "three"},
        {},
        [shown(A + "healthcheck-healthy-threshold", "three"), "not an integer"],
    ),
    "interval out of range": (
        {A + "healthcheck-interval": "1"},
        {},
        [shown(A + "healthcheck-interval", "1"), "between 5 and 300"],
    ),
    "timeout not below interval": (
        {A + "healthcheck-interval": "10", A + "healthcheck-timeout": "10"},
        {},
        [shown(A + "healthcheck-timeout", "10"), "smaller than the health-check interval"],
    ),
    "EIP count differs from subnet count": (
        {
            A + "subnets": "subnet-0123456789abcdef0,subnet-0123456789abcdef1",
            A + "eip-allocations": "eipalloc-12345678",
        },
        {},
        [shown(A + "eip-allocations", "eipalloc-12345678"), "1 entries for 2 subnets"],
    ),
    "unknown target-group attribute": (
        {A + "target-group-attributes": "foo.bar=1"},
        {},
        [shown(A + "target-group-attributes", "foo.bar=1"), "not a supported target-group attribute"],
    ),
    "bad target-group attribute value": (
        {A + "target-group-attributes": "deregistration_delay.timeout_seconds=forever"},
        {},
        [shown(A + "target-group-attributes", "deregistration_delay.timeout_seconds=forever"), "not an integer"],
    ),
    "not a boolean": (
        {A + "cross-zone-load-balancing-enabled": "yes"},
        {},
        [shown(A + "cross-zone-load-balancing-enabled", "yes"), "not a boolean"],
    ),
    "not a certificate ARN": (
        {A + "ssl-cert": "my-cert"},
        {},
        [shown(A + "ssl-cert", "my-cert"), "not an ACM or IAM certificate ARN"],
    ),
    "ssl-ports names no port": (
        {A + "ssl-cert": CERT, A + "ssl-ports": "8443"},
        {},
        [shown(A + "ssl-ports", "8443"), "no such port in the Service"],
    ),
    "malformed subnet ID": ({A + "subnets": "subnet-xyz"}, {}, [shown(A + "subnets", "subnet-xyz")]),
    "reserved tag": (
        {A + "additional-resource-tags": "aws:owner=me"},
        {},
        [shown(A + "additional-resource-tags", "aws:owner=me"), "reserved by AWS"],
    ),
    "ownership tag forged": (
        {A + "additional-resource-tags": "kubernetes.io/cluster/other=owned"},
        {},
        ["reserved for the controller's ownership tags"],
    ),
    "access log without bucket": (
        {A + "access-log-enabled": "true"},
        {},
        [shown(A + "access-log-enabled", "true"), "access-log-s3-bucket-name"],
    ),
    "scheme contradicts internal": (
        {A + "internal": "true", A + "scheme": "internet-facing"},
        {},
        [shown(A + "scheme", "internet-facing"), "contradicts"],
    ),
    "unknown LB type": ({A + "type": "alb"}, {}, [shown(A + "type", "alb")]),
    "proxy protocol value": ({A + "proxy-protocol": "v2"}, {}, [shown(A + "proxy-protocol", "v2"), "'*'"]),
    "proxy protocol contradicted": (
        {A + "proxy-protocol": "*", A + "target-group-attributes": "proxy_protocol_v2.enabled=false"},
        {},
        ["proxy_protocol_v2.enabled=false contradicts"],
    ),
    "malformed security group": ({A + "security-groups": "sg-1"}, {}, [shown(A + "security-groups", "sg-1")]),
    # An unknown but well-formed group is retried (MISSING below); an untagged or foreign-VPC one is refused for good:
    # tests/integration/test_security_groups.py::test_annotations_may_name_only_cluster_tagged_groups_of_the_vpc.
}
EVERY_ANNOTATION = sorted({k for annotations, _, _ in CASES.values() for k in annotations})
VICTIM = "victim"


def quiet(stack: Stack) -> None:
    assert stack.runner is not None
    stack.runner.drain(60)


def aws_state(stack: Stack, svc: dict[str, Any]) -> dict[str, Any]:
    """The NLB, its listeners, target groups (health, attributes, targets) and its security group rules."""
    lb = nlb(stack, svc)
    assert lb is not None
    lb.pop("State", None)  # moto moves it from provisioning to active by itself
    group = managed_group(stack, svc)
    return {"lb": lb, "group": group and (group["GroupId"], group["IpPermissions"])}


@pytest.fixture(scope="module")
def victim(stack: Stack) -> dict[str, Any]:
    create_lb_service(stack, VICTIM, [80, 443], {A + "type": "nlb"})
    stack.wait_for(lambda: hostname(stack, VICTIM), timeout=60, what="victim hostname")
    quiet(stack)
    svc = read_service(stack, VICTIM)
    assert svc is not None
    return {"svc": svc, "hostname": hostname(stack, VICTIM), "arn": nlb(stack, svc)["LoadBalancerArn"]}  # type: ignore[index]


@pytest.mark.parametrize("case", list(CASES))
def test_invalid_input_on_a_live_service_warns_and_changes_nothing(stack: Stack, victim: dict[str, Any], case: str):
    annotations, spec, needles = CASES[case]
    svc = victim["svc"]
    state, calls = aws_state(stack, svc), service_calls(stack)  # quiet: the fixture or the previous case drained
    # Only this case's bad values: the previous case's are removed in the same patch.
    patch_service(
        stack,
        VICTIM,
        {
            "metadata": {"annotations": {k: annotations.get(k) for k in EVERY_ANNOTATION}},
            "spec": {"loadBalancerSourceRanges": spec.get("loadBalancerSourceRanges")},
        },
    )
    warning = stack.wait_for(
        lambda: [e for e in events_for(stack, VICTIM, FAILED) if all(n in e["message"] for n in needles)],
        what=f"{FAILED} naming {needles}",
    )[-1]
    assert warning["type"] == "Warning" and warning["message"].startswith("Error syncing load balancer: ")
    quiet(stack)
    assert mutating(service_calls(stack) - calls) == {}
    assert aws_state(stack, svc) == state
    assert hostname(stack, VICTIM) == victim["hostname"]  # keeps its current LB


@pytest.mark.parametrize(
    ("annotations", "spec"),
    [({SOURCE_RANGES: "10.0.0.0/33"}, {}), ({}, {"loadBalancerSourceRanges": ["10.0.0.1"]})],
    ids=["bad CIDR annotation", "CIDR without prefix in spec"],
)
def test_source_ranges_that_are_not_cidrs_never_reach_the_reconciler(
    stack: Stack, victim: dict[str, Any], annotations: dict[str, str], spec: dict[str, Any]
):
    # kube-apiserver refuses them with 422 (ValidateService, observed on a real server); they used
    # to be accepted by the emulator and reach the reconciler as InvalidConfiguration cases.
    svc = victim["svc"]
    state, calls = aws_state(stack, svc), service_calls(stack)
    with pytest.raises(ApiException) as err:
        patch_service(stack, VICTIM, {"metadata": {"annotations": annotations}, "spec": spec})
    assert err.value.status == 422 and "must be a list of IP ranges" in str(err.value.body)
    quiet(stack)
    assert mutating(service_calls(stack) - calls) == {}
    assert aws_state(stack, svc) == state


def test_fixing_the_annotation_resumes_on_the_same_lb(stack: Stack, victim: dict[str, Any]):
    patch_service(
        stack,
        VICTIM,
        {
            "metadata": {"annotations": {**{k: None for k in EVERY_ANNOTATION}, A + "healthcheck-interval": "15"}},
            "spec": {"loadBalancerSourceRanges": None},
        },
    )
    svc = victim["svc"]
    stack.wait_for(
        lambda: (lb := nlb(stack, svc)) and lb["TargetGroups"][80]["HealthCheckIntervalSeconds"] == 15,
        what="valid change applied",
    )
    assert nlb(stack, svc)["LoadBalancerArn"] == victim["arn"]  # type: ignore[index]
    assert hostname(stack, VICTIM) == victim["hostname"]
    gone(stack, svc)


def test_eip_count_against_discovered_subnets_changes_nothing(stack: Stack):
    quiet(stack)
    calls = service_calls(stack)
    create_lb_service(stack, "eip-count", [80], {A + "type": "nlb", A + "eip-allocations": "eipalloc-12345678"})
    try:
        warning = stack.wait_for(lambda: events_for(stack, "eip-count", FAILED), what=FAILED)[-1]
        assert shown(A + "eip-allocations", "eipalloc-12345678") in warning["message"]
        assert "needs exactly one allocation for each of 2 subnets" in warning["message"]
        quiet(stack)
        svc = read_service(stack, "eip-count")
        assert svc is not None and nlb(stack, svc) is None
        assert tagged_for_service(stack, svc) == []
        assert mutating(service_calls(stack) - calls) == {}
    finally:
        stack.core().delete_namespaced_service("eip-count", "default")
        stack.wait_for(lambda: read_service(stack, "eip-count") is None, timeout=DELETE_TIMEOUT, what="deleted")


# case -> (annotations naming something AWS does not hold (yet), what the Warning names)
MISSING: dict[str, tuple[dict[str, str], list[str]]] = {
    "mistyped-sg": (
        {A + "type": "nlb", A + "security-groups": MISSING_SG},
        [A + "security-groups", MISSING_SG, "not found"],
    ),
    "subnet-name": ({A + "type": "nlb", A + "subnets": "no-such-subnet"}, [A + "subnets", "no-such-subnet"]),
    "clb-cert": ({A + "type": "clb", A + "ssl-cert": CERT}, [A + "ssl-cert", CERT, "not found"]),
}


@pytest.mark.parametrize("case", list(MISSING))
def test_a_missing_reference_warns_each_attempt_changes_nothing_and_is_retried(stack: Stack, case: str):
    """A well-formed ID or ARN of nothing (yet) is checked before the first write (no security
    group created first), reported as a Warning (never silently into the DLQ) and retried with backoff, because
    creating it in AWS cures it: removing it converges through the retry (a Warning per attempt:
    tests/integration/test_service_failures.py)."""
    annotations, needles = MISSING[case]
    name = case
    quiet(stack)
    calls = service_calls(stack)
    svc = create_lb_service(stack, name, [443], annotations)
    try:
        warnings = stack.wait_for(
            lambda: [e for e in events_for(stack, name, FAILED) if all(n in e["message"] for n in needles)],
            what=f"{FAILED} naming {needles}",
        )
        assert warnings[-1]["type"] == "Warning" and warnings[-1]["message"].startswith("Error syncing load balancer")
        assert mutating(service_calls(stack) - calls) == {}
        assert tagged_for_service(stack, svc) == [] and hostname(stack, name) is None
        assert dlq_depth(stack) == 0
        patch_service(stack, name, {"metadata": {"annotations": {k: None for k in annotations if k != A + "type"}}})
        stack.wait_for(lambda: hostname(stack, name), timeout=60, what="converged once the reference is gone")
    finally:
        gone(stack, svc)
