"""The pods of a cluster, for the EndpointSlice controller (devstack.endpointslices) and IP targets to follow.

What is modelled, and of which component:

- **Scheduler**: ``PodSet`` creates pods already bound (``spec.nodeName``), round-robin over the nodes it is given.
- **Kubelet + CNI** (``Kubelet.sync``): a bound pod without an IP gets one (from its node's pool: ``ip_pools``, else
  the node's ``spec.podCIDR``, else ``default_pool``; never reused), phase Running, ``hostIP`` (the node's
  InternalIP) and the conditions PodScheduled, Initialized, ContainersReady, Ready. ``ready_after`` seconds after
  the kubelet first saw it (plus up to ``ready_spread`` seconds, fixed per pod), its containers are ready. Ready
  follows the kubelet's rule with readiness gates (pkg/kubelet/status generatePodReadyCondition): True only when
  ContainersReady is True and every ``spec.readinessGates`` condition is present and True, else False with reason
  ``ReadinessGatesNotReady`` (or ``ContainersNotReady``). A pod being deleted keeps its conditions (its containers
  are still running) until its grace period has passed on this kubelet's clock, then the kubelet deletes it with
  grace period 0.
- **Deployment controller** (``RollingUpdate``): one ReplicaSet-like revision per template (label
  ``pod-template-hash``), a rolling update bounded by maxSurge (rounded up) and maxUnavailable (rounded down; 1 when
  both resolve to 0), as deployment/rolling.go: scale the new revision up to replicas + maxSurge pods in total, scale
  the old one down first by its unready pods, then by ready ones while the ready pods stay >= replicas -
  maxUnavailable. ``step()`` is one reconcile; the caller advances the clock and runs the kubelet in between.

Not modelled: probes (readiness is a timer), container restarts, pod disruption budgets, minReadySeconds,
progressDeadlineSeconds, ReplicaSet objects (pods carry the revision label only), scheduling constraints.
The clock is injectable (``FakeClock``) so tests step time deterministically.
"""

from __future__ import annotations

import copy
import hashlib
import ipaddress
import json
import math
import random
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from devstack.k8s_emulator import Emulator
from devstack.k8s_emulator.errors import ApiError
from devstack.k8s_emulator.store import now_rfc3339

Obj = dict[str, Any]
TEMPLATE_HASH_LABEL = "pod-template-hash"


@dataclass
class FakeClock:
    now: float = 0.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


def _unit(uid: str) -> float:
    """A number in [0, 1) fixed by `uid`."""
    return int(hashlib.sha256(uid.encode()).hexdigest()[:8], 16) / 2**32


def _condition(ctype: str, status: bool, reason: str | None = None) -> Obj:
    cond: Obj = {"type": ctype, "status": "True" if status else "False", "lastProbeTime": None}
    if reason:
        cond["reason"] = reason
    return cond


