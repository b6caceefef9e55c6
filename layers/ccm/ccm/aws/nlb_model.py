"""NLB decisions as pure functions: the desired load balancer for a Service, what AWS reports of it, and the
plan to converge to it.

Names of target groups hash everything AWS cannot change in place (protocol, port, health-check protocol, VPC, target
type, IP address type), so a change of any of those yields a new target group that is created, filled and switched
to before the old one is deleted; everything else is modified in place. An unchanged Service plans no operation at all.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

from ccm.aws import names
from ccm.aws.lbconfig import HealthCheck, LoadBalancerConfig
from ccm.contracts import kube as p
from ccm.contracts.cloud import InvalidServiceConfig
from ccm.contracts.endpoints import IpTarget, ServicePortKey, address_type
from ccm.contracts.readiness_gates import TargetHealth

# What an NLB reports for the attributes we manage until someone changes them (a key AWS omits has this value).
AWS_DEFAULT_LB_ATTRIBUTES = {
    "access_logs.s3.enabled": "false",
    "access_logs.s3.bucket": "",
    "access_logs.s3.prefix": "",
    "load_balancing.cross_zone.enabled": "false",
}


@dataclass(frozen=True, slots=True)
class TargetGroupSpec:
    name: str
    protocol: str
    port: int  # instance: the node port every target is registered on; ip: the Service port (each target has its own)
    health: HealthCheck
    targets: frozenset[str]  # instance targets (EC2 ids)
    attributes: tuple[tuple[str, str], ...] = ()  # only the keys we set; others keep AWS defaults
    target_type: str = "instance"  # TargetType, create-only on AWS: part of the name when `ip`
    ip_targets: frozenset[IpTarget] = frozenset()  # ip targets (pod address and port)
    # The Service ports (port, protocol) whose endpoints are this group's ip targets (two for TCP_UDP).
    service_ports: tuple[ServicePortKey, ...] = ()
    # IpAddressType of an `ip` group, create-only on AWS: `ipv6` for an IPv6-primary Service on a dualstack NLB.
    ip_address_type: str = "ipv4"

    @property
    def wants_targets(self) -> bool:
        return bool(self.targets or self.ip_targets)


@dataclass(frozen=True, slots=True)
class ListenerSpec:
    port: int
    protocol: str
    target_group: TargetGroupSpec
    certificate: str = ""  # TLS listeners: the default certificate
    ssl_policy: str = ""


@dataclass(frozen=True, slots=True)
class NLBSpec:
    name: str
    scheme: str
    tags: dict[str, str]
    listeners: tuple[ListenerSpec, ...]
    attributes: tuple[tuple[str, str], ...] = ()
    ip_address_type: str = "ipv4"


@dataclass(frozen=True, slots=True)
class ObservedTargetGroup:
    arn: str
    name: str
    protocol: str
    port: int
    health: HealthCheck
    targets: frozenset[str] = frozenset()
    attributes: dict[str, str] | None = None  # None: not read on this pass
    healthy: frozenset[str] = frozenset()  # targets AWS reports healthy (read with the targets)
    target_type: str = "instance"
    # Every registered target with its port and health state, draining ones too (what an ip plan needs).
    # (id, port, state, reason, description); not compared: the fields above summarise it for instance groups.
    health_states: tuple[tuple[str, int, str, str, str], ...] = field(default=(), compare=False)


@dataclass(frozen=True, slots=True)
class ObservedListener:
    arn: str
    port: int
    protocol: str
    target_group_arn: str
    certificate: str = ""
    ssl_policy: str = ""


@dataclass(slots=True)
class ObservedNLB:
    arn: str
    dns_name: str
    scheme: str
    listeners: list[ObservedListener] = field(default_factory=list)
    # Attached target groups plus, when a thorough pass looked for them, unattached ones tagged for this UID.
    target_groups: dict[str, ObservedTargetGroup] = field(default_factory=dict)
    attributes: dict[str, str] | None = None  # None: not read on this pass


# Plan operations. Target groups are referenced by name: a plan may create one and use it in the next step.
@dataclass(frozen=True, slots=True)
class CreateTargetGroup:
    spec: TargetGroupSpec


@dataclass(frozen=True, slots=True)
class ModifyTargetGroup:
    name: str
    health: HealthCheck


@dataclass(frozen=True, slots=True)
class SetTargetGroupAttributes:
    name: str
    attributes: tuple[tuple[str, str], ...]


@dataclass(frozen=True, slots=True)
class SetLoadBalancerAttributes:
    attributes: tuple[tuple[str, str], ...]


@dataclass(frozen=True, slots=True)
class RegisterTargets:
    name: str
    port: int
    instance_ids: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class DeregisterTargets:
    name: str
    port: int
    instance_ids: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class CreateListener:
    port: int
    protocol: str
    target_group: str
    certificate: str = ""
    ssl_policy: str = ""


@dataclass(frozen=True, slots=True)
class ModifyListener:
    arn: str
    protocol: str
    target_group: str
    certificate: str = ""
    ssl_policy: str = ""


@dataclass(frozen=True, slots=True)
class DeleteListener:
    arn: str


@dataclass(frozen=True, slots=True)
class DeleteTargetGroup:
    arn: str


@dataclass(frozen=True, slots=True)
class SyncIpTargets:
    """Converge an `ip` target group's targets to `targets` (deregister first, then register, 200 a call: the
    deployer's registrar, ccm.aws.ip_targets, which also refuses addresses outside the VPC's subnets)."""

    name: str
    targets: frozenset[IpTarget]


@dataclass(frozen=True, slots=True)
class AwaitHealthy:
    """Hold the switch of listener `port` to target group `name`: the group serving it now has healthy targets
    and the new one none yet. The driver applies the rest of the plan, then asks the queue to come back."""

    name: str
    port: int
    delay_seconds: int


Operation = (
    CreateTargetGroup
    | ModifyTargetGroup
    | SetTargetGroupAttributes
    | SetLoadBalancerAttributes
    | RegisterTargets
    | DeregisterTargets
    | SyncIpTargets
    | CreateListener
    | ModifyListener
    | DeleteListener
    | DeleteTargetGroup
    | AwaitHealthy
)


def desired_nlb(
    svc: p.KubeObject, config: LoadBalancerConfig, nodes: Sequence[p.KubeObject], cluster_name: str, vpc_id: str
) -> NLBSpec:
    """Pure: what the NLB of this Service must look like, from its validated configuration."""
    meta = p.meta(svc)
    namespace, name, uid = meta["namespace"], meta["name"], meta["uid"]
    health = config.health_check
    targets = frozenset(i for i in (p.instance_id(n) for n in nodes) if i)
    attributes = tuple(sorted(config.effective_target_group_attributes().items()))
    listeners: list[ListenerSpec] = []
    ports_by_name = {sp.name: ServicePortKey(sp.port, sp.protocol) for sp in config.ports}
    # The group's family follows the Service's primary one (parse refuses IPv6 without a dualstack NLB).
    family = "ipv6" if config.ip_address_type == "dualstack" and address_type(svc) == "IPv6" else "ipv4"
    for listener in config.listeners:
        if config.target_type == "ip":
            # A new target group when the type or family changes (both create-only on AWS): made, filled and
            # switched to first. An IPv4 group keeps the name it had before families were modelled.
            identity: tuple[object, ...] = (listener.target_protocol, listener.port, health.protocol, vpc_id, "ip")
            if family == "ipv6":
                identity += ("ipv6",)
            tg_name = names.target_group_name(namespace, name, uid, identity)
            keys = tuple(ports_by_name[n] for n in listener.port_names if n in ports_by_name)
            tg = TargetGroupSpec(
                tg_name,
                listener.target_protocol,
                listener.port,
                health,
                frozenset(),
                attributes,
                "ip",
                frozenset(),
                keys,
                family,
            )
        else:
            identity = (listener.target_protocol, listener.node_port, health.protocol, vpc_id)
            tg_name = names.target_group_name(namespace, name, uid, identity)
            tg = TargetGroupSpec(tg_name, listener.target_protocol, listener.node_port, health, targets, attributes)
        certificate = listener.certificates[0] if listener.certificates else ""
        listeners.append(ListenerSpec(listener.port, listener.protocol, tg, certificate, listener.ssl_policy))
    if not listeners:
        raise InvalidServiceConfig("a LoadBalancer Service needs at least one port")
    tags = {**dict(config.additional_tags), **names.resource_tags(cluster_name, namespace, name, uid)}
    return NLBSpec(
        name=names.load_balancer_name(uid),
        scheme=config.scheme,
        tags=tags,
        listeners=tuple(listeners),
        attributes=lb_attributes(config),
        ip_address_type=config.ip_address_type,
    )


def with_targets(spec: NLBSpec, targets: frozenset[str]) -> NLBSpec:
    """Pure: the same NLB with the instances `targets` in every `instance` target group (set per pass)."""
    return replace(
        spec,
        listeners=tuple(
            replace(ls, target_group=replace(ls.target_group, targets=targets))
            if ls.target_group.target_type == "instance"
            else ls
            for ls in spec.listeners
        ),
    )


def with_ip_targets(spec: NLBSpec, by_port: Mapping[ServicePortKey, frozenset[IpTarget]]) -> NLBSpec:
    """Pure: the same NLB with each `ip` target group's targets: its Service ports' endpoints (set per pass)."""
    listeners = []
    for ls in spec.listeners:
        tg = ls.target_group
        if tg.target_type == "ip":
            wanted = frozenset(t for key in tg.service_ports for t in by_port.get(key, ()))
            ls = replace(ls, target_group=replace(tg, ip_targets=wanted))
        listeners.append(ls)
    return replace(spec, listeners=tuple(listeners))


def lb_attributes(config: LoadBalancerConfig) -> tuple[tuple[str, str], ...]:
    """The NLB attributes we manage; all of them, so removing an annotation resets its attribute."""
    log = config.access_log
    return (
        ("access_logs.s3.bucket", log.bucket if log.enabled else ""),
        ("access_logs.s3.enabled", "true" if log.enabled else "false"),
        ("access_logs.s3.prefix", log.prefix if log.enabled else ""),
        ("load_balancing.cross_zone.enabled", "true" if config.cross_zone else "false"),
    )


def plan(desired: NLBSpec, observed: ObservedNLB) -> list[Operation]:
    """Operations converging `observed` to `desired`, in a traffic-safe order: create and fill target groups,
    then create or switch listeners, then delete what is no longer used. Empty when nothing differs."""
    by_name = {tg.name: tg for tg in observed.target_groups.values()}
    listener_by_port = {ls.port: ls for ls in observed.listeners}
    prepare: list[Operation] = []
    switch: list[Operation] = []
    held: list[Operation] = []
    still_serving: set[str] = set()  # target groups a held listener keeps using: not deleted yet
    for want in desired.listeners:
        tg = want.target_group
        have = by_name.get(tg.name)
        current: frozenset[str] = frozenset()
        if have is None:
            prepare.append(CreateTargetGroup(tg))
            if tg.attributes:
                prepare.append(SetTargetGroupAttributes(tg.name, tg.attributes))
        else:
            current = have.targets
            if tg.health.differs_in_place(have.health):
                prepare.append(ModifyTargetGroup(tg.name, tg.health))
            if have.attributes is not None and any(have.attributes.get(k) != v for k, v in tg.attributes):
                prepare.append(SetTargetGroupAttributes(tg.name, tg.attributes))
        if tg.target_type == "ip":
            if have is None or frozenset(ip_registered(have)) != tg.ip_targets:
                prepare.append(SyncIpTargets(tg.name, tg.ip_targets))
        else:
            if tg.targets - current:
                prepare.append(RegisterTargets(tg.name, tg.port, tuple(sorted(tg.targets - current))))
            if current - tg.targets:
                prepare.append(DeregisterTargets(tg.name, tg.port, tuple(sorted(current - tg.targets))))
        listener = listener_by_port.get(want.port)
        if listener is None:
            switch.append(CreateListener(want.port, want.protocol, tg.name, want.certificate, want.ssl_policy))
        elif (
            have is None
            or listener.target_group_arn != have.arn
            or listener.protocol != want.protocol
            or listener.certificate != want.certificate
            or (want.ssl_policy and listener.ssl_policy != want.ssl_policy)
        ):
            serving = observed.target_groups.get(listener.target_group_arn)
            replacing = serving is not None and (have is None or serving.arn != have.arn)
            if (
                replacing
                and serving is not None
                and serving.healthy
                and tg.wants_targets
                and not (have and have.healthy)
                and not (have and detached(have))
            ):
                held.append(AwaitHealthy(tg.name, want.port, readiness_delay(tg.health)))
                still_serving.add(serving.arn)
            else:
                switch.append(ModifyListener(listener.arn, want.protocol, tg.name, want.certificate, want.ssl_policy))
    wanted_ports = {ls.port for ls in desired.listeners}
    wanted_groups = {ls.target_group.name for ls in desired.listeners}
    cleanup: list[Operation] = [DeleteListener(ls.arn) for ls in observed.listeners if ls.port not in wanted_ports]
    cleanup += [
        DeleteTargetGroup(tg.arn)
        for tg in observed.target_groups.values()
        if tg.name not in wanted_groups and tg.arn not in still_serving
    ]
    lb_attributes_now = {**AWS_DEFAULT_LB_ATTRIBUTES, **(observed.attributes or {})}
    if observed.attributes is not None and any(lb_attributes_now.get(k) != v for k, v in desired.attributes):
        cleanup.append(SetLoadBalancerAttributes(desired.attributes))
    return prepare + switch + cleanup + held


def detached(tg: ObservedTargetGroup) -> bool:
    """AWS health-checks only a group a listener forwards to: its targets say `unused` (Target.NotInUse) until then,
    so holding the switch for them to turn healthy would wait forever. The hold's first pass registers them; the
    next one switches (the targets are then checked at once)."""
    return bool(tg.health_states) and all(state == "unused" for _, _, state, _, _ in tg.health_states)


def ip_health(tg: ObservedTargetGroup) -> dict[IpTarget, TargetHealth]:
    """An `ip` group's targets as DescribeTargetHealth reported them (draining ones too)."""
    return {IpTarget(i, port): TargetHealth(state, reason, text) for i, port, state, reason, text in tg.health_states}


def ip_registered(tg: ObservedTargetGroup) -> set[IpTarget]:
    """An `ip` group's registered targets: every reported one but those draining (registered again if wanted)."""
    return {IpTarget(i, port) for i, port, state, _, _ in tg.health_states if state != "draining"}


def readiness_delay(health: HealthCheck) -> int:
    """How long a new target group needs to pass its healthy threshold: the natural time to look again."""
    return max(5, min(300, health.interval * health.healthy))
