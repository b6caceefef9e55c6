"""The cloud contracts, after `k8s.io/cloud-provider` cloud.go (seed 001).

Controllers depend only on these protocols; AWS drivers (ccm.aws.*) implement them. Kubernetes objects are
passed as plain JSON dicts (exactly what the API server returned) and must be treated as read-only.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

KubeObject = dict[str, Any]


@dataclass(frozen=True, slots=True)
class Ingress:
    hostname: str = ""
    ip: str = ""
    ip_mode: str = ""

    def to_api(self) -> dict[str, str]:
        out = {}
        if self.ip:
            out["ip"] = self.ip
            # An ip without ipMode compares unequal to what the API server defaults, re-patching forever.
            out["ipMode"] = self.ip_mode or "VIP"
        if self.hostname:
            out["hostname"] = self.hostname
        return out


@dataclass(frozen=True, slots=True)
class LoadBalancerStatus:
    ingress: tuple[Ingress, ...] = field(default_factory=tuple)

    def to_api(self) -> dict[str, Any]:
        return {"ingress": [i.to_api() for i in self.ingress]} if self.ingress else {}


class ImplementedElsewhere(Exception):
    """The service belongs to another controller (e.g. the AWS Load Balancer Controller)."""


class RetryError(Exception):
    """Not a failure: ask to be retried after a fixed delay (e.g. the LB is still provisioning)."""

    def __init__(self, message: str, delay_seconds: int) -> None:
        super().__init__(message)
        self.delay_seconds = delay_seconds


class InvalidServiceConfig(ValueError):
    """The Service asks for something we refuse (bad annotation, forbidden field): a Warning, no AWS change."""


class LoadBalancer(Protocol):
    def get_load_balancer(self, cluster_name: str, service: KubeObject) -> tuple[LoadBalancerStatus | None, bool]:
        """Status and existence of the LB this controller created for the service."""

    def get_load_balancer_name(self, cluster_name: str, service: KubeObject) -> str: ...

    def ensure_load_balancer(
        self, cluster_name: str, service: KubeObject, nodes: Sequence[KubeObject]
    ) -> LoadBalancerStatus:
        """Create or converge the LB; raises ImplementedElsewhere, RetryError or InvalidServiceConfig."""

    def update_load_balancer(self, cluster_name: str, service: KubeObject, nodes: Sequence[KubeObject]) -> None:
        """Converge only the backends (targets) to the given member nodes."""

    def ensure_load_balancer_deleted(self, cluster_name: str, service: KubeObject) -> None:
        """Delete everything made for the service; idempotent; never raises ImplementedElsewhere."""


@dataclass(frozen=True, slots=True)
class InstanceMetadata:
    provider_id: str
    instance_type: str
    zone: str
    region: str
    zone_id: str = ""
    addresses: tuple[tuple[str, str], ...] = ()  # (type, address) in the order to publish


class Instances(Protocol):
    """Node initialisation and lifecycle (InstancesV2 upstream); implemented with the node issue."""

    def instance_exists(self, node: KubeObject) -> bool: ...

    def instance_shutdown(self, node: KubeObject) -> bool: ...

    def instance_metadata(self, node: KubeObject) -> InstanceMetadata: ...


@dataclass(frozen=True, slots=True)
class Route:
    name: str
    target_node: str
    destination_cidr: str
    blackhole: bool = False


class Routes(Protocol):
    """VPC routes for pod CIDRs; implemented with the node/route issue."""

    def list_routes(self, cluster_name: str) -> list[Route]: ...

    def create_route(self, cluster_name: str, name_hint: str, route: Route) -> None: ...

    def delete_route(self, cluster_name: str, route: Route) -> None: ...
