"""The controllers' stores (ccm.contracts.store) as views of the cluster table (ccm.aws.table.ClusterTable).

Membership (ccm.membership): why a table: a service reconcile must not LIST every Node from the API server
(megabytes at 1,000 nodes) when membership did not change. The nodes Lambda keeps one small item per node, written
only when what load balancers care about changes; a reconcile reads them with one Query. Items (pk, sk):
- ("node", <name>): instance, labels, member flag, rv (the Node's resourceVersion). Non-members and deleted nodes
  stay as items with member=false (a deleted one expires by TTL), so an older write can never resurrect them:
  every write is conditional on a newer resourceVersion. (resourceVersions are compared as integers, which holds
  for etcd-backed API servers; the API only promises opacity, so this is a documented assumption.)
- ("node", "#seeded"): present once a full LIST seeded the table; until then readers fall back to the API.
- ("service", <ns/name>): uid and target-node-labels selector of a LoadBalancer Service we serve.

Orphan marks (ccm.sweeper): ("sweeper", <resource ARN>) with `since`, the first sight of each orphan. One Query per
run reads them all; an item is written when an orphan is first seen and deleted as soon as the resource is deleted
or stops being an orphan, so the partition holds exactly the current orphans. A TTL backstop (`expires`) drops
items a removed sweeper left behind; an expired item only restarts a grace period (safe).
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterable, Mapping
from typing import Any, Final

from ccm.aws.table import ClusterTable, Item, s
from ccm.contracts.store import MemberRecord, StoredNode

NODE_TOMBSTONE_TTL_SECONDS: Final = 24 * 3600
SEEDED_MARKER: Final = "#seeded"  # not a valid node name, so it cannot collide
ORPHAN_PARTITION: Final = "sweeper"
ORPHAN_TTL_SECONDS: Final = 14 * 24 * 3600


class MembershipTable:
    """ccm.contracts.store.MembershipStore over the cluster table."""

    def __init__(self, table: ClusterTable) -> None:
        self.table = table

    # -- nodes ------------------------------------------------------------------------------------------------
    def members(self) -> list[MemberRecord] | None:
        items = self.table.query("node")  # one Query: the seeded marker lives in the same partition
        if not any(item["sk"]["S"] == SEEDED_MARKER for item in items):
            return None
        return [_record(item) for item in items if item.get("member", {}).get("BOOL")]

    def node_states(self) -> tuple[bool, dict[str, StoredNode]]:
        items = self.table.query("node")
        states = {
            item["sk"]["S"]: StoredNode(
                _record(item) if item.get("member", {}).get("BOOL") else None, int(item["rv"]["N"])
            )
            for item in items
            if item["sk"]["S"] != SEEDED_MARKER
        }
        return len(states) < len(items), states

    def mark_seeded(self) -> None:
        self.table.put({**ClusterTable.key("node", SEEDED_MARKER), "at": {"N": str(int(time.time()))}})

    def get(self, name: str) -> tuple[MemberRecord | None, int]:
        item = self.table.get("node", name, consistent=False)  # the write after it is conditional on the rv
        if not item:
            return None, 0
        rv = int(item["rv"]["N"])
        return (_record(item) if item.get("member", {}).get("BOOL") else None), rv

    def write(self, name: str, record: MemberRecord | None, resource_version: int, deleted: bool = False) -> bool:
        item: Item = {
            **ClusterTable.key("node", name),
            "rv": {"N": str(resource_version)},
            "member": {"BOOL": record is not None},
        }
        if record is not None:
            item["instance"] = s(record.instance_id)
            item["labels"] = {"M": {k: s(v) for k, v in record.labels.items()}}
        if deleted:
            item["expires"] = {"N": str(int(time.time()) + NODE_TOMBSTONE_TTL_SECONDS)}
        return self.table.put(item, "attribute_not_exists(rv) OR rv < :rv", {":rv": {"N": str(resource_version)}})

    def seed(self, nodes: Iterable[tuple[str, MemberRecord | None, int]]) -> None:
        for name, record, rv in nodes:
            self.write(name, record, rv)
        self.mark_seeded()

    # -- services ---------------------------------------------------------------------------------------------
    def register_service(self, key: str, uid: str, selector: Mapping[str, str], known_new: bool = False) -> bool:
        """Reads first so a repeat writes nothing (`known_new`: the caller knows there is nothing to read, e.g. the
        Service's first reconcile)."""
        current = None if known_new else self.table.get("service", key, consistent=False)
        if current and current["uid"]["S"] == uid and _selector(current) == dict(selector):
            return False
        self.table.put(
            {
                **ClusterTable.key("service", key),
                "uid": s(uid),
                "selector": {"M": {k: s(v) for k, v in selector.items()}},
            }
        )
        return True

    def unregister_service(self, key: str, uid: str) -> None:
        self.table.delete("service", key, "attribute_not_exists(uid) OR uid = :uid", {":uid": s(uid)})

    def services(self) -> list[tuple[str, str, dict[str, str]]]:
        return [(item["sk"]["S"], item["uid"]["S"], _selector(item)) for item in self.table.query("service")]


def _selector(item: Mapping[str, Any]) -> dict[str, str]:
    return {k: v["S"] for k, v in item.get("selector", {}).get("M", {}).items()}


def _record(item: Mapping[str, Any]) -> MemberRecord:
    return MemberRecord(
        name=item["sk"]["S"],
        instance_id=item.get("instance", {}).get("S", ""),
        labels={k: v["S"] for k, v in item.get("labels", {}).get("M", {}).items()},
        resource_version=int(item["rv"]["N"]),
    )


class OrphanMarksTable:
    """ccm.contracts.store.OrphanMarks over the cluster table."""

    def __init__(self, table: ClusterTable) -> None:
        self.table = table

    def load(self) -> dict[str, float]:
        return {item["sk"]["S"]: float(item["since"]["N"]) for item in self.table.query(ORPHAN_PARTITION)}

    def mark(self, key: str, since: float) -> None:
        self.table.put(
            {
                **ClusterTable.key(ORPHAN_PARTITION, key),
                "since": {"N": str(math.ceil(since))},  # whole seconds, rounded up: never early
                "expires": {"N": str(int(since) + ORPHAN_TTL_SECONDS)},
            }
        )

    def forget(self, key: str) -> None:
        self.table.delete(ORPHAN_PARTITION, key)
