"""Classic ELB decisions as pure functions: the desired CLB of a Service, what AWS reports, and the plan between.

A CLB is one resource with everything inline (listeners, policies, health check, attributes, subnets, groups,
instances), so the plan is a list of small in-place edits, batched where the API takes a list. Listeners cannot be
modified (only their certificate), so a listener whose protocol or instance port changes is deleted and re-created
on the same port. An LB that already matches plans no operation at all.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Final

from ccm.aws import names
from ccm.aws.frontend_model import interim_groups
from ccm.aws.lbconfig import TRAFFIC_PORT, HealthCheck, LoadBalancerConfig
from ccm.contracts import kube as p

# Policy names as cloud-provider-aws makes them, so policies on adopted LBs are recognised and reused.
PROXY_POLICY: Final = "k8s-proxyprotocol-enabled"
SSL_POLICY_PREFIX: Final = "k8s-SSLNegotiationPolicy-"
# What AWS attaches to a secure CLB listener created without a policy; restored when the annotation is removed.
AWS_DEFAULT_SSL_POLICY: Final = "ELBSecurityPolicy-2016-08"
SECURE_PROTOCOLS: Final = frozenset({"SSL", "HTTPS"})


@dataclass(frozen=True, slots=True)
class ListenerSpec:
    port: int
    protocol: str
    instance_port: int
    instance_protocol: str
    certificate: str = ""

    @property
    def secure(self) -> bool:
        return self.protocol in SECURE_PROTOCOLS

    def same_but_certificate(self, other: ListenerSpec) -> bool:
        """True when only SetLoadBalancerListenerSSLCertificate is needed (no delete/re-create)."""
        return replace(self, certificate="") == replace(other, certificate="")


@dataclass(frozen=True, slots=True)
class Attributes:
    cross_zone: bool = False
    draining: bool = False
    draining_timeout: int = 300
    idle_timeout: int = 60
    access_log: bool = False
    log_interval: int = 60
    log_bucket: str = ""
    log_prefix: str = ""


# What a CLB made by CreateLoadBalancer has (API defaults differ from the console's): no read needed after create.
CREATED_ATTRIBUTES: Final = Attributes()


@dataclass(frozen=True, slots=True)
class CLBSpec:
    name: str
    scheme: str
    tags: Mapping[str, str]
    listeners: tuple[ListenerSpec, ...]
    health: HealthCheck
    attributes: Attributes
    ssl_policy: str  # reference security policy of the secure listeners; "" = leave AWS's
    proxy_protocol: bool
    instances: frozenset[str]
    subnets: tuple[str, ...]
    security_groups: tuple[str, ...] | None  # None: security groups are left alone


@dataclass(slots=True)
class ObservedCLB:
    name: str
    dns_name: str
    scheme: str
    listeners: dict[int, ListenerSpec] = field(default_factory=dict)
    listener_policies: dict[int, tuple[str, ...]] = field(default_factory=dict)
    policies: frozenset[str] = frozenset()  # the LB's "other" policies (proxy protocol, SSL negotiation)
    backend_policies: dict[int, tuple[str, ...]] = field(default_factory=dict)
    health: HealthCheck | None = None
    attributes: Attributes | None = CREATED_ATTRIBUTES  # None: not read, left alone
    instances: frozenset[str] = frozenset()
    subnets: frozenset[str] = frozenset()
    security_groups: frozenset[str] = frozenset()
    tags: Mapping[str, str] = field(default_factory=dict)


# Plan operations, one AWS call each.
@dataclass(frozen=True, slots=True)
class AddTags:
    tags: tuple[tuple[str, str], ...]


@dataclass(frozen=True, slots=True)
class DeleteListeners:
    ports: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class CreateListeners:
    listeners: tuple[ListenerSpec, ...]


@dataclass(frozen=True, slots=True)
class SetCertificate:
    port: int
    certificate: str


@dataclass(frozen=True, slots=True)
class CreatePolicy:
    name: str
    type_name: str
    attributes: tuple[tuple[str, str], ...]


@dataclass(frozen=True, slots=True)
class SetListenerPolicies:
    port: int
    policies: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class SetBackendPolicies:
    instance_port: int
    policies: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class DeletePolicy:
    name: str


@dataclass(frozen=True, slots=True)
class ConfigureHealthCheck:
    health: HealthCheck


@dataclass(frozen=True, slots=True)
class ModifyAttributes:
    attributes: tuple[tuple[str, tuple[tuple[str, Any], ...]], ...]  # (group, ((key, value), ...)) as the API wants

    def to_api(self) -> dict[str, dict[str, Any]]:
        return {group: dict(values) for group, values in self.attributes}


@dataclass(frozen=True, slots=True)
class AttachSubnets:
    subnets: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class DetachSubnets:
    subnets: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class ApplySecurityGroups:
    groups: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class RegisterInstances:
    instance_ids: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class DeregisterInstances:
    instance_ids: tuple[str, ...]


_LISTENER_OPS = AddTags | DeleteListeners | CreateListeners | SetCertificate | CreatePolicy | SetListenerPolicies
_OTHER_OPS = SetBackendPolicies | DeletePolicy | ConfigureHealthCheck | ModifyAttributes | AttachSubnets | DetachSubnets
Operation = _LISTENER_OPS | _OTHER_OPS | ApplySecurityGroups | RegisterInstances | DeregisterInstances


# -- desired ----------------------------------------------------------------------------------------------------------
def health_check(config: LoadBalancerConfig) -> HealthCheck:
    """The configured health check with its port resolved ("traffic-port" is the first listener's nodePort, as
    cloud-provider-aws does), so its `target` is the CLB's `PROTO:port[path]`."""
    hc = config.health_check
    port = str(config.listeners[0].node_port) if hc.port == TRAFFIC_PORT else hc.port
    path = (hc.path or "/") if hc.protocol in ("HTTP", "HTTPS") else ""
    return replace(hc, port=port, path=path)


