"""EndpointSlice changes -> coalesced ENDPOINTS hints (ccm.contracts.messages.endpoints_hint): the pure parts.

Which slices: every `discovery.k8s.io/v1` EndpointSlice labelled `kubernetes.io/service-name`, whoever manages it
(`endpointslice.kubernetes.io/managed-by`): the AWS Load Balancer Controller and kube-proxy read every slice with
the label, and the reconciler decides which endpoints count, so the watcher forwards a change of any of them. A
slice without the label belongs to no Service and is not remembered.

What is remembered (SliceIndex): per slice its Service's key and its resourceVersion, never the slice. That is
enough to tell, after a relist, which Services' slices changed while the watch was down, and to give every hint a
digest of the slice state it announces (its deduplication id).

Which Services: those the Service informer remembers (relevant) whose trimmed object is a live LoadBalancer with
`service.beta.kubernetes.io/aws-load-balancer-nlb-target-type: ip` (trimmed, case-insensitive): `ip_mode`. Judged
when the hint is due, so a Service that left `ip` mode or was deleted meanwhile has its pending hint dropped (its
own MODIFIED or DELETED covers it).

Which changes (SliceIndex): only those that can change what is registered. Per slice the index keeps two digests of
its content (ccm.contracts.endpoints.endpoint_role): its TARGETS (ready, not terminating, Pod-backed endpoints,
with the slice's ports and address type) and its WAITING endpoints (neither ready nor terminating: registered only
through our readiness gate, which the reconciler decides after reading the pod). A write that changes neither (a
terminating endpoint removed after it was deregistered, a zone hint, a node name, a slice rewritten by the
controller with the same endpoints) is remembered but not forwarded: in a rolling update about a quarter of the
slice writes are such removals.

Coalescing (Coalescer): a Service's first slice change arms a window (WATCHER_ENDPOINTS_WINDOW_SECONDS, 500 ms by
default); the changes within it merge into one hint sent when the window closes. The window is not extended by
later changes, so a Service in continuous churn still gets one hint per window (no starvation), and a change waits
at most one window. A change of WAITING endpoints only (a new pod has an address, not yet ready) arms the longer
waiting window (WATCHER_ENDPOINTS_WAITING_WINDOW_SECONDS, 5 s): it matters only to pods that declare our gate,
whose pass then checks their containers again one health-check interval later anyway (5 s is the shortest
interval an NLB allows), and in a rollout the pod's readiness, a TARGETS change, nearly always comes first and
takes it along in the short window. A rolling update of 100 replicas, whose slice writes spread over tens of
seconds, becomes about one hint per short window with target changes in it instead of one per slice write.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from ccm.contracts.endpoints import TARGET, WAITING, endpoint_role
from ccm.contracts.kube import belongs_to_us

SERVICE_NAME_LABEL: Final = "kubernetes.io/service-name"
TARGET_TYPE_ANNOTATION: Final = "service.beta.kubernetes.io/aws-load-balancer-nlb-target-type"
# Within the latency budget (endpoint ready -> RegisterTargets p99 <= 1,500 ms: issue 24; a pass takes 0.5-0.8 s
# more) and long enough that a 100-replica rollout's readiness, spread over seconds per wave, makes at most ~50
# Register/Deregister calls (250 ms made 57: bench ip_targets, docs/performance.md).
DEFAULT_WINDOW_SECONDS: Final = 0.5
# Waiting endpoints only (module docstring): no longer than the shortest NLB health-check interval.
DEFAULT_WAITING_WINDOW_SECONDS: Final = 5.0


def ip_mode(
    trimmed: Mapping[str, Any] | None, load_balancer_class: str | None = None, claim_unclassed: bool = True
) -> bool:
    """A live LoadBalancer Service (trimmed, ccm.contracts.messages.trim_service) whose targets are pod IPs and that
    we serve (ccm.contracts.kube.belongs_to_us: our `loadBalancerClass`, or none when the stack claims those, and
    not handed to the AWS Load Balancer Controller by `aws-load-balancer-type`). None: any class counts."""
    if not trimmed or trimmed.get("type") != "LoadBalancer" or "deletionTimestamp" in trimmed:
        return False
    if load_balancer_class is not None:
        as_service = {
            "metadata": {"annotations": trimmed.get("annotations") or {}},
            "spec": {"loadBalancerClass": trimmed.get("loadBalancerClass")},
        }
        if not belongs_to_us(as_service, load_balancer_class, claim_unclassed):
            return False
    value = (trimmed.get("annotations") or {}).get(TARGET_TYPE_ANNOTATION, "")
    return str(value).strip().lower() == "ip"


NOTHING: Final = ""  # a slice's digest when it holds no endpoint of that role


@dataclass(frozen=True, slots=True)
class SliceRef:
    key: str  # "<namespace>/<slice name>"
    name: str
    service: str | None  # "<namespace>/<service name>", None without the label
    resource_version: str
    targets: str = NOTHING  # digest of its TARGET endpoints and ports (module docstring)
    waiting: str = NOTHING  # digest of its WAITING endpoints and ports


def _digest(role: str, obj: Mapping[str, Any]) -> str:
    endpoints = sorted(
        [str(ep["addresses"][0]), str((ep.get("targetRef") or {}).get("name", ""))]
        for ep in obj.get("endpoints") or []
        if endpoint_role(ep) == role
    )
    if not endpoints:
        return NOTHING
    ports = sorted(
        [str(p.get("name") or ""), str(p.get("protocol") or "TCP"), p.get("port")] for p in obj.get("ports") or []
    )
    payload = json.dumps([obj.get("addressType"), ports, endpoints], separators=(",", ":"), default=str).encode()
    return hashlib.blake2b(payload, digest_size=12).hexdigest()


def slice_ref(obj: Mapping[str, Any]) -> SliceRef:
    meta = obj.get("metadata") or {}
    namespace, name = str(meta.get("namespace", "")), str(meta.get("name", ""))
    service = (meta.get("labels") or {}).get(SERVICE_NAME_LABEL)
    return SliceRef(
        key=f"{namespace}/{name}",
        name=name,
        service=f"{namespace}/{service}" if service else None,
        resource_version=str(meta.get("resourceVersion", "")),
        targets=_digest(TARGET, obj),
        waiting=_digest(WAITING, obj),
    )


@dataclass(frozen=True, slots=True)
class Change:
    """Service `service`'s slices changed; `deleted`: (slice name, last resourceVersion) when one went away.
    `urgent`: its targets changed (False: only its waiting endpoints: the longer window)."""

    service: str
    deleted: tuple[str, str] | None = None
    urgent: bool = True


@dataclass(frozen=True, slots=True)
class _Remembered:
    service: str
    resource_version: str
    targets: str
    waiting: str


def _change(
    service: str, before: _Remembered | None, after: SliceRef | None, deleted: tuple[str, str] | None
) -> list[Change]:
    """The change a slice's new state (None: gone) makes to its Service, if any (module docstring)."""
    old_targets, old_waiting = (before.targets, before.waiting) if before is not None else (NOTHING, NOTHING)
    new_targets, new_waiting = (after.targets, after.waiting) if after is not None else (NOTHING, NOTHING)
    if old_targets != new_targets:
        return [Change(service, deleted, urgent=True)]
    if old_waiting != new_waiting:
        return [Change(service, deleted, urgent=False)]
    return []


