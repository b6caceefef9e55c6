"""The cloud contracts, after `k8s.io/cloud-provider` cloud.go.

Controllers depend only on these protocols; AWS drivers (ccm.aws.*) implement them. Kubernetes objects are
passed as plain JSON dicts (exactly what the API server returned, ccm.contracts.kube) and must be treated as
read-only.

The load balancer is stated once (`LoadBalancer`, after cloud.go's): what the service controller calls. Each type's
deployer behind it is the provider's business (ccm.aws.deployer). Every call that reads AWS state takes the pass's
`PassFlags` as an argument: nothing per-record is stored on a provider that several records share.

Also here: the ownership tags every resource made for a Service carries (what a controller reads in the answer of
`OwnershipReader`), and `CloudClients`, what a runtime shares with its drivers (its queues and the per-record
call counts), built by the composition roots (ccm.wiring) as ccm.aws.clients.AwsClients.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Protocol

from ccm.contracts.endpoints import IpBackends, IpTarget, ServicePortKey
from ccm.contracts.kube import KubeObject as KubeObject
from ccm.contracts.queues import MessageQueue
from ccm.contracts.readiness_gates import TargetHealth

# The wait signal lives with the retry policy; drivers keep importing it from here.
from ccm.retry import RetryError as RetryError


@dataclass(frozen=True, slots=True)
class PassFlags:
    """How much one reconcile of one Service looks at (decided per record by the services runtime).

    `thorough`: also look for what a crash may have orphaned (retries, resyncs, deletes).
    `check_attributes`: read and converge attributes (every pass but node-driven host updates).
    """

    thorough: bool = False
    check_attributes: bool = True
    # A first attempt: what this controller recorded it applied (`Applied`) may be trusted instead of re-read.
    trust_applied: bool = False
    # The Service had no finalizer when the pass began: no cloud call was ever made for it, so a load balancer of our
    # loadBalancerClass cannot exist yet and is created without looking (a claimed Service keeps the read:
    # cloud-provider-aws makes its load balancers under the same names, which we adopt).
    first_sight: bool = False
    # Other Services are being created in the same burst: a pass that creates an NLB stops once its hostname is
    # published (HostnamePublished) and hands the rest (target groups, listeners, targets) back to the queue, so
    # every CreateLoadBalancer of the burst goes before those calls, which draw from the same ELB token bucket
    # (ccm.retry.CONTINUATION_DELAY_SECONDS). A Classic ELB is made in one pass: its CreateLoadBalancer makes its
    # listeners, and it serves as soon as its instances are registered.
    hostname_first: bool = False
    # Which receive of the record this pass is (1: the first): bounds how often a pass asks to look again by itself
    # (the readiness gates' re-check), within the queue's receive budget.
    attempt: int = 1


ROUTINE = PassFlags()  # a first attempt of an ADDED/MODIFIED delta

# The ownership tags (cloud-provider-aws's service-name tag, plus ours for the UID) on every resource made for a
# Service: the drivers write them (ccm.aws.names.resource_tags), the service controller reads them in what
# `OwnershipReader.tags_for_uid` answers before a delete on a hint (ccm.service.decisions).
SERVICE_NAME_TAG: Final = "kubernetes.io/service-name"
SERVICE_UID_TAG: Final = "serverless-ccm/service-uid"


class CallCounting(Protocol):
    """Every SDK call made through the clients, counted per thread (ccm.aws.clients.CallCounter)."""

    def reset_thread(self) -> None: ...
    def thread_calls(self) -> Counter[str]:
        """Calls of the current thread by "service:Operation" since it last called reset_thread()."""
        ...

    def thread_throttles(self) -> int: ...
    def mutating(self, calls: Mapping[str, int]) -> int:
        """How many of `calls` change something (not a read)."""
        ...


class CloudClients(Protocol):
    """What a runtime shares with its drivers (ccm.aws.clients.AwsClients): the per-record call counts and its
    queues. No raw SDK client: tables and queues are reached through their contracts (ccm.contracts.store,
    ccm.contracts.queues), so no controller makes an AWS call of its own (pyproject's import contracts)."""

    @property
    def counter(self) -> CallCounting: ...

    def queue(self, url: str) -> MessageQueue:
        """The FIFO queue at `url`."""
        ...

    def queue_of_arn(self, arn: str) -> MessageQueue:
        """The queue an event source mapping names by ARN (its records' eventSourceARN)."""
        ...


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
class LoadBalancerWarning:
    """Something the driver could not apply and left as it is (e.g. a setting AWS fixes at creation)."""

    reason: str
    message: str


@dataclass(frozen=True, slots=True)
class Applied:
    """The checkpoint of what a driver last applied for a Service (ccm.aws.applied stores it with the membership
    table). The spec fingerprint and the target set are kept apart: a host update rewrites only `targets` and can
    never certify a spec change. `verified_at` is when a full read of AWS last confirmed it (0: never/must)."""

    uid: str
    lb_type: str  # "nlb" | "clb"
    fingerprint: str  # of the desired state without its targets (ccm.aws.applied.fingerprint)
    lb_id: str  # the NLB's ARN, the Classic ELB's name
    hostname: str
    target_groups: tuple[tuple[str, int], ...] = ()  # (ARN, traffic port) of each NLB target group
    targets: frozenset[str] = frozenset()  # instance ids registered
    security_groups: tuple[str, ...] = ()  # the load balancer's groups when applied
    verified_at: float = 0.0
    deleted: bool = False  # a tombstone: everything was deleted (kept a day, so echoes of the delete cost nothing)
    released: bool = False  # the LB and its target groups are deleted; only its own security group is left
    created_at: float = 0.0  # the LB's creation (epoch seconds): a young LB's groups may not be readable yet
    service_key: str = ""  # namespace/name of the Service it was applied for: a hint under another key proves nothing


@dataclass(frozen=True, slots=True)
class LoadBalancerStatus:
    ingress: tuple[Ingress, ...] = field(default_factory=tuple)
    # Not part of the API status: the reconciler turns each into a Warning event on the Service. (Upstream's
    # EnsureLoadBalancer can only fail; we converge everything else and still say what we did not do.)
    warnings: tuple[LoadBalancerWarning, ...] = field(default=(), compare=False)
    # What the annotations mean here that the upstream controllers read differently (ccm.aws.lbconfig.notices): Warning
    # events too, but only when the Service changed, not on every resync.
    notices: tuple[LoadBalancerWarning, ...] = field(default=(), compare=False)
    # What the driver applied (not part of the API status either): LoadBalancers stores it as the checkpoint.
    applied: Applied | None = field(default=None, compare=False)

    def to_api(self) -> dict[str, Any]:
        return {"ingress": [i.to_api() for i in self.ingress]} if self.ingress else {}


# Writes a status early (the hostname right after CreateLoadBalancer: clients wait on it, not on the listeners).
Publish = Callable[[LoadBalancerStatus], None]


class HostnamePublished(Exception):
    """A driver's hostname-first pass (PassFlags.hostname_first) ends here: the LB was created and its hostname
    published; the rest is made by the next pass."""


class ImplementedElsewhere(Exception):
    """The service belongs to another controller (e.g. the AWS Load Balancer Controller)."""


class InvalidServiceConfig(ValueError):
    """Only a change of the Service can cure it (bad annotation, forbidden field): a Warning, no AWS change, no
    retry until the Service changes. Which AWS answers count as this: `ccm.aws.refusals`."""


class CloudStateError(RuntimeError):
    """The Service is fine but AWS does not (yet) hold what it needs: a certificate, group, subnet or address it
    names is missing, subnets are untagged, a quota is reached. A Warning and a retry with backoff, as upstream
    retries every failed sync; raised before the first write, so nothing was changed."""


class Desired(Protocol):
    """One pass's desired state of a Service's load balancer, built once by `LoadBalancer.desire` (pure: the
    Service's annotations and spec are read there and nowhere else in the pass; ccm.aws.model.LoadBalancerModel).
    Every later call of the pass takes it, so nothing parses the Service again."""

    @property
    def service(self) -> KubeObject: ...

    @property
    def uid(self) -> str: ...

    @property
    def health_check_interval(self) -> int:
        """Seconds between two health checks of a target: when its health is worth reading again."""
        ...

    @property
    def target_type(self) -> str:
        """`instance`: the targets are the member nodes; `ip`: the pods of the Service's EndpointSlices, which the
        controller reads and passes (`endpoints`) to ensure and update."""
        ...


class LoadBalancer(Protocol):
    """What the service controller calls: upstream cloud.go's LoadBalancer (get, ensure, update, ensure deleted),
    with the desired state built once per pass (`desire`), the checkpoint's one-read answer (`ensure_unchanged`)
    and the two by-UID calls a Service that is gone or was re-created under its name needs. The provider behind it
    (ccm.aws.balancers.LoadBalancers) picks the type and its deployers; no cluster name is passed: the provider
    was built for one cluster (ccm.contracts.cluster.Cluster)."""

    def desire(self, service: KubeObject) -> Desired:
        """Pure: the Service's desired load balancer; raises ImplementedElsewhere or InvalidServiceConfig."""
        ...

    def get_load_balancer(self, service: KubeObject) -> tuple[LoadBalancerStatus | None, bool]:
        """Status and existence of the LB this controller created for the service (either type)."""
        ...

    def ensure_unchanged(self, desired: Desired) -> LoadBalancerStatus | None:
        """What was applied still stands (the checkpoint matches the desired spec, is not due for a full read, and
        the LB is there: one AWS read): its status. None: a full ensure is needed. It says nothing of `ip`
        targets (not checkpointed): the caller converges them next (`update_load_balancer`)."""
        ...

    def ensure_load_balancer(
        self,
        desired: Desired,
        nodes: Sequence[KubeObject],
        flags: PassFlags = ROUTINE,
        publish: Publish | None = None,
        endpoints: IpBackends | Sequence[KubeObject] = (),
    ) -> LoadBalancerStatus:
        """Create or converge the LB; raises RetryError, InvalidServiceConfig or CloudStateError. `publish` is
        called with the status as soon as a new LB has its DNS name, before the rest of it is made. `endpoints`:
        what the controller read for `ip` targets (the Service's EndpointSlices, and the pods a gate may hold)."""
        ...

    def update_load_balancer(
        self,
        desired: Desired,
        nodes: Sequence[KubeObject],
        flags: PassFlags = ROUTINE,
        endpoints: IpBackends | Sequence[KubeObject] = (),
    ) -> None:
        """Converge only the backends (targets) to the given member nodes, or EndpointSlices for `ip` targets."""
        ...

    def ensure_load_balancer_deleted(self, service: KubeObject) -> None:
        """Delete everything made for the service (whatever its annotations say now); idempotent."""
        ...

    def ip_target_health(self, desired: Desired) -> dict[tuple[ServicePortKey, IpTarget], TargetHealth]:
        """The health AWS reports of each `ip` target, by the Service port it serves (the readiness gates)."""
        ...

    def delete_for_uid(self, uid: str) -> None:
        """Delete the LB of a UID whose Service is gone (or was replaced under the same name), of any type."""
        ...

    def applied_for(self, uid: str, service_key: str | None = None) -> bool | None:
        """True: this controller applied an LB for the UID (for the Service `service_key`, when given) and did not
        delete it; False: it deleted everything (a tombstone); None: no record (never, made before checkpoints
        existed, or for another key: a message naming a UID under another Service's key is a forgery or a mistake):
        look at AWS."""
        ...


class AppliedStore(Protocol):
    """Where the checkpoints live (ccm.aws.applied.AppliedTable)."""

    def get(self, uid: str) -> Applied | None: ...
    def put(self, applied: Applied) -> None: ...
    def put_targets(self, uid: str, fingerprint: str, targets: frozenset[str]) -> None:
        """Only the target set, and only while the stored fingerprint is still `fingerprint`."""
        ...

    def forget(self, uid: str) -> None:
        """Drop the checkpoint (the next pass reads AWS in full)."""
        ...

    def tombstone(self, uid: str) -> None: ...


class OwnershipReader(Protocol):
    """The tags of every resource named for a UID (ccm.aws.ownership.Ownership)."""

    def tags_for_uid(self, uid: str) -> list[dict[str, str]]: ...


@dataclass(frozen=True, slots=True)
class InstanceMetadata:
    provider_id: str
    instance_type: str
    zone: str
    region: str
    zone_id: str = ""
    addresses: tuple[tuple[str, str], ...] = ()  # (type, address) in the order to publish
    state: str = ""  # EC2 instance state name: pending, running, shutting-down, terminated, stopping, stopped

    @property
    def exists(self) -> bool:
        """InstanceExists upstream: false once the instance is terminated (not found is a missing metadata)."""
        return self.state != "terminated"

    @property
    def shutdown(self) -> bool:
        """InstanceShutdown upstream: true only for a stopped instance (a stopped instance still exists)."""
        return self.state == "stopped"


class InstanceNotFound(LookupError):
    """No instance backs the node (not found by providerID, or by private DNS name when it has none)."""


class Instances(Protocol):
    """Node initialisation and lifecycle (InstancesV2 upstream), plus a batched lookup.

    `instances_metadata` is our refinement: the safety pass and event handlers look many nodes up in one call
    instead of one DescribeInstances per node. Its answer maps node name -> metadata, or None when the lookup
    was made and found nothing (not found, or only terminated instances when looked up by name). Nodes whose
    providerID belongs to another provider are absent: nothing can be said about them, so nothing is done.
    """

    def instance_exists(self, node: KubeObject) -> bool: ...

    def instance_shutdown(self, node: KubeObject) -> bool: ...

    def instance_metadata(self, node: KubeObject) -> InstanceMetadata:
        """Raises InstanceNotFound."""

    def instances_metadata(self, nodes: Sequence[KubeObject]) -> dict[str, InstanceMetadata | None]: ...


@dataclass(frozen=True, slots=True)
class Route:
    """One VPC route as the route controller sees it (cloud.go Route, plus where it lives and what it targets)."""

    name: str  # "<cluster>-<destination>", as cloud-provider-aws names listed routes
    target_node: str  # node name when known ("" when only the instance is known)
    destination_cidr: str  # exactly as AWS returned it (IPv4 or IPv6)
    blackhole: bool = False
    route_table_id: str = ""
    target_instance: str = ""  # instance id the route points to ("" for gateways, NAT, ENI-only, ...)


@dataclass(frozen=True, slots=True)
class RouteTable:
    route_table_id: str
    routes: tuple[Route, ...] = ()


class Routes(Protocol):
    """VPC routes for pod CIDRs (cloud.go Routes), refined for several cluster-tagged route tables.

    Upstream insists on exactly one table; we manage every table tagged for the cluster (e.g. one per AZ), so the
    table is part of the Route, and a route table listing is separate from a route listing (a table without any
    route of ours still needs routes). ReplaceRoute is explicit: the planner decides when a blackhole (or a route
    of ours to a stale instance) is overwritten, instead of CreateRoute deleting blackholes behind its back.
    """

    def list_route_tables(self, cluster_name: str) -> list[RouteTable]:
        """Every route table tagged for the cluster in our VPC, with its routes (one filtered read)."""

    def list_routes(self, cluster_name: str) -> list[Route]: ...

    def create_route(self, cluster_name: str, name_hint: str, route: Route) -> None:
        """Create route.destination_cidr -> route.target_instance in route.route_table_id."""

    def replace_route(self, cluster_name: str, route: Route) -> None:
        """Point an existing destination (a blackhole, or a route of ours to another instance) at the target."""

    def delete_route(self, cluster_name: str, route: Route) -> None: ...

    def disable_source_dest_check(self, instance_ids: Sequence[str]) -> dict[str, str]:
        """Read SourceDestCheck first; turn it off where it is on. Returns {instance id: problem} for instances
        that cannot take routes (missing, terminated); the others are ready."""
