"""The membership table (DynamoDB): member nodes and the LoadBalancer Services that need host updates.

Why a table: a service reconcile must not LIST every Node from the API server (megabytes at 1,000 nodes) when
membership did not change. The nodes Lambda keeps one small item per node, written only when what load balancers
care about changes; a reconcile reads them with one Query.

Items (pk, sk):
- ("node", <name>): instance, labels, member flag, rv (the Node's resourceVersion). Non-members and deleted nodes
  stay as items with member=false (a deleted one expires by TTL), so an older write can never resurrect them:
  every write is conditional on a newer resourceVersion. (resourceVersions are compared as integers, which holds
  for etcd-backed API servers; the API only promises opacity, so this is a documented assumption.)
- ("node", "#seeded"): present once a full LIST seeded the table; until then readers fall back to the API.
- ("service", <ns/name>): uid and target-node-labels selector of a LoadBalancer Service we serve.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from typing import Any

from botocore.exceptions import ClientError

from ccm.contracts.cloud import CloudClients
from ccm.errors import error_code
from ccm.membership.model import MemberRecord, StoredNode

TOMBSTONE_TTL_SECONDS = 24 * 3600
SEEDED_MARKER = "#seeded"  # not a valid node name, so it cannot collide


def _s(value: str) -> dict[str, str]:
    return {"S": value}


class MembershipStore:
    def __init__(self, table_name: str, clients: CloudClients) -> None:
        self.table = table_name
        self.clients = clients

    @property
    def _ddb(self) -> Any:
        return self.clients.client("dynamodb")

    # -- nodes ------------------------------------------------------------------------------------------------
    def members(self) -> list[MemberRecord] | None:
        """Every member node, or None while the table was never seeded (callers then LIST and seed)."""
        items = self._query("node")  # one Query: the seeded marker lives in the same partition
        if not any(item["sk"]["S"] == SEEDED_MARKER for item in items):
            return None
        return [_record(item) for item in items if item.get("member", {}).get("BOOL")]

    def node_states(self) -> tuple[bool, dict[str, StoredNode]]:
        """Whether the table was seeded, and every node item (members, non-members, tombstones): one Query."""
        items = self._query("node")
        states = {
            item["sk"]["S"]: StoredNode(
                _record(item) if item.get("member", {}).get("BOOL") else None, int(item["rv"]["N"])
            )
            for item in items
            if item["sk"]["S"] != SEEDED_MARKER
        }
        return len(states) < len(items), states

    def mark_seeded(self) -> None:
        marker = {"pk": _s("node"), "sk": _s(SEEDED_MARKER), "at": {"N": str(int(time.time()))}}
        self._ddb.put_item(TableName=self.table, Item=marker)

    def get(self, name: str) -> tuple[MemberRecord | None, int]:
        """The stored record of a node (None when absent or not a member) and the stored resourceVersion."""
        item = self._ddb.get_item(TableName=self.table, Key={"pk": _s("node"), "sk": _s(name)}).get("Item")
        if not item:
            return None, 0
        rv = int(item["rv"]["N"])
        return (_record(item) if item.get("member", {}).get("BOOL") else None), rv

    def write(self, name: str, record: MemberRecord | None, resource_version: int, deleted: bool = False) -> bool:
        """Store a node's state if it is newer than what is stored; False when a newer write won."""
        item: dict[str, Any] = {
            "pk": _s("node"),
            "sk": _s(name),
            "rv": {"N": str(resource_version)},
            "member": {"BOOL": record is not None},
        }
        if record is not None:
            item["instance"] = _s(record.instance_id)
            item["labels"] = {"M": {k: _s(v) for k, v in record.labels.items()}}
        if deleted:
            item["expires"] = {"N": str(int(time.time()) + TOMBSTONE_TTL_SECONDS)}
        try:
            self._ddb.put_item(
                TableName=self.table,
                Item=item,
                ConditionExpression="attribute_not_exists(rv) OR rv < :rv",
                ExpressionAttributeValues={":rv": {"N": str(resource_version)}},
            )
        except ClientError as err:
            if error_code(err) == "ConditionalCheckFailedException":
                return False
            raise
        return True

    def seed(self, nodes: Iterable[tuple[str, MemberRecord | None, int]]) -> None:
        """Store a full LIST (name, record, rv) and mark the table seeded. Conditional writes keep newer data."""
        for name, record, rv in nodes:
            self.write(name, record, rv)
        self.mark_seeded()

    # -- services ---------------------------------------------------------------------------------------------
    def register_service(self, key: str, uid: str, selector: Mapping[str, str], known_new: bool = False) -> bool:
        """Record a LoadBalancer Service for host updates; reads first so a repeat writes nothing (`known_new`:
        the caller knows there is nothing to read, e.g. the Service's first reconcile)."""
        current = None
        if not known_new:
            current = self._ddb.get_item(TableName=self.table, Key={"pk": _s("service"), "sk": _s(key)}).get("Item")
        if (
            current
            and current["uid"]["S"] == uid
            and {k: v["S"] for k, v in current.get("selector", {}).get("M", {}).items()} == dict(selector)
        ):
            return False
        self._ddb.put_item(
            TableName=self.table,
            Item={
                "pk": _s("service"),
                "sk": _s(key),
                "uid": _s(uid),
                "selector": {"M": {k: _s(v) for k, v in selector.items()}},
            },
        )
        return True

    def unregister_service(self, key: str, uid: str) -> None:
        try:
            self._ddb.delete_item(
                TableName=self.table,
                Key={"pk": _s("service"), "sk": _s(key)},
                ConditionExpression="attribute_not_exists(uid) OR uid = :uid",
                ExpressionAttributeValues={":uid": _s(uid)},
            )
        except ClientError as err:
            if error_code(err) != "ConditionalCheckFailedException":
                raise

    def services(self) -> list[tuple[str, str, dict[str, str]]]:
        return [
            (item["sk"]["S"], item["uid"]["S"], {k: v["S"] for k, v in item.get("selector", {}).get("M", {}).items()})
            for item in self._query("service")
        ]

    def _query(self, pk: str) -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = []
        for page in self._ddb.get_paginator("query").paginate(
            TableName=self.table,
            KeyConditionExpression="pk = :pk",
            ExpressionAttributeValues={":pk": _s(pk)},
            # A host update is processed right after its bucket ended: it must see the last writes.
            ConsistentRead=True,
        ):
            items.extend(page.get("Items", []))
        return items


def _record(item: Mapping[str, Any]) -> MemberRecord:
    return MemberRecord(
        name=item["sk"]["S"],
        instance_id=item.get("instance", {}).get("S", ""),
        labels={k: v["S"] for k, v in item.get("labels", {}).get("M", {}).items()},
        resource_version=int(item["rv"]["N"]),
    )
