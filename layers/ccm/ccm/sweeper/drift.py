"""Drift detection as pure functions: does a live Service's load balancer still look like what the Service asks?

The drivers' own planners answer it: the desired LB (ccm.aws.nlb_model.desired_nlb / clb_model.desired_clb) is
planned against what the inventory read, and a plan holding a structural operation means someone changed the LB
behind our back. Only what the inventory reads anyway is compared (listeners, target groups and their health
checks, CLB health check and certificates); targets are the membership updater's business and attributes would
cost one read per LB, so both are left out. A drifted Service is re-enqueued (SYNC), never repaired here: the
reconciler stays the only writer of a live LB.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from ccm.aws import clb_model, names
from ccm.aws import nlb_model as nm
from ccm.contracts import kube as p
from ccm.contracts.cloud import InvalidServiceConfig, KubeObject
from ccm.contracts.cluster import Cluster
from ccm.sweeper.model import Kind, Resource, View, Wanted, cleanup_pending, wanted


@dataclass(frozen=True, slots=True)
class Drift:
    key: str  # namespace/name
    service: KubeObject
    reasons: tuple[str, ...]


def nlb_drift(want: Wanted, lb: Resource, target_groups: Mapping[str, Resource], cluster: Cluster) -> list[str]:
    try:
        desired = nm.desired_nlb(want.service, want.config, (), cluster.name, cluster.vpc_id)
    except InvalidServiceConfig:
        return []
    attached = {
        arn: tg.target_group
        for arn in lb.forwards_to
        if (tg := target_groups.get(arn)) is not None and tg.target_group is not None
    }
    observed = nm.ObservedNLB(lb.id, lb.dns_name, "", list(lb.listeners), attached)
    port_of = {ls.arn: ls.port for ls in lb.listeners}
    reasons: list[str] = []
    for op in nm.plan(desired, observed):
        if isinstance(op, nm.CreateTargetGroup):
            reasons.append(f"target group {op.spec.name} missing")
        elif isinstance(op, nm.ModifyTargetGroup):
            reasons.append(f"health check of target group {op.name} changed")
        elif isinstance(op, nm.CreateListener):
            reasons.append(f"listener {op.port} missing")
        elif isinstance(op, nm.ModifyListener):
            reasons.append(f"listener {port_of.get(op.arn, '?')} changed")
        elif isinstance(op, nm.DeleteListener):
            reasons.append(f"unexpected listener {port_of.get(op.arn, '?')}")
    return reasons


def clb_drift(want: Wanted, lb: Resource, cluster: Cluster) -> list[str]:
    if lb.clb is None:
        return []
    desired = clb_model.desired_clb(want.service, want.config, (), cluster.name)
    reasons: list[str] = []
    for op in clb_model.plan(desired, lb.clb, cluster.name):
        if isinstance(op, clb_model.DeleteListeners):
            reasons.append(f"listeners {', '.join(map(str, op.ports))} changed or unexpected")
        elif isinstance(op, clb_model.CreateListeners):
            reasons.append(f"listeners {', '.join(str(ls.port) for ls in op.listeners)} missing")
        elif isinstance(op, clb_model.SetCertificate):
            reasons.append(f"certificate of listener {op.port} changed")
        elif isinstance(op, clb_model.ConfigureHealthCheck):
            reasons.append("health check changed")
    return reasons


def _hostnames(svc: KubeObject) -> list[str]:
    ingress = ((svc.get("status") or {}).get("loadBalancer") or {}).get("ingress") or []
    return [str(i["hostname"]) for i in ingress if i.get("hostname")]


def missing_candidates(view: View, cluster: Cluster) -> list[tuple[Kind, str]]:
    """LBs the status says exist but the tagging API did not list: to confirm by name (it lags behind)."""
    found: list[tuple[Kind, str]] = []
    for svc in view.services.values():
        want = wanted(svc, cluster)
        if want is not None and _hostnames(svc) and view.lb(want.lb_name, want.kind) is None:
            found.append((want.kind, want.lb_name))
    return found


def find_drift(view: View, missing: set[str], now: float, grace_seconds: float, cluster: Cluster) -> list[Drift]:
    """Services to re-enqueue, with why. `missing`: LB names confirmed absent (see missing_candidates)."""
    target_groups = {r.key: r for r in view.resources if r.kind is Kind.TARGET_GROUP}
    drifts: list[Drift] = []
    for key, svc in sorted(view.services.items()):
        uid = str(p.meta(svc).get("uid", ""))
        reasons: list[str] = []
        want = wanted(svc, cluster)
        if want is None:
            if uid and cleanup_pending(svc, cluster) and view.lb(names.load_balancer_name(uid)) is not None:
                reasons.append("load balancer cleanup pending")
        else:
            lb = view.lb(want.lb_name, want.kind)
            hostnames = _hostnames(svc)
            if lb is None:
                if hostnames and want.lb_name in missing:
                    reasons.append(f"load balancer {want.lb_name} missing while the status shows {hostnames[0]}")
            else:
                if want.kind is Kind.NLB:
                    reasons += nlb_drift(want, lb, target_groups, cluster)
                else:
                    reasons += clb_drift(want, lb, cluster)
                if hostnames and lb.dns_name and lb.dns_name not in hostnames:
                    reasons.append(f"status shows {hostnames[0]}, the load balancer is {lb.dns_name}")
                elif not hostnames and lb.created is not None and now - lb.created >= grace_seconds:
                    reasons.append("status not written")
        if reasons:
            drifts.append(Drift(key, svc, tuple(reasons)))
    return drifts