def attributes_of(config: LoadBalancerConfig) -> Attributes:
    log = config.access_log
    return Attributes(
        cross_zone=config.cross_zone,
        draining=config.connection_draining.enabled,
        draining_timeout=config.connection_draining.timeout,
        idle_timeout=config.idle_timeout,
        access_log=log.enabled,
        log_interval=log.emit_interval,
        log_bucket=log.bucket,
        log_prefix=log.prefix,
    )


def desired_clb(
    svc: p.KubeObject,
    config: LoadBalancerConfig,
    nodes: Sequence[p.KubeObject],
    cluster_name: str,
    subnets: Sequence[str] = (),
    security_groups: Sequence[str] | None = None,
) -> CLBSpec:
    """Pure: the CLB of this Service. Subnets and security groups need AWS reads, so the caller resolves them."""
    meta = p.meta(svc)
    instances = frozenset(
        iid
        for iid, node in ((p.instance_id(n), n) for n in nodes)
        if iid and config.selects_node(p.meta(node).get("labels") or {})
    )
    listeners = tuple(
        ListenerSpec(
            ls.port, ls.protocol, ls.node_port, ls.target_protocol, ls.certificates[0] if ls.certificates else ""
        )
        for ls in config.listeners
    )
    return CLBSpec(
        name=names.load_balancer_name(meta["uid"]),
        scheme=config.scheme,
        tags={
            **dict(config.additional_tags),
            **names.resource_tags(cluster_name, meta["namespace"], meta["name"], meta["uid"]),
        },
        listeners=listeners,
        health=health_check(config),
        attributes=attributes_of(config),
        ssl_policy=config.ssl_negotiation_policy,
        proxy_protocol=config.proxy_protocol,
        instances=instances,
        subnets=tuple(sorted(set(subnets))),
        security_groups=None if security_groups is None else tuple(security_groups),
    )


# -- observed ---------------------------------------------------------------------------------------------------------
def observed_after_create(desired: CLBSpec, dns_name: str) -> ObservedCLB:
    """What CreateLoadBalancer leaves (listeners, subnets, groups and tags inline; API-default attributes; AWS's
    default health check, which never matches ours), so the rest of a creation is planned without reading back."""
    return ObservedCLB(
        name=desired.name,
        dns_name=dns_name,
        scheme=desired.scheme,
        listeners={ls.port: ls for ls in desired.listeners},
        tags=dict(desired.tags),
        subnets=frozenset(desired.subnets),
        security_groups=frozenset(desired.security_groups or ()),
    )