@dataclass
class Kubelet:
    emu: Emulator
    ready_after: float = 2.0
    # Each pod's containers get ready ready_after + ready_spread x u seconds after it was first seen, u in [0, 1)
    # from its uid (deterministic per pod): pods of one wave become ready one by one, as probes pass in a cluster.
    ready_spread: float = 0.0
    clock: Callable[[], float] = time.monotonic
    ip_pools: Mapping[str, str] = field(default_factory=dict)  # node name -> CIDR its pods get addresses from
    default_pool: str = "10.244.0.0/16"
    # node name -> IPv6 CIDR: pods on it get a second address (dual-stack podIPs: IPv4 first, then IPv6)
    ipv6_pools: Mapping[str, str] = field(default_factory=dict)
    _seen: dict[str, float] = field(default_factory=dict)  # pod uid -> when first seen
    _terminating: dict[str, float] = field(default_factory=dict)  # pod uid -> when its deletion was first seen
    _next_ip: dict[str, int] = field(default_factory=dict)  # pool -> next host index
    _used: set[str] = field(default_factory=set)

    def _allocate(self, node: Obj | None) -> str:
        name = ((node or {}).get("metadata") or {}).get("name", "")
        return self._allocate_from(
            self.ip_pools.get(name) or ((node or {}).get("spec") or {}).get("podCIDR") or self.default_pool
        )

    def _allocate_from(self, pool: str) -> str:
        network = ipaddress.ip_network(pool, strict=False)
        index = self._next_ip.get(pool, 1)
        while True:
            if index >= network.num_addresses - 1:
                raise RuntimeError(f"pod IP pool {pool} is exhausted")
            address = str(network.network_address + index)
            index += 1
            if address not in self._used:
                break
        self._next_ip[pool] = index
        self._used.add(address)
        return address

    def sync(self) -> int:
        """One pass over the bound pods; returns how many writes it made."""
        writes = 0
        now = self.clock()
        nodes = {n["metadata"]["name"]: n for n in self.emu.list("nodes")}
        for pod in self.emu.list("pods"):
            meta, spec = pod["metadata"], pod.get("spec") or {}
            node_name = spec.get("nodeName")
            if not node_name:
                continue  # never scheduled: stays Pending, as without a scheduler
            uid = meta["uid"]
            seen = self._seen.setdefault(uid, now)
            if meta.get("deletionTimestamp"):
                started = self._terminating.setdefault(uid, now)
                if now - started >= float(meta.get("deletionGracePeriodSeconds") or 0):
                    try:
                        self.emu.delete("pods", meta["namespace"], meta["name"], grace_period=0)
                        writes += 1
                    except ApiError as exc:
                        if exc.code != 404:
                            raise
                    self._seen.pop(uid, None)
                    self._terminating.pop(uid, None)
                continue
            status = copy.deepcopy(pod.get("status") or {})
            if not status.get("podIP"):
                node = nodes.get(node_name)
                ip = self._allocate(node)
                addresses = ((node or {}).get("status") or {}).get("addresses") or []
                host_ip = next((a["address"] for a in addresses if a.get("type") == "InternalIP"), None)
                pod_ips = [{"ip": ip}]
                if node_name in self.ipv6_pools:
                    pod_ips.append({"ip": self._allocate_from(self.ipv6_pools[node_name])})
                status.update({"phase": "Running", "podIP": ip, "podIPs": pod_ips, "startTime": now_rfc3339()})
                if host_ip:
                    status["hostIP"], status["hostIPs"] = host_ip, [{"ip": host_ip}]
            containers_ready = now - seen >= self.ready_after + self.ready_spread * _unit(uid)
            new_status = self._with_conditions(pod, status, containers_ready)
            if new_status != (pod.get("status") or {}):
                pod["status"] = new_status
                try:
                    self.emu.update(pod, subresource="status")
                    writes += 1
                except ApiError as exc:
                    if exc.code not in (404, 409):
                        raise
        return writes

    @staticmethod
    def _with_conditions(pod: Obj, status: Obj, containers_ready: bool) -> Obj:
        spec = pod.get("spec") or {}
        existing = {c.get("type"): c for c in status.get("conditions") or []}
        gates = [g.get("conditionType") for g in spec.get("readinessGates") or []]
        gates_ok = all((existing.get(g) or {}).get("status") == "True" for g in gates)
        wanted = {
            "PodScheduled": _condition("PodScheduled", True),
            "Initialized": _condition("Initialized", True),
            "ContainersReady": _condition(
                "ContainersReady", containers_ready, None if containers_ready else "ContainersNotReady"
            ),
            "Ready": _condition(
                "Ready",
                containers_ready and gates_ok,
                None
                if containers_ready and gates_ok
                else ("ContainersNotReady" if not containers_ready else "ReadinessGatesNotReady"),
            ),
        }
        conditions: list[Obj] = []
        for ctype, cond in wanted.items():
            old = existing.get(ctype)
            if old is not None and old.get("status") == cond["status"] and old.get("reason") == cond.get("reason"):
                conditions.append(old)
            else:
                cond["lastTransitionTime"] = now_rfc3339()
                conditions.append(cond)
        # Conditions others own (readiness gates, DisruptionTarget) are kept as they are.
        conditions += [c for t, c in existing.items() if t not in wanted]
        out = dict(status)
        out["conditions"] = conditions
        out["containerStatuses"] = [
            {
                "name": c.get("name"),
                "image": c.get("image"),
                "ready": containers_ready,
                "restartCount": 0,
                "started": True,
                "state": {"running": {"startedAt": status.get("startTime") or now_rfc3339()}},
            }
            for c in spec.get("containers") or []
        ]
        return out


def template_hash(template: Obj) -> str:
    digest = hashlib.sha256(json.dumps(template, sort_keys=True).encode()).hexdigest()
    return "".join(c for c in digest if c in "bcdfghjklmnpqrstvwxz2456789")[:10] or "0"


def resolve(value: int | str, replicas: int, round_up: bool) -> int:
    """intstr.GetScaledValueFromIntOrPercent: a percentage of replicas, rounded up (maxSurge) or down."""
    if isinstance(value, int):
        return value
    percent = int(value.rstrip("%"))
    scaled = percent * replicas / 100
    return math.ceil(scaled) if round_up else math.floor(scaled)


def container(name: str = "app", image: str = "registry.example/app:1", ports: Sequence[Obj] = ()) -> Obj:
    body: Obj = {"name": name, "image": image}
    if ports:
        body["ports"] = [dict(p) for p in ports]
    return body


