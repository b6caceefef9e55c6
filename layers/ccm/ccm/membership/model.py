"""Membership decisions as pure functions.

A node's *member record* is what load balancers need from it: is it a member (upstream StableLoadBalancerNodeSet
predicates), its instance id and its labels (for `target-node-labels`). Host updates are coalesced in time
buckets: every change inside one bucket maps to the same HOSTS message per Service (same deduplication id), and
that message is processed only once its bucket has ended, so it sees every change of the bucket at once.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from ccm.config import DEFAULT_BUCKET_SECONDS as DEFAULT_BUCKET_SECONDS
from ccm.contracts import kube as p
from ccm.contracts.store import MemberRecord as MemberRecord
from ccm.contracts.store import StoredNode as StoredNode

TARGET_NODE_LABELS: Final = "service.beta.kubernetes.io/aws-load-balancer-target-node-labels"


def member_record(node: Mapping[str, Any]) -> MemberRecord | None:
    """The record of a live Node object, or None when it is not a load balancer member."""
    if not p.is_member_node(dict(node)):
        return None
    meta = p.meta(dict(node))
    return MemberRecord(
        name=meta["name"],
        instance_id=p.instance_id(dict(node)) or "",
        labels=dict(meta.get("labels") or {}),
        resource_version=int(meta.get("resourceVersion") or 0),
    )


def member_record_from_trimmed(name: str, trimmed: Mapping[str, Any], resource_version: str) -> MemberRecord | None:
    """Same, from the trimmed Node a delta carries (ccm.contracts.messages.trim_node)."""
    node = {
        "metadata": {"name": name, "labels": trimmed.get("labels") or {}, "resourceVersion": resource_version},
        "spec": {"providerID": trimmed.get("providerID", ""), "taints": trimmed.get("taints") or []},
    }
    if trimmed.get("deletionTimestamp"):
        node["metadata"]["deletionTimestamp"] = trimmed["deletionTimestamp"]
    return member_record(node)


def same_membership(old: MemberRecord | None, new: MemberRecord | None) -> bool:
    """Readiness, taints and addresses do not matter; membership, instance and labels do."""
    if old is None or new is None:
        return old is new
    return (old.instance_id, dict(old.labels)) == (new.instance_id, dict(new.labels))


def parse_label_selector(value: str | None) -> dict[str, str]:
    """`k=v,k2=v2` of the target-node-labels annotation; entries without '=' are ignored, as upstream."""
    selector: dict[str, str] = {}
    for item in (value or "").split(","):
        key, sep, val = item.strip().partition("=")
        if sep and key.strip():
            selector[key.strip()] = val.strip()
    return selector


def selects(selector: Mapping[str, str], labels: Mapping[str, str]) -> bool:
    return all(labels.get(k) == v for k, v in selector.items())


def service_selector(svc: Mapping[str, Any]) -> dict[str, str]:
    return parse_label_selector(p.annotations_of(dict(svc)).get(TARGET_NODE_LABELS))


def members_for(selector: Mapping[str, str], records: Iterable[MemberRecord]) -> list[MemberRecord]:
    return sorted((r for r in records if selects(selector, r.labels)), key=lambda r: r.name)


def affected(selector: Mapping[str, str], old: MemberRecord | None, new: MemberRecord | None) -> bool:
    """Does a node's change move it into, out of, or within (new instance) this Service's target set?"""
    was = old is not None and selects(selector, old.labels)
    now = new is not None and selects(selector, new.labels)
    if was != now:
        return True
    return was and now and old is not None and new is not None and old.instance_id != new.instance_id


def bucket(now: float, width: int = DEFAULT_BUCKET_SECONDS) -> int:
    return int(now // width)


def bucket_end(index: int, width: int = DEFAULT_BUCKET_SECONDS) -> float:
    return float((index + 1) * width)


def digest(records: Iterable[MemberRecord]) -> str:
    """A short, order-independent fingerprint of a target set (name -> instance)."""
    pairs = sorted((r.name, r.instance_id) for r in records)
    return hashlib.sha256(json.dumps(pairs).encode()).hexdigest()[:16]


@dataclass(frozen=True, slots=True)
class MemberChange:
    """A difference between the table and the API that the periodic pass writes (and tells Services about)."""

    name: str
    old: MemberRecord | None
    new: MemberRecord | None
    resource_version: int
    gone: bool  # the node is not in the API any more: its item becomes a tombstone


def membership_drift(
    stored: Mapping[str, StoredNode], nodes: Iterable[Mapping[str, Any]], list_rv: int
) -> list[MemberChange]:
    """What the table must change to agree with one LIST of Nodes taken at `list_rv` (pure).

    Items written after the LIST (rv > list_rv) are newer than what it shows and are left alone, so a node that
    joined (or changed) after the LIST is never dropped or reverted. A member item whose node the LIST does not
    contain is a missed DELETED (watcher restarted across the deletion, a purged DLQ): it is removed. Live nodes
    whose stored membership differs (a missed MODIFIED) are rewritten; same membership is no write.
    """
    changes: list[MemberChange] = []
    seen: set[str] = set()
    for node in nodes:
        meta = p.meta(dict(node))
        name, rv = str(meta["name"]), int(meta.get("resourceVersion") or 0)
        seen.add(name)
        new = member_record(node)
        have = stored.get(name)
        if have is not None and have.resource_version >= rv:
            continue  # the table already holds this observation or a newer one
        old = have.record if have is not None else None
        if not same_membership(old, new):
            changes.append(MemberChange(name, old, new, rv, gone=False))
    for name, have in sorted(stored.items()):
        if name in seen or have.record is None or have.resource_version > list_rv:
            continue
        changes.append(MemberChange(name, have.record, None, max(list_rv, have.resource_version + 1), gone=True))
    return changes
