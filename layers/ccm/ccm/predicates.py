"""Predicates of the upstream service controller (upstream-controllers.md §1), over plain JSON dicts.

Shared by the service controller, the sweeper, membership and the load-balancer drivers (which Services and
nodes are ours), so it depends on nothing of theirs.
"""

from __future__ import annotations

from typing import Any, Final

KubeObject = dict[str, Any]

FINALIZER: Final = "service.kubernetes.io/load-balancer-cleanup"
LB_TYPE_ANNOTATION: Final = "service.beta.kubernetes.io/aws-load-balancer-type"
# Annotation values that hand the Service to the AWS Load Balancer Controller.
FOREIGN_LB_TYPES: Final = frozenset({"external", "nlb-ip"})
EXCLUDE_LABEL: Final = "node.kubernetes.io/exclude-from-external-load-balancers"
TO_BE_DELETED_TAINT: Final = "ToBeDeletedByClusterAutoscaler"
_GO_TRUE: Final = frozenset({"1", "t", "T", "TRUE", "true", "True"})
_GO_FALSE: Final = frozenset({"0", "f", "F", "FALSE", "false", "False"})


def spec(obj: KubeObject) -> dict[str, Any]:
    return obj.get("spec") or {}


def meta(obj: KubeObject) -> dict[str, Any]:
    return obj.get("metadata") or {}


def annotations_of(obj: KubeObject) -> dict[str, str]:
    return meta(obj).get("annotations") or {}


def has_finalizer(svc: KubeObject) -> bool:
    return FINALIZER in (meta(svc).get("finalizers") or [])


def is_load_balancer_type(svc: KubeObject) -> bool:
    return spec(svc).get("type") == "LoadBalancer"


def belongs_to_us(svc: KubeObject, our_class: str, claim_unclassed: bool = True) -> bool:
    """False for Services another controller implements (foreign loadBalancerClass, LBC annotations), and for
    class-less ones when we do not claim those (EKS: its built-in controller serves them and cannot be turned off).
    """
    lb_class = spec(svc).get("loadBalancerClass")
    if lb_class and lb_class != our_class:
        return False
    if not lb_class and not claim_unclassed:
        return False
    return annotations_of(svc).get(LB_TYPE_ANNOTATION, "").strip().lower() not in FOREIGN_LB_TYPES


def wants_load_balancer(svc: KubeObject, our_class: str, claim_unclassed: bool = True) -> bool:
    return is_load_balancer_type(svc) and belongs_to_us(svc, our_class, claim_unclassed)


def needs_cleanup(svc: KubeObject) -> bool:
    return has_finalizer(svc) and (meta(svc).get("deletionTimestamp") is not None or not is_load_balancer_type(svc))


def _excluded_by_label(value: str | None) -> bool:
    if value is None:
        return False
    # Go ParseBool: true values exclude, and so does anything unparsable (including "").
    return value not in _GO_FALSE


def is_member_node(node: KubeObject) -> bool:
    """StableLoadBalancerNodeSet: readiness, schedulability and providerID deliberately do not matter."""
    if meta(node).get("deletionTimestamp") is not None:
        return False
    if _excluded_by_label((meta(node).get("labels") or {}).get(EXCLUDE_LABEL)):
        return False
    return not any(t.get("key") == TO_BE_DELETED_TAINT for t in spec(node).get("taints") or [])


def member_nodes(nodes: list[KubeObject]) -> list[KubeObject]:
    return [n for n in nodes if is_member_node(n)]


def instance_id(node: KubeObject) -> str | None:
    """The EC2 instance id from `aws:///<az>/<id>` (or the legacy `aws:///<id>`)."""
    provider_id = spec(node).get("providerID") or ""
    if not provider_id.startswith("aws://"):
        return None
    last = provider_id.rstrip("/").rsplit("/", 1)[-1]
    return last if last.startswith("i-") else None
