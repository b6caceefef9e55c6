"""Sweeper decisions as pure functions over plain data: which cluster-tagged resources are orphans, and what to do
with each one this run (remember it, wait, delete it, or forget it).

Every function judges for one `Cluster` (ccm.contracts.cluster: name, tag key, class, claim of class-less Services,
default load balancer type), built once by the composition root; none takes the cluster name or its parts.

A resource is ours only if it carries `kubernetes.io/cluster/<name>=owned` (`Cluster.owns`), a service-name tag AND our
`serverless-ccm/service-uid` tag (we put it on everything we create, and on what we adopt): node security groups,
anything else merely tagged for the cluster, and load balancers of another controller (cloud-provider-aws, or the
one EKS runs in its control plane for class-less Services, which tags like us but never with our UID tag) are never
considered. It is owned by the Service named by its tags, of that UID. Orphan reasons, in order:

| reason            | when                                                                                |
|-------------------|-------------------------------------------------------------------------------------|
| service-gone      | no Service of that namespace/name                                                   |
| uid-mismatch      | the Service was re-created (another UID): the resource belongs to its predecessor   |
| (kept) cleanup-pending | the Service still carries our finalizer and needs cleanup: the reconciler's job |
| service-deleting  | the Service is being deleted and our finalizer is already gone                      |
| not-load-balancer | the Service is no longer type LoadBalancer                                          |
| other-controller  | the Service now belongs to another controller (loadBalancerClass, LBC annotations)  |
| (kept) config-invalid | its annotations do not parse: we cannot tell what it wants, so nothing goes     |
| wrong-kind        | a CLB while the Service wants an NLB (or the reverse; target groups are NLB-only)   |
| unreferenced      | a target group no listener of the live NLB forwards to, or a security group the live |
|                   | LB does not carry (health-check replacement, switch to bring-your-own groups)        |
| (kept) lb-pending | a target group or group of a Service whose LB does not exist (yet): drift repair     |
| unused-shared-group | a listener group (or the all-ports group of 0.2) that no load balancer of ours     |
|                   | carries any more; owner `CLUSTER_OWNER`. The backend group is never a candidate: it |
|                   | lives as long as the stack and goes with it (ccm.sweeper.teardown)                  |

Grace: an orphan is deleted only once it has been an orphan, continuously, for `grace` seconds (first sight is
remembered in the membership table, see docs/sweeper.md) AND, when AWS reports a creation time, was created more
than `grace` seconds ago. A resource that stops being an orphan is forgotten, so a later orphaning starts afresh.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Final

from ccm.aws import clb_model, names
from ccm.aws import nlb_model as nm
from ccm.aws import security_groups_model as sgm
from ccm.aws.lbconfig import LoadBalancerConfig, parse_load_balancer_config
from ccm.contracts import kube as p
from ccm.contracts.cloud import ImplementedElsewhere, InvalidServiceConfig, KubeObject
from ccm.contracts.cluster import Cluster


class Kind(enum.StrEnum):
    NLB = "nlb"
    CLB = "clb"
    TARGET_GROUP = "targetgroup"
    SECURITY_GROUP = "securitygroup"


# Dependencies first: an LB (its listeners go with it) before its target groups, groups last.
DELETE_ORDER: Final = {Kind.NLB: 0, Kind.CLB: 0, Kind.TARGET_GROUP: 1, Kind.SECURITY_GROUP: 2}
LOAD_BALANCERS: Final = frozenset({Kind.NLB, Kind.CLB})
# The cluster's client-facing shared groups: no Service owns them; collected once no LB of ours carries them.
COLLECTED_SHARED_ROLES: Final = frozenset({sgm.ROLE_LISTENERS, sgm.ROLE_FRONTEND})
CLUSTER_OWNER: Final = "(cluster)"


class Action(enum.StrEnum):
    KEEP = "keep"  # not an orphan
    MARK = "mark"  # an orphan seen for the first time: remember when
    WAIT = "wait"  # an orphan inside its grace period
    DELETE = "delete"  # an orphan past its grace period
    UNMARK = "unmark"  # was an orphan, is not any more: forget it


@dataclass(frozen=True, slots=True)
class Resource:
    """One cluster-tagged AWS resource as the inventory read it. `id` is what the delete call takes (ARN for ELBv2,
    name for a CLB, group id for a security group); `key` (the ARN) identifies it in the first-sight memory."""

    kind: Kind
    key: str
    id: str
    name: str
    tags: Mapping[str, str]
    created: float | None = None  # unix seconds; AWS reports it for load balancers only
    dns_name: str = ""
    security_groups: frozenset[str] = frozenset()  # load balancers: the groups they carry
    listeners: tuple[nm.ObservedListener, ...] = ()  # NLB
    clb: clb_model.ObservedCLB | None = None  # CLB: listeners, health check, groups
    target_group: nm.ObservedTargetGroup | None = None  # target group: name, protocol, port, health check

    @property
    def forwards_to(self) -> frozenset[str]:
        return frozenset(ls.target_group_arn for ls in self.listeners if ls.target_group_arn)


@dataclass(frozen=True, slots=True)
class Owner:
    key: str  # namespace/name
    uid: str | None  # None: not tagged (cloud-provider-aws resources)


@dataclass(frozen=True, slots=True)
class Decision:
    resource: Resource
    owner: Owner
    orphan: bool
    reason: str
    action: Action
    since: float | None = None  # first seen as an orphan (MARK: now)


@dataclass(frozen=True, slots=True)
class Wanted:
    """What a live Service wants, when it wants a load balancer from us and its configuration parses."""

    service: KubeObject
    config: LoadBalancerConfig
    lb_name: str

    @property
    def kind(self) -> Kind:
        return Kind.NLB if self.config.lb_type == "nlb" else Kind.CLB


@dataclass(slots=True)
class View:
    """The live state a run decides on: Services by key, our resources, and LBs by name."""

    services: dict[str, KubeObject]
    resources: list[Resource]
    lbs_by_name: dict[str, list[Resource]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for r in self.resources:
            if r.kind in LOAD_BALANCERS:
                self.lbs_by_name.setdefault(r.name, []).append(r)

    def lb(self, name: str, kind: Kind | None = None) -> Resource | None:
        return next((r for r in self.lbs_by_name.get(name, []) if kind is None or r.kind is kind), None)


def shared_role(resource: Resource, cluster: Cluster) -> str | None:
    """The role of one of the cluster's collected shared groups (listener groups, the legacy all-ports group)."""
    if resource.kind is not Kind.SECURITY_GROUP or not cluster.owns(resource.tags):
        return None
    role = resource.tags.get(sgm.ROLE_TAG)
    return role if role in COLLECTED_SHARED_ROLES else None


