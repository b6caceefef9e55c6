"""Sweeper decisions (ccm.sweeper.model, ccm.sweeper.drift): pure, over plain data."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from ccm.aws import clb_model, names
from ccm.aws import nlb_model as nm
from ccm.aws.lbconfig import parse_load_balancer_config
from ccm.contracts import kube as p
from ccm.contracts.cluster import Cluster
from ccm.sweeper import drift as d
from ccm.sweeper.model import Action, Kind, Resource, View, decide, forgotten, orphan_reason, owner_of, wanted
from tests.factories import service

CLUSTER = "c1"
CLASS = "ccm.aws/serverless"
VPC = "vpc-1"
NOW = 1_000_000.0
GRACE = 1800.0
C = Cluster(CLUSTER, VPC, CLASS, default_lb_type="nlb")
TYPE = "service.beta.kubernetes.io/aws-load-balancer-type"


def svc(name: str = "web", **kw: Any) -> dict[str, Any]:
    return service(name, annotations={TYPE: "nlb"}, **kw)


def tags_for(s: dict[str, Any], uid: bool = True, cluster: str = CLUSTER, value: str = "owned") -> dict[str, str]:
    meta = s["metadata"]
    tags = {**names.resource_tags(cluster, meta["namespace"], meta["name"], meta["uid"])}
    tags[names.cluster_tag_key(cluster)] = value
    if not uid:
        del tags[names.SERVICE_UID_TAG]
    if cluster != CLUSTER:
        tags.pop(names.cluster_tag_key(CLUSTER), None)
    return tags


def lb_name(s: dict[str, Any]) -> str:
    return names.load_balancer_name(s["metadata"]["uid"])


def nlb_of(s: dict[str, Any], **kw: Any) -> tuple[Resource, list[Resource]]:
    """An NLB exactly as the reconciler would have built it for `s`, with its target groups."""
    desired = nm.desired_nlb(s, parse_load_balancer_config(s, "nlb"), (), CLUSTER, VPC)
    listeners, groups = [], []
    for ls in desired.listeners:
        tg = ls.target_group
        arn = f"arn:tg/{tg.name}"
        listeners.append(nm.ObservedListener(f"arn:ls/{ls.port}", ls.port, ls.protocol, arn))
        observed = nm.ObservedTargetGroup(arn, tg.name, tg.protocol, tg.port, tg.health)
        groups.append(Resource(Kind.TARGET_GROUP, arn, arn, tg.name, tags_for(s), target_group=observed))
    arn = f"arn:lb/net/{desired.name}"
    fields: dict[str, Any] = {"dns_name": f"{desired.name}.elb", "listeners": tuple(listeners), "created": NOW - 7200}
    fields.update(kw)
    return Resource(Kind.NLB, arn, arn, desired.name, tags_for(s), **fields), groups


def clb_of(s: dict[str, Any], **kw: Any) -> Resource:
    desired = clb_model.desired_clb(s, parse_load_balancer_config(s, "clb"), (), CLUSTER)
    observed = clb_model.ObservedCLB(
        desired.name, f"{desired.name}.elb", desired.scheme, {ls.port: ls for ls in desired.listeners}
    )
    observed.health = desired.health
    arn = f"arn:loadbalancer/{desired.name}"
    fields: dict[str, Any] = {"dns_name": observed.dns_name, "clb": observed, "created": NOW - 7200}
    fields.update(kw)
    return Resource(Kind.CLB, arn, desired.name, desired.name, tags_for(s), **fields)


def sg_of(s: dict[str, Any], gid: str = "sg-1") -> Resource:
    return Resource(Kind.SECURITY_GROUP, f"arn:security-group/{gid}", gid, f"k8s-elb-{lb_name(s)}", tags_for(s))


def judge(
    resource: Resource, services: list[dict[str, Any]], others: list[Resource] = (), claim_unclassed: bool = True
) -> tuple[bool, str]:
    services_by_key = {f"default/{x['metadata']['name']}": x for x in services}
    view = View(services_by_key, [resource, *others])
    cluster = replace(C, claim_unclassed=claim_unclassed)
    owner = owner_of(resource, cluster)
    assert owner is not None
    return orphan_reason(resource, owner, view, cluster)


# -- ownership ------------------------------------------------------------------------------------------------------
LIVE = svc()
CLB_SVC = service("old", annotations={TYPE: "clb"})
NLB, NLB_TGS = nlb_of(LIVE)


def _case(name: str) -> tuple[Resource, list[dict[str, Any]], list[Resource], tuple[bool, str]]:
    gone = svc("gone")
    recreated = {**LIVE, "metadata": {**LIVE["metadata"], "uid": "another-uid"}}
    finalized = {**LIVE, "metadata": {**LIVE["metadata"], "finalizers": [p.FINALIZER]}}
    cluster_ip_pending = {**finalized, "spec": {**finalized["spec"], "type": "ClusterIP"}}
    deleting = {**LIVE, "metadata": {**LIVE["metadata"], "deletionTimestamp": "2026-01-01T00:00:00Z"}}
    cluster_ip = {**LIVE, "spec": {**LIVE["spec"], "type": "ClusterIP"}}
    foreign = {**LIVE, "spec": {**LIVE["spec"], "loadBalancerClass": "example.com/other"}}
    invalid = {**LIVE, "metadata": {**LIVE["metadata"], "annotations": {TYPE: "nlb", names.SERVICE_NAME_TAG: "x"}}}
    invalid["metadata"]["annotations"]["service.beta.kubernetes.io/aws-load-balancer-scheme"] = "sideways"
    wants_clb = {**LIVE, "metadata": {**LIVE["metadata"], "annotations": {TYPE: "clb"}}}
    cases = {
        "service-gone": (nlb_of(gone)[0], [LIVE], [], (True, "service-gone")),
        "recreated": (NLB, [recreated], [], (True, "uid-mismatch")),
        "cleanup-pending": (NLB, [cluster_ip_pending], [], (False, "cleanup-pending")),
        "deleting-finalized": (NLB, [deleting], [], (True, "service-deleting")),
        "not-load-balancer": (NLB, [cluster_ip], [], (True, "not-load-balancer")),
        "other-controller": (NLB, [foreign], [], (True, "other-controller")),
        "config-invalid": (NLB, [invalid], [], (False, "config-invalid")),
        "clb-while-nlb-wanted": (replace(NLB, kind=Kind.CLB), [LIVE], [], (True, "wrong-kind")),
        "nlb-while-clb-wanted": (NLB, [wants_clb], [], (True, "wrong-kind")),
        "nlb-in-use": (NLB, [LIVE], [], (False, "in-use")),
        "tg-of-a-clb-service": (NLB_TGS[0], [wants_clb], [], (True, "wrong-kind")),
        "tg-forwarded-to": (NLB_TGS[0], [LIVE], [NLB], (False, "in-use")),
        "tg-stale": (replace(NLB_TGS[0], key="arn:tg/old", id="arn:tg/old"), [LIVE], [NLB], (True, "unreferenced")),
        "tg-lb-not-there-yet": (NLB_TGS[0], [LIVE], [], (False, "lb-pending")),
        "sg-carried": (sg_of(LIVE), [LIVE], [replace(NLB, security_groups=frozenset({"sg-1"}))], (False, "in-use")),
        "sg-not-carried": (
            sg_of(LIVE),
            [LIVE],
            [replace(NLB, security_groups=frozenset({"sg-2"}))],
            (True, "unreferenced"),
        ),
        "sg-lb-gone": (sg_of(LIVE), [LIVE], [], (False, "lb-pending")),
        "sg-service-gone": (sg_of(gone), [LIVE], [], (True, "service-gone")),
    }
    return cases[name]


@pytest.mark.parametrize(
    "name",
    [
        "service-gone", "recreated", "cleanup-pending",
        "deleting-finalized", "not-load-balancer", "other-controller", "config-invalid", "clb-while-nlb-wanted",
        "nlb-while-clb-wanted", "nlb-in-use", "tg-of-a-clb-service", "tg-forwarded-to", "tg-stale",
        "tg-lb-not-there-yet", "sg-carried", "sg-not-carried", "sg-lb-gone", "sg-service-gone",
    ],
)  # fmt: skip
def test_orphan_reasons(name: str) -> None:
    resource, services, others, expected = _case(name)
    assert judge(resource, services, others) == expected


@pytest.mark.parametrize(
    "tags",
    [
        {},  # untagged
        tags_for(LIVE, cluster="other-cluster"),  # another cluster's
        tags_for(LIVE, value="shared"),  # shared, never owned by us
        {names.cluster_tag_key(CLUSTER): "owned"},  # ours but no Service's (a node security group)
    ],
)
def test_resources_not_ours_to_judge_get_no_decision(tags: dict[str, str]) -> None:
    resource = replace(nlb_of(svc("gone"))[0], tags=tags)
    assert owner_of(resource, C) is None
    assert decide(View({}, [resource]), {}, NOW, GRACE, C) == []


# -- grace --------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("since", "created", "action"),
    [
        (None, NOW - 7200, Action.MARK),  # first sight: remember, delete nothing
        (NOW - 60, NOW - 7200, Action.WAIT),  # inside the grace period
        (NOW - GRACE, NOW - 7200, Action.DELETE),  # the grace period is over
        (NOW - GRACE, NOW - 60, Action.WAIT),  # orphaned long ago by the memory, but created a minute ago
        (NOW - GRACE, None, Action.DELETE),  # no creation time (target groups, security groups): memory only
    ],
)
def test_grace_period(since: float | None, created: float | None, action: Action) -> None:
    orphan = replace(nlb_of(svc("gone"))[0], created=created)
    marks = {} if since is None else {orphan.key: since}
    (decision,) = decide(View({}, [orphan]), marks, NOW, GRACE, C)
    assert decision.orphan and decision.reason == "service-gone"
    assert decision.action is action
    assert decision.since == (NOW if since is None else since)


def test_a_resource_no_longer_orphaned_is_forgotten_and_vanished_ones_too() -> None:
    view = View({"default/web": LIVE}, [NLB, *NLB_TGS])
    marks = {NLB.key: NOW - 10, "arn:vanished": NOW - 99}
    decisions = decide(view, marks, NOW, GRACE, C)
    assert {dec.resource.key: dec.action for dec in decisions} == {
        NLB.key: Action.UNMARK,
        NLB_TGS[0].key: Action.KEEP,
        NLB_TGS[1].key: Action.KEEP,
    }
    assert forgotten(marks, decisions) == ["arn:vanished"]


def test_deletion_order_is_load_balancers_then_target_groups_then_security_groups() -> None:
    gone = svc("gone")
    lb, tgs = nlb_of(gone)
    view = View({}, [sg_of(gone), *tgs, lb])
    marks = {r.key: NOW - GRACE for r in view.resources}
    decisions = decide(view, marks, NOW, GRACE, C)
    assert [dec.resource.kind for dec in decisions] == [
        Kind.NLB,
        Kind.TARGET_GROUP,
        Kind.TARGET_GROUP,
        Kind.SECURITY_GROUP,
    ]
    assert {dec.action for dec in decisions} == {Action.DELETE}


# -- drift --------------------------------------------------------------------------------------------------------
def with_status(s: dict[str, Any], hostname: str) -> dict[str, Any]:
    return {**s, "status": {"loadBalancer": {"ingress": [{"hostname": hostname}]}}}


def drift_of(services: list[dict[str, Any]], resources: list[Resource], missing: set[str] = frozenset()) -> list[str]:
    view = View({f"default/{x['metadata']['name']}": x for x in services}, resources)
    return [r for dr in d.find_drift(view, set(missing), NOW, GRACE, C) for r in dr.reasons]


def test_an_nlb_as_built_has_no_drift() -> None:
    assert drift_of([with_status(LIVE, NLB.dns_name)], [NLB, *NLB_TGS]) == []


def test_nlb_listener_edited_by_hand_is_drift() -> None:
    edited = replace(NLB, listeners=(replace(NLB.listeners[0], protocol="UDP"), *NLB.listeners[1:]))
    assert drift_of([with_status(LIVE, NLB.dns_name)], [edited, *NLB_TGS]) == ["listener 80 changed"]


def test_nlb_listener_deleted_and_extra_listener_are_drift() -> None:
    extra = nm.ObservedListener("arn:ls/8080", 8080, "TCP", NLB_TGS[0].key)
    edited = replace(NLB, listeners=(NLB.listeners[1], extra))
    assert drift_of([with_status(LIVE, NLB.dns_name)], [edited, *NLB_TGS]) == [
        "listener 80 missing",
        "unexpected listener 8080",
    ]


def test_nlb_target_group_deleted_is_drift() -> None:
    reasons = drift_of([with_status(LIVE, NLB.dns_name)], [NLB, NLB_TGS[1]])
    assert reasons == [f"target group {NLB_TGS[0].name} missing", "listener 80 changed"]


def test_nlb_health_check_edited_is_drift() -> None:
    tg = NLB_TGS[0].target_group
    assert tg is not None
    edited = replace(NLB_TGS[0], target_group=replace(tg, health=replace(tg.health, interval=30, healthy=5)))
    assert drift_of([with_status(LIVE, NLB.dns_name)], [NLB, edited, NLB_TGS[1]]) == [
        f"health check of target group {tg.name} changed"
    ]


def test_status_disagreeing_with_the_lb_is_drift() -> None:
    assert drift_of([with_status(LIVE, "elsewhere.elb")], [NLB, *NLB_TGS]) == [
        f"status shows elsewhere.elb, the load balancer is {NLB.dns_name}"
    ]
    assert drift_of([LIVE], [NLB, *NLB_TGS]) == ["status not written"]  # an LB older than the grace period
    assert drift_of([LIVE], [replace(NLB, created=NOW - 5), *NLB_TGS]) == []  # being created right now


def test_lb_missing_is_drift_only_once_confirmed() -> None:
    live = with_status(LIVE, NLB.dns_name)
    assert drift_of([live], []) == []  # the tagging API may just lag behind
    view = View({"default/web": live}, [])
    assert d.missing_candidates(view, C) == [(Kind.NLB, NLB.name)]
    assert drift_of([live], [], missing={NLB.name}) == [
        f"load balancer {NLB.name} missing while the status shows {NLB.dns_name}"
    ]


def test_clb_drift() -> None:
    s = with_status(CLB_SVC, "x")
    lb = clb_of(CLB_SVC, dns_name="x")
    assert lb.clb is not None
    assert drift_of([s], [lb]) == []
    changed = replace(lb.clb, listeners={**lb.clb.listeners, 80: replace(lb.clb.listeners[80], instance_port=1)})
    assert drift_of([s], [replace(lb, clb=changed)]) == ["listeners 80 changed or unexpected", "listeners 80 missing"]
    unhealthy = replace(lb.clb, health=replace(lb.clb.health, interval=99))  # type: ignore[arg-type]
    assert drift_of([s], [replace(lb, clb=unhealthy)]) == ["health check changed"]


def test_a_pending_cleanup_with_its_lb_still_there_is_requeued() -> None:
    pending = {**LIVE, "metadata": {**LIVE["metadata"], "finalizers": [p.FINALIZER]}, "spec": {"type": "ClusterIP"}}
    assert wanted(pending, C) is None
    assert drift_of([pending], [NLB]) == ["load balancer cleanup pending"]
    assert drift_of([pending], []) == []


def test_lbs_without_our_uid_tag_are_never_judged():
    """cloud-provider-aws, and the controller EKS runs for class-less Services, tag LBs with the cluster and the
    service name like us, but never with our UID tag: they are not ours to sweep."""
    assert owner_of(replace(NLB, tags=tags_for(LIVE, uid=False)), C) is None
    assert owner_of(NLB, C) is not None


def test_our_lb_of_a_class_less_service_we_no_longer_claim_is_an_orphan():
    assert judge(NLB, [LIVE], claim_unclassed=True) == (False, "in-use")
    assert judge(NLB, [LIVE], claim_unclassed=False) == (True, "other-controller")


# -- the cluster's shared client-facing groups ------------------------------------------------------------------------
def shared_group(role: str, gid: str = "sg-shared") -> Resource:
    tags = {names.cluster_tag_key(CLUSTER): "owned", "serverless-ccm/role": role}
    return Resource(Kind.SECURITY_GROUP, f"arn:security-group/{gid}", gid, f"serverless-ccm-{role}", tags)


@pytest.mark.parametrize("role", ["frontend-listeners", "frontend-default"])
def test_a_shared_listener_group_no_lb_carries_is_collected_after_the_grace(role: str) -> None:
    group = shared_group(role)
    carried = replace(NLB, security_groups=frozenset({group.id}))
    assert judge(group, [LIVE], [carried]) == (False, "in-use")
    assert judge(group, [LIVE], [NLB]) == (True, "unused-shared-group")
    view = View({}, [group])
    (first,) = decide(view, {}, NOW, GRACE, C)
    assert first.action is Action.MARK
    (later,) = decide(view, {group.key: NOW - GRACE}, NOW, GRACE, C)
    assert later.action is Action.DELETE and later.reason == "unused-shared-group"


def test_the_backend_group_and_another_clusters_shared_groups_are_never_judged() -> None:
    backend = shared_group("backend")
    other = replace(
        shared_group("frontend-listeners"),
        tags={"kubernetes.io/cluster/other": "owned", "serverless-ccm/role": "frontend-listeners"},
    )
    assert owner_of(backend, C) is None and owner_of(other, C) is None
    assert decide(View({}, [backend, other]), {}, NOW, GRACE, C) == []