# -- plan -------------------------------------------------------------------------------------------------------------
def ssl_policy_name(reference: str) -> str:
    return SSL_POLICY_PREFIX + reference


def attribute_changes(want: Attributes, have: Attributes) -> ModifyAttributes | None:
    """Only the groups that differ; a timeout or log setting only matters while its feature is enabled."""
    groups: list[tuple[str, tuple[tuple[str, Any], ...]]] = []
    if want.cross_zone != have.cross_zone:
        groups.append(("CrossZoneLoadBalancing", (("Enabled", want.cross_zone),)))
    if want.draining != have.draining or (want.draining and want.draining_timeout != have.draining_timeout):
        groups.append(("ConnectionDraining", (("Enabled", want.draining), ("Timeout", want.draining_timeout))))
    if want.idle_timeout != have.idle_timeout:
        groups.append(("ConnectionSettings", (("IdleTimeout", want.idle_timeout),)))
    log_want = (want.log_interval, want.log_bucket, want.log_prefix)
    log_have = (have.log_interval, have.log_bucket, have.log_prefix)
    if want.access_log != have.access_log or (want.access_log and log_want != log_have):
        values: tuple[tuple[str, Any], ...] = (("Enabled", want.access_log),)
        if want.access_log:
            values += (("EmitInterval", want.log_interval), ("S3BucketName", want.log_bucket))
            values += (("S3BucketPrefix", want.log_prefix),)
        groups.append(("AccessLog", values))
    return ModifyAttributes(tuple(groups)) if groups else None


def _tag_changes(desired: CLBSpec, observed: ObservedCLB, cluster_key: str) -> list[Operation]:
    # Any value of the cluster tag means ours ("shared" included): never rewrite it. Removed additional tags are
    # kept (as upstream): we cannot tell them from tags someone else added. Ownership tags go first, on their own:
    # IAM lets us tag an LB we adopt with those keys only (template: AdoptClusterLoadBalancers).
    missing = tuple(
        (k, v)
        for k, v in sorted(desired.tags.items())
        if observed.tags.get(k) != v and not (k == cluster_key and k in observed.tags)
    )
    own = tuple((k, v) for k, v in missing if k in (names.SERVICE_UID_TAG, names.SERVICE_NAME_TAG, cluster_key))
    return [AddTags(tags) for tags in (own, tuple(t for t in missing if t not in own)) if tags]


def _listener_changes(desired: CLBSpec, observed: ObservedCLB) -> tuple[list[Operation], set[int]]:
    """Delete then create (batched), certificate swaps in place. Returns the ports whose listener is new."""
    wanted = {ls.port: ls for ls in desired.listeners}
    delete = sorted(
        port
        for port, have in observed.listeners.items()
        if port not in wanted or not wanted[port].same_but_certificate(have)
    )
    create = [ls for ls in desired.listeners if ls.port not in observed.listeners or ls.port in delete]
    ops: list[Operation] = []
    if delete:
        ops.append(DeleteListeners(tuple(delete)))
    if create:
        ops.append(CreateListeners(tuple(create)))
    for ls in desired.listeners:
        have = observed.listeners.get(ls.port)
        if have is not None and ls.port not in delete and have.certificate != ls.certificate:
            ops.append(SetCertificate(ls.port, ls.certificate))
    return ops, {ls.port for ls in create}


