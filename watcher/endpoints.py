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

Coalescing (Coalescer): a Service's first slice change arms a window (WATCHER_ENDPOINTS_WINDOW_SECONDS, 250 ms by
default); the changes within it merge into one hint sent when the window closes. The window is not extended by
later changes, so a Service in continuous churn still gets one hint per window (no starvation), and a change waits
at most one window. A rolling update of 100 replicas, whose slice writes spread over tens of seconds, becomes about
one hint per window with changes in it instead of one per slice write.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

SERVICE_NAME_LABEL: Final = "kubernetes.io/service-name"
TARGET_TYPE_ANNOTATION: Final = "service.beta.kubernetes.io/aws-load-balancer-nlb-target-type"
# Below the latency budget's slack (endpoint ready -> RegisterTargets p99 <= 1,500 ms: issue 24) and above the
# spacing of one rollout step's slice writes, which then merge.
DEFAULT_WINDOW_SECONDS: Final = 0.25


def ip_mode(trimmed: Mapping[str, Any] | None) -> bool:
    """A live LoadBalancer Service (trimmed, ccm.contracts.messages.trim_service) whose targets are pod IPs."""
    if not trimmed or trimmed.get("type") != "LoadBalancer" or "deletionTimestamp" in trimmed:
        return False
    value = (trimmed.get("annotations") or {}).get(TARGET_TYPE_ANNOTATION, "")
    return str(value).strip().lower() == "ip"


@dataclass(frozen=True, slots=True)
class SliceRef:
    key: str  # "<namespace>/<slice name>"
    name: str
    service: str | None  # "<namespace>/<service name>", None without the label
    resource_version: str


def slice_ref(obj: Mapping[str, Any]) -> SliceRef:
    meta = obj.get("metadata") or {}
    namespace, name = str(meta.get("namespace", "")), str(meta.get("name", ""))
    service = (meta.get("labels") or {}).get(SERVICE_NAME_LABEL)
    return SliceRef(
        key=f"{namespace}/{name}",
        name=name,
        service=f"{namespace}/{service}" if service else None,
        resource_version=str(meta.get("resourceVersion", "")),
    )


@dataclass(frozen=True, slots=True)
class Change:
    """Service `service`'s slices changed; `deleted`: (slice name, last resourceVersion) when one went away."""

    service: str
    deleted: tuple[str, str] | None = None


class SliceIndex:
    """Slice key -> (Service key, resourceVersion), and each Service's slices (name -> resourceVersion). Not
    thread-safe: its owner locks."""

    def __init__(self) -> None:
        self._owner: dict[str, tuple[str, str]] = {}
        self._by_service: dict[str, dict[str, str]] = {}

    def __len__(self) -> int:
        return len(self._owner)

    def slices_of(self, service: str) -> dict[str, str]:
        return dict(self._by_service.get(service) or {})

    def apply(self, event_type: str, ref: SliceRef) -> list[Change]:
        """One watch event (or listed object: SYNC); the Services whose slices it changed (none when unchanged)."""
        previous = self._owner.get(ref.key)
        if event_type == "DELETED" or ref.service is None:
            if previous is not None:
                return [self._forget(ref.key, ref.name)]
            # Deleted before we remembered it (never listed): its deletion's resourceVersion is new all the same.
            return [Change(ref.service, (ref.name, ref.resource_version))] if ref.service else []
        if previous == (ref.service, ref.resource_version):
            return []  # a relist showing what we already know
        changes = []
        if previous is not None and previous[0] != ref.service:
            changes.append(self._forget(ref.key, ref.name))  # relabelled to another Service: gone from the first
        self._owner[ref.key] = (ref.service, ref.resource_version)
        self._by_service.setdefault(ref.service, {})[ref.name] = ref.resource_version
        return [*changes, Change(ref.service)]

    def vanished(self, listed: Iterable[str]) -> list[Change]:
        """After a full list: forget the remembered slices it did not return (deleted while we were not looking)."""
        present = set(listed)
        return [self._forget(key, key.partition("/")[2]) for key in list(self._owner) if key not in present]

    def _forget(self, key: str, name: str) -> Change:
        service, resource_version = self._owner.pop(key)
        slices = self._by_service.get(service) or {}
        slices.pop(name, None)
        if not slices:
            self._by_service.pop(service, None)
        return Change(service, (name, resource_version))


@dataclass(slots=True)
class Pending:
    """One Service's hint being coalesced."""

    due: float  # clock time its window closes
    first_seen: float  # wall time of its first change: the hint's observedAt (end-to-end latency starts there)
    changes: int = 0
    deleted: dict[str, str] = field(default_factory=dict)  # slice name -> last resourceVersion


class Coalescer:
    """Per-Service windows (module docstring); the clock is injected. Not thread-safe: its owner locks."""

    def __init__(self, window: float = DEFAULT_WINDOW_SECONDS, clock: Callable[[], float] = time.monotonic) -> None:
        self.window = window
        self._clock = clock
        self._pending: dict[str, Pending] = {}

    def __len__(self) -> int:
        return len(self._pending)

    def __contains__(self, service: str) -> bool:
        return service in self._pending

    def mark(self, change: Change, seen_at: float) -> bool:
        """Merge a change into its Service's hint; True when it armed a new window (False: merged)."""
        pending = self._pending.get(change.service)
        armed = pending is None
        if pending is None:
            pending = self._pending[change.service] = Pending(due=self._clock() + self.window, first_seen=seen_at)
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