class PodSet:
    """A Deployment-like set of pods of one selector: revisions by template, round-robin placement."""

    def __init__(
        self,
        emu: Emulator,
        name: str,
        nodes: Sequence[str],
        namespace: str = "default",
        labels: Mapping[str, str] | None = None,
        seed: int = 0,
    ) -> None:
        if not nodes:
            raise ValueError("a PodSet needs at least one node to place pods on")
        self.emu, self.name, self.namespace = emu, name, namespace
        self.labels = dict(labels or {"app": name})
        self.nodes = list(nodes)
        self._placed = 0
        self._random = random.Random(seed)

    def create(self, count: int, template: Obj) -> list[str]:
        """``template``: a pod spec (containers, readinessGates, terminationGracePeriodSeconds, ...)."""
        revision = template_hash(template)
        names = []
        for _ in range(count):
            suffix = "".join(self._random.choices("bcdfghjklmnpqrstvwxz2456789", k=5))
            spec = copy.deepcopy(template)
            spec["nodeName"] = self.nodes[self._placed % len(self.nodes)]
            self._placed += 1
            pod = {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {
                    "name": f"{self.name}-{revision}-{suffix}",
                    "namespace": self.namespace,
                    "labels": {**self.labels, TEMPLATE_HASH_LABEL: revision},
                },
                "spec": spec,
            }
            names.append(self.emu.create(pod)["metadata"]["name"])
        return names

    def pods(self, include_terminating: bool = False) -> list[Obj]:
        out = []
        for pod in self.emu.list("pods", self.namespace):
            labels = pod["metadata"].get("labels") or {}
            selected = all(labels.get(k) == v for k, v in self.labels.items())
            if selected and (include_terminating or not pod["metadata"].get("deletionTimestamp")):
                out.append(pod)
        return sorted(out, key=lambda p: p["metadata"]["name"])

    def delete(self, pod: Obj) -> None:
        self.emu.delete("pods", self.namespace, pod["metadata"]["name"])


def _ready(pod: Obj) -> bool:
    conds = (pod.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conds)


class RollingUpdate:
    """Rolls ``pod_set`` to ``template`` with ``replicas`` pods, as the Deployment controller's RollingUpdate."""

    def __init__(
        self,
        pod_set: PodSet,
        template: Obj,
        replicas: int,
        max_surge: int | str = "25%",
        max_unavailable: int | str = "25%",
    ) -> None:
        self.pod_set, self.template, self.replicas = pod_set, template, replicas
        self.revision = template_hash(template)
        self.max_surge = resolve(max_surge, replicas, round_up=True)
        self.max_unavailable = resolve(max_unavailable, replicas, round_up=False)
        if self.max_surge == 0 and self.max_unavailable == 0:
            self.max_unavailable = 1  # ResolveFenceposts

    def _split(self) -> tuple[list[Obj], list[Obj]]:
        pods = self.pod_set.pods()
        new = [p for p in pods if p["metadata"]["labels"].get(TEMPLATE_HASH_LABEL) == self.revision]
        old = [p for p in pods if p["metadata"]["labels"].get(TEMPLATE_HASH_LABEL) != self.revision]
        return new, old

    def done(self) -> bool:
        new, old = self._split()
        return not old and len(new) == self.replicas and all(_ready(p) for p in new)

    def step(self) -> dict[str, int]:
        """One reconcile: scale the new revision up, then the old one down; returns what it did."""
        new, old = self._split()
        created = 0
        room = self.replicas + self.max_surge - (len(new) + len(old))
        if len(new) < self.replicas and room > 0:
            created = min(room, self.replicas - len(new))
            self.pod_set.create(created, self.template)
        new, old = self._split()
        min_available = self.replicas - self.max_unavailable
        deleted = 0
        # cleanupUnhealthyReplicas: unready old pods first, while the total stays >= minAvailable + new unready.
        new_unavailable = sum(1 for p in new if not _ready(p))
        budget = len(new) + len(old) - min_available - new_unavailable
        for pod in [p for p in old if not _ready(p)]:
            if budget <= 0:
                break
            self.pod_set.delete(pod)
            old.remove(pod)
            budget -= 1
            deleted += 1
        # scaleDownOldReplicaSetsForRollingUpdate: ready ones while available pods stay >= minAvailable.
        available = sum(1 for p in new + old if _ready(p))
        for pod in list(old):
            if available - 1 < min_available:
                break
            self.pod_set.delete(pod)
            available -= 1
            deleted += 1
        return {"created": created, "deleted": deleted}

    def run(self, between: Callable[[], None], max_steps: int = 1000) -> Iterator[dict[str, int]]:
        """Steps until done, calling ``between`` (advance the clock, run the kubelet and the controller) after each
        step and yielding what the step did once the world settled."""
        for _ in range(max_steps):
            if self.done():
                return
            action = self.step()
            between()
            yield action
        raise RuntimeError("rolling update did not finish")
