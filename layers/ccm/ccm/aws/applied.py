"""The checkpoint of what was applied for a Service (ccm.contracts.cloud.Applied), kept in the membership table.

Why: a converged Service costs one AWS read instead of a full describe of its load balancer (listeners, target
groups, their health and attributes, security groups, subnets). A no-op resync or a duplicate delivery reads the
checkpoint (one strongly consistent GetItem) and asks AWS one question: the load balancer is still there. A host
update registers only the difference by the stored target-group ARNs, and a delete deletes by them.

What keeps it honest:
- The fingerprint covers everything the desired state is computed from except the member nodes: the parsed
  configuration (every annotation and spec field the drivers read), the Service's identity, the cluster and VPC,
  and FINGERPRINT_VERSION (bumped whenever the mapping from configuration to AWS changes, so an upgraded controller
  re-applies once). A changed Service never matches an older checkpoint.
- The target set is stored apart (`put_targets`, conditional on the fingerprint): a host update never certifies a
  spec change.
- A full read-and-repair still runs on every retry, on a checkpoint older than `full_read_seconds` (spread per
  Service, so not all of them come due at once), and whenever the checkpoint is missing or a stored id is gone.
- Strongly consistent reads: an eventually consistent read may return the previous checkpoint, which would match a
  Service reverted to its previous spec while AWS holds the newer one. (1 read unit instead of 0.5 per 4 KB.)

Items: ("applied", <uid>), one per Service UID, small (ARNs, a hash, the instance ids). A tombstone (deleted=true)
expires after a day through the table's TTL, so a DELETED echo of our own delete costs no AWS call.
"""

from __future__ import annotations

import dataclasses
import enum
import hashlib
import json
import time
import zlib
from typing import Any, Final

from ccm.aws.table import ClusterTable
from ccm.aws.table import s as _s
from ccm.contracts.cloud import Applied

FINGERPRINT_VERSION: Final = 2  # 2: listener groups replace the all-ports frontend (issue 22)
FULL_READ_SECONDS: Final = 36 * 3600.0  # at the watcher's hourly resync: a full read once in about 36 resyncs
TOMBSTONE_TTL_SECONDS: Final = 24 * 3600
PARTITION: Final = "applied"


def canonical(value: Any) -> Any:
    """A JSON-able form whose serialisation does not depend on set order or the process's hash seed."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: canonical(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, enum.Enum):
        return canonical(value.value)
    if isinstance(value, dict):
        return {str(k): canonical(v) for k, v in sorted(value.items(), key=lambda kv: str(kv[0]))}
    if isinstance(value, frozenset | set):
        return sorted((canonical(v) for v in value), key=lambda v: json.dumps(v, sort_keys=True))
    if isinstance(value, tuple | list):
        return [canonical(v) for v in value]
    if value is None or isinstance(value, str | int | float | bool):
        return value
    return repr(value)


def fingerprint(*parts: Any) -> str:
    """Pure: a short hash of the desired state's inputs (pass everything but the member nodes)."""
    body = json.dumps(canonical([FINGERPRINT_VERSION, *parts]), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(body.encode()).hexdigest()[:32]


def due_for_full_read(applied: Applied, now: float, full_read_seconds: float = FULL_READ_SECONDS) -> bool:
    """Pure: a full read-and-repair is due. Each Service's period is stretched by up to a quarter, by its UID, so a
    burst of creations does not come due in one resync."""
    spread = (zlib.crc32(applied.uid.encode()) % 1000) / 4000.0
    return applied.verified_at <= 0 or now - applied.verified_at >= full_read_seconds * (1.0 + spread)


class AppliedTable:
    """AppliedStore over the cluster table (ccm.aws.table)."""

    def __init__(self, table: ClusterTable) -> None:
        self.table = table

    def get(self, uid: str) -> Applied | None:
        item = self.table.get(PARTITION, uid)
        return None if not item else from_item(item)

    def put(self, applied: Applied) -> None:
        self.table.put(to_item(applied))

    def put_targets(self, uid: str, fingerprint: str, targets: frozenset[str]) -> None:
        # False: a spec change was applied meanwhile (or the Service deleted): its own pass owns the checkpoint.
        self.table.update(
            PARTITION,
            uid,
            "SET targets = :t",
            "fp = :fp AND attribute_not_exists(deleted)",
            {":t": {"L": [_s(i) for i in sorted(targets)]}, ":fp": _s(fingerprint)},
        )

    def forget(self, uid: str) -> None:
        self.table.delete(PARTITION, uid)

    def tombstone(self, uid: str) -> None:
        expires = int(time.time()) + TOMBSTONE_TTL_SECONDS
        self.table.put({**ClusterTable.key(PARTITION, uid), "deleted": {"BOOL": True}, "expires": {"N": str(expires)}})


def to_item(applied: Applied) -> dict[str, Any]:
    item: dict[str, Any] = {
        "pk": _s(PARTITION),
        "sk": _s(applied.uid),
        "type": _s(applied.lb_type),
        "fp": _s(applied.fingerprint),
        "lb": _s(applied.lb_id),
        "dns": _s(applied.hostname),
        "tgs": {"L": [{"L": [_s(arn), {"N": str(port)}]} for arn, port in applied.target_groups]},
        "targets": {"L": [_s(i) for i in sorted(applied.targets)]},
        "sgs": {"L": [_s(g) for g in applied.security_groups]},
        "verified": {"N": repr(round(applied.verified_at, 3))},
    }
    if applied.released:
        item["released"] = {"BOOL": True}
    if applied.service_key:
        item["key"] = _s(applied.service_key)
    if applied.created_at:
        item["created"] = {"N": repr(round(applied.created_at, 3))}
    return item


def from_item(item: dict[str, Any]) -> Applied:
    uid = item["sk"]["S"]
    if item.get("deleted", {}).get("BOOL"):
        return Applied(uid, "", "", "", "", deleted=True)
    return Applied(
        uid=uid,
        lb_type=item["type"]["S"],
        fingerprint=item["fp"]["S"],
        lb_id=item["lb"]["S"],
        hostname=item.get("dns", {}).get("S", ""),
        target_groups=tuple((tg["L"][0]["S"], int(tg["L"][1]["N"])) for tg in item.get("tgs", {}).get("L", [])),
        targets=frozenset(t["S"] for t in item.get("targets", {}).get("L", [])),
        security_groups=tuple(g["S"] for g in item.get("sgs", {}).get("L", [])),
        verified_at=float(item.get("verified", {}).get("N", "0")),
        released=bool(item.get("released", {}).get("BOOL")),
        created_at=float(item.get("created", {}).get("N", "0")),
        service_key=item.get("key", {}).get("S", ""),
    )