class SliceIndex:
    """Slice key -> its Service's key, resourceVersion and content digests, and each Service's slices (name ->
    resourceVersion). Not thread-safe: its owner locks."""

    def __init__(self) -> None:
        self._owner: dict[str, _Remembered] = {}
        self._by_service: dict[str, dict[str, str]] = {}

    def __len__(self) -> int:
        return len(self._owner)

    def slices_of(self, service: str) -> dict[str, str]:
        return dict(self._by_service.get(service) or {})

    def apply(self, event_type: str, ref: SliceRef) -> list[Change]:
        """One watch event (or listed object: SYNC); the Services whose targets or waiting endpoints it changed
        (none when it changed neither: the new resourceVersion is remembered all the same)."""
        previous = self._owner.get(ref.key)
        if event_type == "DELETED" or ref.service is None:
            if previous is not None:
                return self._forget(ref.key, ref.name)
            # Deleted before we remembered it (never listed): its content says whether it mattered.
            if ref.service is None:
                return []
            return _change(ref.service, None, ref, (ref.name, ref.resource_version))
        if (
            previous is not None
            and previous.resource_version == ref.resource_version
            and previous.service == ref.service
        ):
            return []  # a relist showing what we already know
        changes = []
        if previous is not None and previous.service != ref.service:
            changes += self._forget(ref.key, ref.name)  # relabelled to another Service: gone from the first
            previous = None
        self._owner[ref.key] = _Remembered(ref.service, ref.resource_version, ref.targets, ref.waiting)
        self._by_service.setdefault(ref.service, {})[ref.name] = ref.resource_version
        return [*changes, *_change(ref.service, previous, ref, None)]

    def vanished(self, listed: Iterable[str]) -> list[Change]:
        """After a full list: forget the remembered slices it did not return (deleted while we were not looking)."""
        present = set(listed)
        return [c for key in list(self._owner) if key not in present for c in self._forget(key, key.partition("/")[2])]

    def _forget(self, key: str, name: str) -> list[Change]:
        gone = self._owner.pop(key)
        slices = self._by_service.get(gone.service) or {}
        slices.pop(name, None)
        if not slices:
            self._by_service.pop(gone.service, None)
        return _change(gone.service, gone, None, (name, gone.resource_version))


