"""NLB decisions as pure functions: the desired load balancer for a Service, and the plan to converge to it.

Names of target groups hash everything AWS cannot change in place (protocol, port, health-check protocol, VPC),
so a change of any of those yields a new target group that is created, filled and switched to before the old one
is deleted; everything else is modified in place. An unchanged Service plans no operation at all.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from ccm.aws import names
from ccm.contracts import InvalidServiceConfig
from ccm.service import predicates as p

INTERNAL_ANNOTATION = "service.beta.kubernetes.io/aws-load-balancer-internal"
NLB_PROTOCOLS = ("TCP", "UDP")


@dataclass(frozen=True, slots=True)
class HealthCheck:
    protocol: str
    port: str  # "traffic-port" or a port number
    path: str
    healthy: int
    unhealthy: int
    interval: int
    timeout: int

    def differs_in_place(self, other: HealthCheck) -> bool:
        """True when a ModifyTargetGroup is needed (the protocol is part of the target group's identity)."""
        path_matters = self.protocol.startswith("HTTP")
        return (
            self.port,
            self.path if path_matters else "",
            self.healthy,
            self.unhealthy,
            self.interval,
            self.timeout,
        ) != (
            other.port,
            other.path if path_matters else "",
            other.healthy,
            other.unhealthy,
            other.interval,
            other.timeout,
        )


@dataclass(frozen=True, slots=True)
class TargetGroupSpec:
    name: str
    protocol: str
    port: int
    health: HealthCheck
    targets: frozenset[str]


@dataclass(frozen=True, slots=True)
class ListenerSpec:
    port: int
    protocol: str
    target_group: TargetGroupSpec


@dataclass(frozen=True, slots=True)
class NLBSpec:
    name: str
    scheme: str
    tags: dict[str, str]
    listeners: tuple[ListenerSpec, ...]


@dataclass(frozen=True, slots=True)
class ObservedTargetGroup:
    arn: str
    name: str
    protocol: str
    port: int
    health: HealthCheck
    targets: frozenset[str] = frozenset()


@dataclass(frozen=True, slots=True)
class ObservedListener:
    arn: str
    port: int
    protocol: str
    target_group_arn: str


@dataclass(slots=True)
class ObservedNLB:
    arn: str
    dns_name: str
    scheme: str
    listeners: list[ObservedListener] = field(default_factory=list)
    # Attached target groups plus, when a thorough pass looked for them, unattached ones tagged for this UID.
    target_groups: dict[str, ObservedTargetGroup] = field(default_factory=dict)


# Plan operations. Target groups are referenced by name: a plan may create one and use it in the next step.
@dataclass(frozen=True, slots=True)
class CreateTargetGroup:
    spec: TargetGroupSpec


@dataclass(frozen=True, slots=True)
class ModifyTargetGroup:
    name: str
    health: HealthCheck


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


@dataclass(frozen=True, slots=True)
class ModifyListener:
    arn: str
    protocol: str
    target_group: str


@dataclass(frozen=True, slots=True)
class DeleteListener:
    arn: str


@dataclass(frozen=True, slots=True)
class DeleteTargetGroup:
    arn: str


Operation = (
    CreateTargetGroup
    | ModifyTargetGroup
    | RegisterTargets
    | DeregisterTargets
    | CreateListener
    | ModifyListener
    | DeleteListener
    | DeleteTargetGroup
)


def scheme_of(svc: p.KubeObject) -> str:
    value = p.annotations_of(svc).get(INTERNAL_ANNOTATION)
    return "internet-facing" if value is None or value.strip().lower() == "false" else "internal"


def health_check_of(svc: p.KubeObject) -> HealthCheck:
    spec = p.spec(svc)
    if spec.get("externalTrafficPolicy") == "Local" and spec.get("healthCheckNodePort"):
        # kube-proxy answers /healthz on healthCheckNodePort only on nodes with a local endpoint.
        return HealthCheck("HTTP", str(spec["healthCheckNodePort"]), "/healthz", 2, 2, 10, 6)
    return HealthCheck("TCP", "traffic-port", "", 3, 3, 30, 10)


def desired_nlb(svc: p.KubeObject, nodes: Sequence[p.KubeObject], cluster_name: str, vpc_id: str) -> NLBSpec:
    """Pure: what the NLB of this Service must look like. Raises InvalidServiceConfig on what we refuse."""
    meta = p.meta(svc)
    namespace, name, uid = meta["namespace"], meta["name"], meta["uid"]
    health = health_check_of(svc)
    targets = frozenset(i for i in (p.instance_id(n) for n in nodes) if i)
    listeners: list[ListenerSpec] = []
    seen_ports: set[int] = set()
    for port in p.spec(svc).get("ports") or []:
        protocol = str(port.get("protocol", "TCP")).upper()
        if protocol not in NLB_PROTOCOLS:
            raise InvalidServiceConfig(f"port {port.get('port')}: protocol {protocol} is not supported by NLB")
        if port["port"] in seen_ports:
            raise InvalidServiceConfig(f"port {port['port']} is listed twice; one NLB listener per port")
        if not port.get("nodePort"):
            raise InvalidServiceConfig(
                f"port {port['port']} has no nodePort (allocateLoadBalancerNodePorts=false is not supported)"
            )
        seen_ports.add(port["port"])
        node_port = int(port["nodePort"])
        tg_name = names.target_group_name(namespace, name, uid, (protocol, node_port, health.protocol, vpc_id))
        tg = TargetGroupSpec(tg_name, protocol, node_port, health, targets)
        listeners.append(ListenerSpec(int(port["port"]), protocol, tg))
    if not listeners:
        raise InvalidServiceConfig("a LoadBalancer Service needs at least one port")
    return NLBSpec(
        name=names.load_balancer_name(uid),
        scheme=scheme_of(svc),
        tags=names.resource_tags(cluster_name, namespace, name, uid),
        listeners=tuple(listeners),
    )


def plan(desired: NLBSpec, observed: ObservedNLB) -> list[Operation]:
    """Operations converging `observed` to `desired`, in a traffic-safe order: create and fill target groups,
    then create or switch listeners, then delete what is no longer used. Empty when nothing differs."""
    by_name = {tg.name: tg for tg in observed.target_groups.values()}
    listener_by_port = {ls.port: ls for ls in observed.listeners}
    prepare: list[Operation] = []
    switch: list[Operation] = []
    for want in desired.listeners:
        tg = want.target_group
        have = by_name.get(tg.name)
        current: frozenset[str] = frozenset()
        if have is None:
            prepare.append(CreateTargetGroup(tg))
        else:
            current = have.targets
            if tg.health.differs_in_place(have.health):
                prepare.append(ModifyTargetGroup(tg.name, tg.health))
        if tg.targets - current:
            prepare.append(RegisterTargets(tg.name, tg.port, tuple(sorted(tg.targets - current))))
        if current - tg.targets:
            prepare.append(DeregisterTargets(tg.name, tg.port, tuple(sorted(current - tg.targets))))
        listener = listener_by_port.get(want.port)
        if listener is None:
            switch.append(CreateListener(want.port, want.protocol, tg.name))
        elif have is None or listener.target_group_arn != have.arn or listener.protocol != want.protocol:
            switch.append(ModifyListener(listener.arn, want.protocol, tg.name))
    wanted_ports = {ls.port for ls in desired.listeners}
    wanted_groups = {ls.target_group.name for ls in desired.listeners}
    cleanup: list[Operation] = [DeleteListener(ls.arn) for ls in observed.listeners if ls.port not in wanted_ports]
    cleanup += [DeleteTargetGroup(tg.arn) for tg in observed.target_groups.values() if tg.name not in wanted_groups]
    return prepare + switch + cleanup


def health_from_api(tg: dict[str, Any]) -> HealthCheck:
    return HealthCheck(
        protocol=tg.get("HealthCheckProtocol", "TCP"),
        port=str(tg.get("HealthCheckPort", "traffic-port")),
        path=tg.get("HealthCheckPath", "") or "",
        healthy=int(tg.get("HealthyThresholdCount", 0)),
        unhealthy=int(tg.get("UnhealthyThresholdCount", 0)),
        interval=int(tg.get("HealthCheckIntervalSeconds", 0)),
        timeout=int(tg.get("HealthCheckTimeoutSeconds", 0)),
    )
