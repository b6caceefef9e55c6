"""The IP targets a Service wants, per Service port, from its EndpointSlices (issue 24; docs/ip-targets.md).

Pure: plain JSON dicts in (the Service, its `discovery.k8s.io/v1` EndpointSlices, the Pods of gated endpoints),
plain values out. Which endpoints are registered follows the AWS Load Balancer Controller
(`pkg/backend/endpoint_resolver.go`), with the differences docs/ip-targets.md lists:

- A Service port's targets come from the slice port the EndpointSlice controller wrote for it: that port has the
  Service port's `name` and `protocol` and carries the targetPort already resolved for the slice's pods
  (`getEndpointPorts`: name = servicePort.Name, port = FindPort(pod, servicePort)). A named targetPort can resolve
  to different numbers in different slices, so the port is read per slice, never from the Service.
- Registered: endpoints with `conditions.ready` true or absent (the API: "nil ... should be interpreted as
  ready"); never a terminating one. Also a not-ready endpoint whose pod waits only on our readiness gates
  (containers ready, every other gate True), is not terminating and runs on a Ready node: it must be registered,
  or its gate (true only once the target is healthy) could never become true.
- Only endpoints backed by a Pod (`targetRef.kind: Pod`), first address only, as the LBC.
- `externalTrafficPolicy` does not filter IP targets: traffic goes to the pod, not through a node's kube-proxy.
- An endpoint listed by two slices (the controller moving it) counts once, and ready wins.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final, NamedTuple

from ccm.contracts.kube import KubeObject

SERVICE_NAME_LABEL: Final = "kubernetes.io/service-name"
# Our readiness gates: `target-health.ccm.aws/<service-name>` (ccm.contracts.readiness_gates). Defined here so that
# the registration rule below can tell our gates from others.
GATE_PREFIX: Final = "target-health.ccm.aws/"


class IpTarget(NamedTuple):
    """One `ip` target: a pod address and the port on it (RegisterTargets' Id and Port)."""

    ip: str
    port: int

    def sort_key(self) -> tuple[int, int, int, str]:
        """Numeric order (10.0.0.9 before 10.0.0.10), IPv4 before IPv6, anything not an address last."""
        try:
            address = ipaddress.ip_address(self.ip)
        except ValueError:
            return 7, 0, self.port, self.ip
        return address.version, int(address), self.port, ""


class ServicePortKey(NamedTuple):
    """A Service port as a listener sees it: unique in a Service (validation: port and protocol)."""

    port: int
    protocol: str


@dataclass(frozen=True)
class DesiredTargets:
    """by_port: the targets of each Service port (every port of the Service is a key, maybe with none).
    pods: pod name -> its registered targets per port (the readiness gates look their health up).
    pending: gated pods not registered now that may become registrable without any EndpointSlice change
    (containers not ready yet, pod not read, node not Ready): the caller schedules a re-check for them."""

    by_port: Mapping[ServicePortKey, frozenset[IpTarget]]
    pods: Mapping[str, frozenset[tuple[ServicePortKey, IpTarget]]] = field(default_factory=dict)
    pending: frozenset[str] = frozenset()

    def all_targets(self) -> frozenset[IpTarget]:
        return frozenset(t for targets in self.by_port.values() for t in targets)


def _truthy(value: Any, default: bool) -> bool:
    return default if value is None else bool(value)


def service_ports(svc: KubeObject) -> list[tuple[str, ServicePortKey]]:
    """(name, key) of each Service port; protocol defaults to TCP as the API server does."""
    ports = (svc.get("spec") or {}).get("ports") or []
    return [(str(p.get("name") or ""), ServicePortKey(int(p["port"]), str(p.get("protocol") or "TCP"))) for p in ports]


def address_type(svc: KubeObject) -> str:
    """The EndpointSlice addressType an `ip` target group of this Service takes: the Service's primary IP family
    (`spec.ipFamilies[0]`), as the LBC picks the target group's IpAddressType (IPv6 only on a dualstack NLB). The
    other family's slices are ignored: a target group holds one family."""
    families = (svc.get("spec") or {}).get("ipFamilies") or ["IPv4"]
    return "IPv6" if families[0] == "IPv6" else "IPv4"


def _condition(obj: KubeObject, kind: str) -> str | None:
    for cond in (obj.get("status") or {}).get("conditions") or []:
        if cond.get("type") == kind:
            return str(cond.get("status"))
    return None


def is_pod_ready(pod: KubeObject) -> bool:
    return _condition(pod, "Ready") == "True"


def gates_of(pod: KubeObject) -> list[str]:
    return [str(g.get("conditionType")) for g in (pod.get("spec") or {}).get("readinessGates") or []]


def waits_only_on_our_gates(pod: KubeObject, gate: str) -> bool:
    """The pod declares `gate`, its containers are ready and every readiness gate that is not ours is True: only
    our registration holds it back. Gates of our other Services count as ours (a pod behind two `ip` Services
    carries both gates; each must be registrable before either can turn True)."""
    gates = gates_of(pod)
    if gate not in gates or _condition(pod, "ContainersReady") != "True":
        return False
    return all(_condition(pod, g) == "True" for g in gates if not g.startswith(GATE_PREFIX))


TARGET: Final = "target"
WAITING: Final = "waiting"


def endpoint_role(ep: KubeObject) -> str | None:
    """What an endpoint can be to an `ip` target group: TARGET (registered: Pod-backed, ready or `ready` absent,
    not terminating), WAITING (Pod-backed, neither ready nor terminating: registered only through the
    readiness-gate exception, which needs its pod read), or None (never registered: terminating, no address, not
    a Pod). The watcher forwards a slice change only when it changes these (watcher.endpoints)."""
    ref = ep.get("targetRef") or {}
    cond = ep.get("conditions") or {}
    if ref.get("kind") != "Pod" or not ep.get("addresses") or _truthy(cond.get("terminating"), False):
        return None
    return TARGET if _truthy(cond.get("ready"), True) else WAITING


def gate_candidates(slices: Iterable[KubeObject], family: str = "IPv4") -> set[str]:
    """Names of the pods whose endpoints are neither ready nor terminating: the only pods the registration rule
    needs to read (the readiness-gate exception). Ready endpoints never cost a pod read."""
    names: set[str] = set()
    for slc in slices:
        if slc.get("addressType") != family:
            continue
        for ep in slc.get("endpoints") or []:
            if endpoint_role(ep) == WAITING:
                names.add(str((ep.get("targetRef") or {}).get("name")))
    return names


class _Verdict(NamedTuple):
    registered: bool
    pending: bool


def _verdict(ep: KubeObject, pods: Mapping[str, KubeObject], ready_nodes: Collection[str], gate: str) -> _Verdict:
    cond = ep.get("conditions") or {}
    if _truthy(cond.get("terminating"), False):
        return _Verdict(False, False)  # deregistered at once, whatever `ready` says
    if _truthy(cond.get("ready"), True):
        return _Verdict(True, False)
    name = str((ep.get("targetRef") or {}).get("name"))
    pod = pods.get(name)
    if pod is None:
        return _Verdict(False, True)  # not read (or read before it existed): look again later
    if gate not in gates_of(pod) or (pod.get("metadata") or {}).get("deletionTimestamp"):
        return _Verdict(False, False)  # not ours to hold: an ordinary not-ready pod
    if not waits_only_on_our_gates(pod, gate):
        return _Verdict(False, True)  # containers not ready yet: no slice change will tell us when they are
    node = str(ep.get("nodeName") or (pod.get("spec") or {}).get("nodeName") or "")
    if node not in ready_nodes:
        return _Verdict(False, True)
    return _Verdict(True, False)


def desired_ip_targets(
    svc: KubeObject,
    slices: Iterable[KubeObject],
    *,
    pods: Mapping[str, KubeObject] | None = None,
    ready_nodes: Collection[str] = (),
    gate: str | None = None,
) -> DesiredTargets:
    """The targets of each Service port. `pods`: the pods named by gate_candidates() that the caller read (by
    name); `ready_nodes`: names of nodes whose Ready condition is True; `gate`: our readiness gate for this Service
    (ccm.contracts.readiness_gates.gate_condition_type), None for no gate exception at all."""
    family = address_type(svc)
    ports = service_ports(svc)
    wanted = {(name, key.protocol): key for name, key in ports}
    registered: dict[ServicePortKey, set[IpTarget]] = {key: set() for _, key in ports}
    owners: dict[str, set[tuple[ServicePortKey, IpTarget]]] = {}
    pending: set[str] = set()
    seen: dict[tuple[ServicePortKey, IpTarget], bool] = {}
    for slc in slices:
        if slc.get("addressType") != family:
            continue
        # The slice's port for each Service port, by the name and protocol the EndpointSlice controller copied.
        slice_ports: list[tuple[ServicePortKey, int]] = []
        for p in slc.get("ports") or []:
            key = wanted.get((str(p.get("name") or ""), str(p.get("protocol") or "TCP")))
            if key is not None and p.get("port") is not None:
                slice_ports.append((key, int(p["port"])))
        for ep in slc.get("endpoints") or []:
            ref = ep.get("targetRef") or {}
            if ref.get("kind") != "Pod" or not ep.get("addresses"):
                continue
            verdict = _verdict(ep, pods or {}, ready_nodes, gate) if gate else _plain_verdict(ep)
            name = str(ref.get("name"))
            if verdict.pending:
                pending.add(name)
            for key, port in slice_ports:
                target = IpTarget(str(ep["addresses"][0]), port)
                if seen.get((key, target)):
                    continue  # already registered from another slice: ready wins
                seen[(key, target)] = verdict.registered
                if verdict.registered:
                    registered[key].add(target)
                    owners.setdefault(name, set()).add((key, target))
    # A pod registered through a duplicate in another slice is not pending.
    return DesiredTargets(
        by_port={key: frozenset(targets) for key, targets in registered.items()},
        pods={name: frozenset(targets) for name, targets in owners.items()},
        pending=frozenset(pending - set(owners)),
    )


def _plain_verdict(ep: KubeObject) -> _Verdict:
    cond = ep.get("conditions") or {}
    ready = not _truthy(cond.get("terminating"), False) and _truthy(cond.get("ready"), True)
    return _Verdict(ready, False)


@dataclass(frozen=True)
class IpBackends:
    """What a pass read for `ip` targets: the Service's EndpointSlices, the pods of its not-ready endpoints (read
    only when some exist: `gate_candidates`), the names of the Ready nodes, and our gate for the Service."""

    slices: tuple[KubeObject, ...] = ()
    pods: Mapping[str, KubeObject] = field(default_factory=dict)
    ready_nodes: frozenset[str] = frozenset()
    gate: str | None = None

    def targets(self, svc: KubeObject) -> DesiredTargets:
        return desired_ip_targets(
            svc, self.slices, pods=self.pods or None, ready_nodes=self.ready_nodes, gate=self.gate
        )