@dataclass(slots=True)
class Pending:
    """One Service's hint being coalesced."""

    due: float  # clock time its window closes
    first_seen: float  # wall time of its first change: the hint's observedAt (end-to-end latency starts there)
    urgent: bool = True  # some change in it changed targets (False: waiting endpoints only, the longer window)
    changes: int = 0
    deleted: dict[str, str] = field(default_factory=dict)  # slice name -> last resourceVersion


class Coalescer:
    """Per-Service windows (module docstring); the clock is injected. Not thread-safe: its owner locks."""

    def __init__(
        self,
        window: float = DEFAULT_WINDOW_SECONDS,
        clock: Callable[[], float] = time.monotonic,
        waiting_window: float = DEFAULT_WAITING_WINDOW_SECONDS,
    ) -> None:
        self.window = window
        self.waiting_window = max(waiting_window, window)
        self._clock = clock
        self._pending: dict[str, Pending] = {}

    def __len__(self) -> int:
        return len(self._pending)

    def __contains__(self, service: str) -> bool:
        return service in self._pending

    def mark(self, change: Change, seen_at: float) -> bool:
        """Merge a change into its Service's hint; True when it armed a window or moved one earlier (False: merged)."""
        pending = self._pending.get(change.service)
        armed = pending is None
        due = self._clock() + (self.window if change.urgent else self.waiting_window)
        if pending is None:
            pending = self._pending[change.service] = Pending(due=due, first_seen=seen_at, urgent=change.urgent)
        elif change.urgent and not pending.urgent:
            # A target change joins a waiting hint: it goes in the short window, and its latency starts here.
            pending.due, pending.first_seen, pending.urgent = min(pending.due, due), seen_at, True
            armed = True
        pending.changes += 1
        if change.deleted is not None:
            pending.deleted[change.deleted[0]] = change.deleted[1]
        return armed

    def next_due(self) -> float | None:
        return min((p.due for p in self._pending.values()), default=None)

    def take_due(self, everything: bool = False) -> list[tuple[str, Pending]]:
        """The hints whose window closed (all of them with `everything`: shutdown), oldest first; forgotten."""
        now = self._clock()
        due = sorted(
            ((s, p) for s, p in self._pending.items() if everything or p.due <= now), key=lambda item: item[1].due
        )
        for service, _ in due:
            del self._pending[service]
        return due