def owner_of(resource: Resource, cluster: Cluster) -> Owner | None:
    """The owning Service, or None when the resource is not ours to judge (no owned cluster tag, no Service tag).
    The cluster's collected shared groups are owned by the cluster (CLUSTER_OWNER)."""
    if not cluster.owns(resource.tags):
        return None
    if shared_role(resource, cluster) is not None:
        return Owner(CLUSTER_OWNER, None)
    key, uid = resource.tags.get(names.SERVICE_NAME_TAG, ""), resource.tags.get(names.SERVICE_UID_TAG, "")
    if key.count("/") != 1 or not uid:
        return None  # not made (nor adopted) by us: another controller's, whatever its cluster tag says
    return Owner(key, uid)


def services_by_key(services: Iterable[KubeObject]) -> dict[str, KubeObject]:
    return {f"{p.meta(s).get('namespace')}/{p.meta(s).get('name')}": s for s in services}


def _wants_load_balancer(svc: KubeObject, cluster: Cluster) -> bool:
    return p.wants_load_balancer(svc, cluster.load_balancer_class, cluster.claim_unclassed)


def cleanup_pending(svc: KubeObject, cluster: Cluster) -> bool:
    """The reconciler still owes this Service a cleanup (its DELETE/CLEANUP path runs on the next delta)."""
    return p.has_finalizer(svc) and (
        p.meta(svc).get("deletionTimestamp") is not None or not _wants_load_balancer(svc, cluster)
    )


