"""The cluster's one DynamoDB table (key schema pk/sk, TTL attribute `expires`): the only module that calls
DynamoDB. Its views (ccm.aws.table_views, ccm.aws.applied) speak in items; this speaks in calls.

Every conditional write answers False when its condition failed (ConditionalCheckFailedException) and raises on
anything else. Reads are strongly consistent unless the caller says otherwise: a host update runs right after its
bucket ended and a checkpoint read must see the last pass's write (an eventually consistent read may return the
previous one).
"""

from __future__ import annotations

from typing import Any

from botocore.exceptions import ClientError

from ccm.aws.clients import AwsClients
from ccm.errors import error_code

Item = dict[str, Any]


def s(value: str) -> dict[str, str]:
    """A DynamoDB string attribute."""
    return {"S": value}


class ClusterTable:
    def __init__(self, table_name: str, clients: AwsClients) -> None:
        self.name = table_name
        self.clients = clients

    @property
    def _ddb(self) -> Any:
        # Made on first use (ccm.aws.clients: a batch that needs no AWS call never imports boto3).
        return self.clients.client("dynamodb")

    @staticmethod
    def key(pk: str, sk: str) -> Item:
        return {"pk": s(pk), "sk": s(sk)}

    def get(self, pk: str, sk: str, consistent: bool = True) -> Item | None:
        """`consistent=False` where a stale answer is harmless (the write after it is conditional): half the cost."""
        item: Item | None = self._ddb.get_item(
            TableName=self.name, Key=self.key(pk, sk), ConsistentRead=consistent
        ).get("Item")
        return item

    def query(self, pk: str) -> list[Item]:
        """Every item of the partition, all pages."""
        items: list[Item] = []
        for page in self._ddb.get_paginator("query").paginate(
            TableName=self.name,
            KeyConditionExpression="pk = :pk",
            ExpressionAttributeValues={":pk": s(pk)},
            ConsistentRead=True,
        ):
            items.extend(page.get("Items", []))
        return items

    def put(self, item: Item, condition: str | None = None, values: Item | None = None) -> bool:
        return self._conditional(self._ddb.put_item, {"Item": item}, condition, values)

    def update(self, pk: str, sk: str, expression: str, condition: str, values: Item) -> bool:
        return self._conditional(
            self._ddb.update_item, {"Key": self.key(pk, sk), "UpdateExpression": expression}, condition, values
        )

    def delete(self, pk: str, sk: str, condition: str | None = None, values: Item | None = None) -> bool:
        return self._conditional(self._ddb.delete_item, {"Key": self.key(pk, sk)}, condition, values)

    def _conditional(self, call: Any, args: Item, condition: str | None, values: Item | None) -> bool:
        if condition is not None:
            args["ConditionExpression"] = condition
        if values:
            args["ExpressionAttributeValues"] = values
        try:
            call(TableName=self.name, **args)
        except ClientError as err:
            if error_code(err) == "ConditionalCheckFailedException":
                return False
            raise
        return True
