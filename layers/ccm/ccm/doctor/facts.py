"""Plain data the checks read: gathered by `ccm.doctor.gather` from AWS and Kubernetes, built by hand in tests.

A field left `None` means "not gathered" (e.g. before deploy there is no stack); an `error` string means the read
was attempted and failed, which the checks report as `unknown` (or `fail` where unreachability is the finding).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

RoleKind = Literal["services", "nodes", "routes", "sweeper", "watcher"]


@dataclass
class NetworkFacts:
    vpc_id: str
    subnets: list[dict[str, Any]]  # ec2 DescribeSubnets items of the VPC
    route_tables: list[dict[str, Any]]  # ec2 DescribeRouteTables items of the VPC
    security_groups: list[dict[str, Any]]  # the VPC's groups carrying the cluster tag key
    instances: list[dict[str, Any]]  # the VPC's live instances carrying the cluster tag key


@dataclass
class RoleFacts:
    kind: RoleKind
    arn: str
    # (action, resource, context name) -> EvalDecision ("allowed" | "implicitDeny" | "explicitDeny")
    decisions: dict[tuple[str, str, str], str] = field(default_factory=dict)
    error: str | None = None  # the simulation could not run (no permission to simulate, not implemented ...)


@dataclass
class QueueFacts:
    name: str  # the stack output it came from, e.g. ServicesDLQUrl
    url: str
    dlq: bool
    attributes: dict[str, str] | None = None
    error: str | None = None


@dataclass
class AccessEntryFacts:
    kind: RoleKind
    role_arn: str
    groups: list[str] | None = None  # None: no access entry for the role
    error: str | None = None


@dataclass(frozen=True)
class RbacRule:
    """One access review: `verb` on `resource` (plural) [`subresource`] of API group `group` ("" is the core group,
    as in a Role's apiGroups and a SubjectAccessReview's resourceAttributes.group)."""

    verb: str
    resource: str
    subresource: str = ""
    allowed: bool = True  # what we expect: True = needed, False = must NOT be granted (least privilege)
    group: str = ""

    def __str__(self) -> str:
        """As kubectl spells it: `list endpointslices.discovery.k8s.io`, `patch services/status`."""
        qualified = self.resource + (f".{self.group}" if self.group else "")
        return f"{self.verb} {qualified}{'/' + self.subresource if self.subresource else ''}"


@dataclass
class RbacFacts:
    subject: str  # "group serverless-ccm", "serviceaccount ns/name"
    results: dict[RbacRule, bool] = field(default_factory=dict)  # rule -> allowed by the cluster
    error: str | None = None


@dataclass
class StackFacts:
    name: str
    outputs: dict[str, str]
    parameters: dict[str, str]
    resources: dict[str, tuple[str, str]]  # logical id -> (resource type, physical id)

    @property
    def routes_enabled(self) -> bool:
        return self.parameters.get("EnableRoutes", "false") == "true" and self.nodes_enabled

    @property
    def nodes_enabled(self) -> bool:
        return self.parameters.get("EnableNodes", "true") == "true"

    @property
    def sweeper_enabled(self) -> bool:
        return self.parameters.get("EnableSweeper", "true") == "true"


@dataclass
class WatcherFacts:
    """The watcher as deployed: its Deployment, the environment its pods get, the heartbeats CloudWatch counted."""

    namespace: str
    name: str
    found: bool = False  # the Deployment exists
    desired: int = 0  # spec.replicas
    ready: int = 0  # status.readyReplicas
    env: dict[str, str] = field(default_factory=dict)  # the containers' env: envFrom ConfigMaps, then env
    error: str | None = None  # Deployment/ConfigMaps not readable (no kubeconfig, unreachable, forbidden)
    heartbeats: float | None = None  # Sum of the services queue's NumberOfMessagesDeleted; None when not read
    heartbeat_window_minutes: int = 15
    heartbeat_error: str | None = None
    # What (re)applies the watcher's manifests: `kubectl apply -k <the overlay in use>` (--overlay), else the
    # install command that renders one from the stack. Never `deploy/base`: it drops the overlay's identity.
    install_fix: str = "scripts/install-watcher (docs/deploy-watcher.md, Install)"


@dataclass
class Facts:
    cluster: str
    region: str
    after_deploy: bool
    routes_enabled: bool
    network: NetworkFacts | None = None
    network_error: str | None = None
    stack: StackFacts | None = None
    stack_error: str | None = None
    roles: list[RoleFacts] = field(default_factory=list)
    missing_roles: list[RoleKind] = field(default_factory=list)  # expected but not found in the stack
    queues: list[QueueFacts] = field(default_factory=list)
    kube_auth_mode: str = "eks"
    cluster_auth_mode: str | None = None  # EKS accessConfig.authenticationMode when readable
    access_entries: list[AccessEntryFacts] = field(default_factory=list)
    rbac: list[RbacFacts] = field(default_factory=list)
    rbac_error: str | None = None  # no Kubernetes access at all (no kubeconfig / cluster unreachable)
    watcher: WatcherFacts | None = None
