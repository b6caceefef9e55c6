"""First sight of each orphan, kept in the membership table under its own partition ("sweeper", <resource ARN>).

One Query per run reads them all; an item is written when an orphan is first seen and deleted as soon as the
resource is deleted or stops being an orphan, so the partition holds exactly the current orphans. A TTL backstop
(`expires`) drops items a removed sweeper left behind; an expired item only restarts a grace period (safe).
"""

from __future__ import annotations

import math
from typing import Any, Final

from ccm.aws.clients import AwsClients

PARTITION: Final = "sweeper"
TTL_SECONDS: Final = 14 * 24 * 3600


def _s(value: str) -> dict[str, str]:
    return {"S": value}


class OrphanMarks:
    def __init__(self, table_name: str, clients: AwsClients) -> None:
        self.table = table_name
        self.clients = clients

    @property
    def _ddb(self) -> Any:
        return self.clients.client("dynamodb")

    def load(self) -> dict[str, float]:
        marks: dict[str, float] = {}
        kwargs: dict[str, Any] = {
            "TableName": self.table,
            "KeyConditionExpression": "pk = :pk",
            "ExpressionAttributeValues": {":pk": _s(PARTITION)},
            "ConsistentRead": True,
        }
        while True:
            page = self._ddb.query(**kwargs)
            for item in page.get("Items", []):
                marks[item["sk"]["S"]] = float(item["since"]["N"])
            if "LastEvaluatedKey" not in page:
                return marks
            kwargs["ExclusiveStartKey"] = page["LastEvaluatedKey"]

    def mark(self, key: str, since: float) -> None:
        self._ddb.put_item(
            TableName=self.table,
            Item={
                "pk": _s(PARTITION),
                "sk": _s(key),
                "since": {"N": str(math.ceil(since))},  # whole seconds, rounded up: never early
                "expires": {"N": str(int(since) + TTL_SECONDS)},
            },
        )

    def forget(self, key: str) -> None:
        self._ddb.delete_item(TableName=self.table, Key={"pk": _s(PARTITION), "sk": _s(key)})