def wanted(svc: KubeObject, cluster: Cluster) -> Wanted | None:
    """What the Service wants from us, or None when it wants nothing (or its configuration does not parse)."""
    if p.meta(svc).get("deletionTimestamp") is not None or not _wants_load_balancer(svc, cluster):
        return None
    try:
        config = parse_load_balancer_config(svc, default_lb_type=cluster.default_lb_type)
    except (InvalidServiceConfig, ImplementedElsewhere):
        return None
    return Wanted(svc, config, names.load_balancer_name(str(p.meta(svc).get("uid", ""))))


def orphan_reason(resource: Resource, owner: Owner, view: View, cluster: Cluster) -> tuple[bool, str]:
    """(orphan?, reason) for one resource; see the module table."""
    if owner.key == CLUSTER_OWNER:
        carried = any(resource.id in lb.security_groups for lb in view.resources if lb.kind in LOAD_BALANCERS)
        return (False, "in-use") if carried else (True, "unused-shared-group")
    svc = view.services.get(owner.key)
    if svc is None:
        return True, "service-gone"
    uid = str(p.meta(svc).get("uid", ""))
    lb_name = names.load_balancer_name(uid)
    if owner.uid is not None and owner.uid != uid:
        return True, "uid-mismatch"
    if owner.uid is None and resource.kind in LOAD_BALANCERS and resource.name != lb_name:
        return True, "uid-mismatch"
    if cleanup_pending(svc, cluster):
        return False, "cleanup-pending"
    if p.meta(svc).get("deletionTimestamp") is not None:
        return True, "service-deleting"
    if not p.is_load_balancer_type(svc):
        return True, "not-load-balancer"
    if not p.belongs_to_us(svc, cluster.load_balancer_class, cluster.claim_unclassed):
        return True, "other-controller"
    want = wanted(svc, cluster)
    if want is None:
        return False, "config-invalid"
    if resource.kind in LOAD_BALANCERS:
        return (True, "wrong-kind") if resource.kind is not want.kind else (False, "in-use")
    if resource.kind is Kind.TARGET_GROUP:
        if want.kind is not Kind.NLB:
            return True, "wrong-kind"
        lb = view.lb(lb_name, Kind.NLB)
        if lb is None:
            return False, "lb-pending"
        return (False, "in-use") if resource.key in lb.forwards_to else (True, "unreferenced")
    lb = view.lb(lb_name, want.kind) or view.lb(lb_name)
    if lb is None:
        return False, "lb-pending"
    return (False, "in-use") if resource.id in lb.security_groups else (True, "unreferenced")


def decide(
    view: View, marks: Mapping[str, float], now: float, grace_seconds: float, cluster: Cluster
) -> list[Decision]:
    """One decision per resource that is ours to judge (see owner_of), in deletion order."""
    decisions: list[Decision] = []
    for resource in view.resources:
        owner = owner_of(resource, cluster)
        if owner is None:
            continue
        orphan, reason = orphan_reason(resource, owner, view, cluster)
        since = marks.get(resource.key)
        if not orphan:
            action = Action.UNMARK if since is not None else Action.KEEP
        elif since is None:
            action, since = Action.MARK, now
        else:
            old_enough = resource.created is None or now - resource.created >= grace_seconds
            action = Action.DELETE if now - since >= grace_seconds and old_enough else Action.WAIT
        decisions.append(Decision(resource, owner, orphan, reason, action, since))
    return sorted(decisions, key=lambda d: (DELETE_ORDER[d.resource.kind], d.resource.key))


def forgotten(marks: Mapping[str, float], decisions: Iterable[Decision]) -> list[str]:
    """Remembered orphans no longer judged (deleted by someone, or no longer ours to judge): drop their memory."""
    present = {d.resource.key for d in decisions}
    return sorted(k for k in marks if k not in present)
