"""Pure relevance decisions: which observed changes become deltas, and what the watcher remembers per object.

The watcher keeps one small `CacheEntry` per remembered key, never a whole object:

* Nodes: every Node is remembered (uid, resourceVersion, fingerprint of `trim_node`) so heartbeat-only updates
  can be dropped and vanished Nodes detected after a relist.
* Services: only *relevant* Services are remembered (LoadBalancer type or still carrying our finalizer), with
  their trimmed object. They are few; keeping the trimmed copy lets the periodic resync emit SYNC deltas
  without re-listing, and lets a synthesised DELETED carry the last known state. Irrelevant Services need no
  memory: they only matter once they become relevant, which the event itself shows.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import Any, Final

from ccm.contracts.messages import Delta, delta_for

LB_FINALIZER: Final = "service.kubernetes.io/load-balancer-cleanup"
UPSERT_TYPES: Final = ("ADDED", "MODIFIED", "SYNC")


@dataclass(frozen=True, slots=True)
class CacheEntry:
    uid: str
    resource_version: str
    fingerprint: str
    trimmed: dict[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class Decision:
    deltas: tuple[Delta, ...]
    # The entry to remember for the key afterwards; None means forget the key.
    entry: CacheEntry | None
    # Why nothing (or only a synthesised DELETED) was forwarded: "irrelevant" / "unchanged"; "" when forwarded.
    dropped: str = ""


def service_is_relevant(trimmed: dict[str, Any]) -> bool:
    return trimmed.get("type") == "LoadBalancer" or LB_FINALIZER in (trimmed.get("finalizers") or ())


def fingerprint(uid: str, trimmed: dict[str, Any]) -> str:
    basis = trimmed
    if trimmed.get("type") == "LoadBalancer" and "deletionTimestamp" not in trimmed:
        # Our own finalizer write on a live LoadBalancer Service is an echo of a reconcile, not a change: forwarding
        # it costs a second (no-op) reconcile per new Service. Its removal on a ClusterIP Service still counts.
        basis = {**trimmed, "finalizers": [f for f in trimmed.get("finalizers") or () if f != LB_FINALIZER]}
    payload = json.dumps([uid, basis], sort_keys=True, separators=(",", ":")).encode()
    return hashlib.blake2b(payload, digest_size=16).hexdigest()


def key_of(kind: str, obj: dict[str, Any]) -> str:
    meta = obj.get("metadata") or {}
    return f"{meta.get('namespace', '')}/{meta.get('name', '')}" if kind == "Service" else str(meta.get("name", ""))


def tombstone(kind: str, key: str, entry: CacheEntry, observed_at: float) -> Delta:
    """A DELETED for a remembered object whose deletion was not observed (watch gap, uid change).

    Services carry their last known trimmed object; Nodes carry `{}` because the watcher does not keep trimmed
    Nodes (reconcilers re-read by key anyway).
    """
    return Delta(
        kind=kind,
        type="DELETED",
        key=key,
        uid=entry.uid,
        resource_version=entry.resource_version,
        observed_at=observed_at,
        object=dict(entry.trimmed or {}),
    )


def decide(
    kind: str,
    event_type: str,
    obj: dict[str, Any],
    previous: CacheEntry | None,
    *,
    observed_at: float,
    force: bool = False,
) -> Decision:
    """Decide what to forward for one observed event (or one relisted object when event_type is SYNC).

    `force` re-sends relevant objects even when unchanged (relist after the buffer overflowed).
    """
    delta = delta_for(kind, event_type, obj, observed_at)
    prefix: tuple[Delta, ...] = ()
    if previous is not None and previous.uid != delta.uid:
        # Same name, new uid: the old object was deleted while we were not looking. Its cleanup must not be
        # lost, so emit its DELETED ahead of anything about the new object (same group => same order on SQS).
        prefix = (tombstone(kind, delta.key, previous, observed_at),)
        previous = None
    relevant = kind == "Node" or service_is_relevant(delta.object)

    if event_type == "DELETED":
        forward = relevant or previous is not None
        return Decision(prefix + ((delta,) if forward else ()), None, "" if forward else "irrelevant")

    if not relevant and previous is None:
        return Decision(prefix, None, "irrelevant")
    fp = fingerprint(delta.uid, delta.object)
    if previous is not None and previous.fingerprint == fp and not force:
        # Keep the latest trimmed copy (it may differ in what the fingerprint ignores): tombstones carry it.
        trimmed = delta.object if kind == "Service" else None
        return Decision(
            prefix, replace(previous, resource_version=delta.resource_version, trimmed=trimmed), "unchanged"
        )
    if not relevant:
        # Was relevant (e.g. LoadBalancer -> ClusterIP, or our finalizer removed): forward once, then forget, so
        # its load balancer gets cleaned up and later updates are dropped.
        return Decision((*prefix, delta), None)
    entry = CacheEntry(
        uid=delta.uid,
        resource_version=delta.resource_version,
        fingerprint=fp,
        trimmed=delta.object if kind == "Service" else None,
    )
    return Decision((*prefix, delta), entry)


def vanished(kind: str, cache: dict[str, CacheEntry], listed_keys: Iterable[str], observed_at: float) -> list[Delta]:
    """DELETED deltas for remembered keys that a relist no longer returned."""
    present = set(listed_keys)
    return [tombstone(kind, key, entry, observed_at) for key, entry in cache.items() if key not in present]


def resync_deltas(kind: str, cache: dict[str, CacheEntry], observed_at: float) -> list[Delta]:
    """SYNC deltas for every remembered relevant Service, built from the cache alone."""
    return [
        Delta(
            kind=kind,
            type="SYNC",
            key=key,
            uid=entry.uid,
            resource_version=entry.resource_version,
            observed_at=observed_at,
            object=dict(entry.trimmed),
        )
        for key, entry in cache.items()
        if entry.trimmed is not None
    ]