def _policy_changes(desired: CLBSpec, observed: ObservedCLB, new_ports: set[int]) -> list[Operation]:
    ops: list[Operation] = []
    # A re-created listener has lost its policies.
    listener_policies = {
        ls.port: () if ls.port in new_ports else observed.listener_policies.get(ls.port, ()) for ls in desired.listeners
    }
    secure = [ls.port for ls in desired.listeners if ls.secure]
    reference = desired.ssl_policy
    if not reference and any(n.startswith(SSL_POLICY_PREFIX) for p in secure for n in listener_policies[p]):
        # The annotation was removed: back to what AWS would have chosen, not to a stale custom policy.
        reference = AWS_DEFAULT_SSL_POLICY
    used: set[str] = set()
    if reference and secure:
        name = ssl_policy_name(reference)
        used.add(name)
        if name not in observed.policies:
            ops.append(CreatePolicy(name, "SSLNegotiationPolicyType", (("Reference-Security-Policy", reference),)))
        ops += [SetListenerPolicies(port, (name,)) for port in secure if listener_policies[port] != (name,)]
    instance_ports = sorted({ls.instance_port for ls in desired.listeners})
    if desired.proxy_protocol:
        used.add(PROXY_POLICY)
        if PROXY_POLICY not in observed.policies:
            ops.append(CreatePolicy(PROXY_POLICY, "ProxyProtocolPolicyType", (("ProxyProtocol", "true"),)))
    for port in sorted(set(instance_ports) | set(observed.backend_policies)):
        have = observed.backend_policies.get(port, ())
        want = (PROXY_POLICY,) if desired.proxy_protocol and port in instance_ports else ()
        if PROXY_POLICY in have and not want:
            ops.append(SetBackendPolicies(port, tuple(n for n in have if n != PROXY_POLICY)))
        elif want and PROXY_POLICY not in have:
            ops.append(SetBackendPolicies(port, (*have, PROXY_POLICY)))
    ours = {n for n in observed.policies if n == PROXY_POLICY or n.startswith(SSL_POLICY_PREFIX)}
    ops += [DeletePolicy(n) for n in sorted(ours - used)]
    return ops


def _subnet_changes(desired: CLBSpec, observed: ObservedCLB) -> list[Operation]:
    if not desired.subnets:
        return []  # nothing resolved: never detach everything
    want = set(desired.subnets)
    attach = tuple(sorted(want - observed.subnets))
    detach = tuple(sorted(observed.subnets - want))
    ops: list[Operation] = []
    # Detach first (one subnet per AZ: a replacement in the same AZ needs the old one gone), unless that would
    # leave the LB with no subnet at all, which AWS refuses.
    if detach and observed.subnets - set(detach):
        ops.append(DetachSubnets(detach))
        detach = ()
    if attach:
        ops.append(AttachSubnets(attach))
    if detach:
        ops.append(DetachSubnets(detach))
    return ops


def instance_changes(desired: CLBSpec, observed: ObservedCLB) -> list[Operation]:
    """Register before deregister, so a node swap never leaves the LB without backends."""
    ops: list[Operation] = []
    if desired.instances - observed.instances:
        ops.append(RegisterInstances(tuple(sorted(desired.instances - observed.instances))))
    if observed.instances - desired.instances:
        ops.append(DeregisterInstances(tuple(sorted(observed.instances - desired.instances))))
    return ops


def plan(desired: CLBSpec, observed: ObservedCLB, cluster_name: str) -> list[Operation]:
    """Operations converging `observed` to `desired`: ownership tags first (a crash then leaves an LB we can
    recognise), listeners and their policies, health check before new instances, instances last. Security groups
    that are swapped are applied old and new together before the listeners change, only the new ones after."""
    ops = _tag_changes(desired, observed, names.cluster_tag_key(cluster_name))
    if desired.security_groups is not None:
        # Groups swapped: the old and the new ones first, while the listeners change (make before break).
        interim = interim_groups(sorted(observed.security_groups), desired.security_groups)
        ops += [ApplySecurityGroups(interim)] if interim else []
    listener_ops, new_ports = _listener_changes(desired, observed)
    ops += listener_ops
    ops += _policy_changes(desired, observed, new_ports)
    if observed.health != desired.health:
        ops.append(ConfigureHealthCheck(desired.health))
    attributes = None if observed.attributes is None else attribute_changes(desired.attributes, observed.attributes)
    if attributes is not None:
        ops.append(attributes)
    ops += _subnet_changes(desired, observed)
    if desired.security_groups is not None and set(desired.security_groups) != observed.security_groups:
        ops.append(ApplySecurityGroups(desired.security_groups))
    return ops + instance_changes(desired, observed)
