"""The Kubernetes side of the contracts: objects are plain JSON dicts (exactly what the API server returned, to
be treated as read-only); the predicates of the upstream service controller (k8s.io/cloud-provider
controllers/service/controller.go) over them, which controllers and drivers must read alike; and the protocols
through which controllers read and write the API (implemented by ccm.k8s.kube.Kube, ccm.route.kube.RouteKube and
ccm.membership.nodes.MemberNodes).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any, Final, Protocol

from ccm.contracts.provider_id import instance_id_from_provider_id

# The spec.loadBalancerClass this controller answers to unless the stack names another (template.yaml).
DEFAULT_LOAD_BALANCER_CLASS: Final = "ccm.aws/serverless"

KubeObject = dict[str, Any]

FINALIZER: Final = "service.kubernetes.io/load-balancer-cleanup"
LB_TYPE_ANNOTATION: Final = "service.beta.kubernetes.io/aws-load-balancer-type"
# Annotation values that hand the Service to the AWS Load Balancer Controller.
FOREIGN_LB_TYPES: Final = frozenset({"external", "nlb-ip"})
EXCLUDE_LABEL: Final = "node.kubernetes.io/exclude-from-external-load-balancers"
TO_BE_DELETED_TAINT: Final = "ToBeDeletedByClusterAutoscaler"
# Karpenter's disruption taint (karpenter.sh/disrupted, effect NoSchedule): the node is being drained to go. The AWS
# Load Balancer Controller excludes such nodes since v2.12, as upstream does the cluster autoscaler's taint.
KARPENTER_DISRUPTED_TAINT: Final = ("karpenter.sh/disrupted", "NoSchedule")
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
    """StableLoadBalancerNodeSet (plus Karpenter's disruption taint): readiness, schedulability and providerID
    deliberately do not matter."""
    if meta(node).get("deletionTimestamp") is not None:
        return False
    if _excluded_by_label((meta(node).get("labels") or {}).get(EXCLUDE_LABEL)):
        return False
    return not any(_leaving(t) for t in spec(node).get("taints") or [])


def _leaving(taint: dict[str, Any]) -> bool:
    """A taint saying the node is about to go: the autoscaler's (any effect) or Karpenter's NoSchedule one."""
    key = taint.get("key")
    return key == TO_BE_DELETED_TAINT or (key, taint.get("effect")) == KARPENTER_DISRUPTED_TAINT


def instance_id(node: KubeObject) -> str | None:
    """The EC2 instance id of the node's providerID (ccm.contracts.provider_id), None without one."""
    return instance_id_from_provider_id(str(spec(node).get("providerID") or ""))


# -- what the controllers ask of the Kubernetes API ----------------------------------------------------------------
class KubeServices(Protocol):
    """The service controller's reads and writes (ccm.k8s.kube.Kube)."""

    def get_service(self, namespace: str, name: str) -> KubeObject | None: ...
    def set_finalizers(self, svc: KubeObject, finalizers: list[str]) -> KubeObject: ...
    def patch_load_balancer_status(self, svc: KubeObject, ingress: list[dict[str, Any]]) -> KubeObject | None:
        """The Service as written; None when it is gone or the name now holds another one."""
        ...

    def record_event(self, obj: KubeObject, event_type: str, reason: str, message: str) -> None: ...


class NodeLister(Protocol):
    def list_nodes(self) -> list[KubeObject]: ...


class Members(Protocol):
    """Member nodes of a Service (ccm.membership.nodes.MemberNodes) and the registry of LB Services."""

    def for_service(self, svc: KubeObject) -> list[KubeObject]: ...
    def register(self, svc: KubeObject, first_time: bool = False) -> None: ...
    def unregister(self, svc: KubeObject) -> None: ...


class RouteKubeApi(Protocol):
    """The route controller's reads and writes (ccm.route.kube.RouteKube). `node` of an event is the controller's
    own view of the node (ccm.route.plan.NodeRoutes): typed Any so that contracts import no controller."""

    def list_nodes(self) -> list[KubeObject]: ...
    def patch_node_status(self, name: str, patch: dict[str, Any]) -> bool: ...
    def record_node_event(self, node: Any, event_type: str, reason: str, message: str) -> None: ...


class KubeEndpoints(Protocol):
    """The reads and writes of `ip` targets and their readiness gates (ccm.k8s.endpoints.EndpointReads, which
    ccm.k8s.kube.Kube includes)."""

    def list_endpoint_slices(self, namespace: str, service_name: str) -> list[KubeObject]:
        """Every EndpointSlice labelled `kubernetes.io/service-name=<service_name>` (all pages)."""
        ...

    def pods_by_name(
        self, namespace: str, names: Collection[str], selector: Mapping[str, str] | None = None
    ) -> dict[str, KubeObject]:
        """The named pods that exist (name -> pod); `selector` is the Service's, for one LIST instead of GETs."""
        ...

    def patch_pod_condition(self, namespace: str, name: str, uid: str, condition: dict[str, str]) -> KubeObject | None:
        """Set one pod condition (merged by type) on pods/status; None when the pod is gone or is another one."""
        ...
