"""boto3 clients with standard retries and exact call counting (botocore event hooks)."""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Mapping
from typing import Any

import boto3
from botocore.config import Config

from ccm.aws import faults

READ_PREFIXES = ("Describe", "Get", "List", "Query", "Scan", "BatchGet")
# Adaptive mode adds client-side rate limiting on throttling errors, so bursts back off instead of failing.
RETRY_CONFIG = Config(retries={"mode": "adaptive", "max_attempts": 8}, connect_timeout=5, read_timeout=20)


class CallCounter:
    """Counts every API call made through the clients it is attached to (retries included)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.calls: Counter[str] = Counter()
        # Per-thread view: the devstack runner runs several "Lambdas" as threads of one process.
        self._local = threading.local()

    def attach(self, client: Any) -> Any:
        client.meta.events.register("before-call.*.*", self._on_call)
        return client

    def _on_call(self, model: Any, **_: Any) -> None:
        service = model.service_model.service_name
        op = f"{service}:{model.name}"
        with self._lock:
            self.calls[op] += 1
        self.thread_calls()[op] += 1

    def thread_calls(self) -> Counter[str]:
        """Calls made by the current thread since it last called reset_thread()."""
        if not hasattr(self._local, "calls"):
            self._local.calls = Counter()
        calls: Counter[str] = self._local.calls
        return calls

    def reset_thread(self) -> None:
        self._local.calls = Counter()

    def snapshot(self) -> Counter[str]:
        with self._lock:
            return Counter(self.calls)

    @staticmethod
    def mutating(calls: Mapping[str, int]) -> int:
        return sum(n for op, n in calls.items() if not op.split(":", 1)[1].startswith(READ_PREFIXES))


class AwsClients:
    """One session and one client per service, reused across warm invocations."""

    def __init__(self, region: str | None = None, counter: CallCounter | None = None) -> None:
        self.session = boto3.session.Session(region_name=region or None)
        self.counter = counter or CallCounter()
        self._clients: dict[str, Any] = {}
        self._lock = threading.Lock()

    def client(self, service: str) -> Any:
        with self._lock:
            if service not in self._clients:
                made = self.session.client(service, config=RETRY_CONFIG)
                faults.attach(made)
                self._clients[service] = self.counter.attach(made)
            return self._clients[service]

    @property
    def elbv2(self) -> Any:
        return self.client("elbv2")

    @property
    def ec2(self) -> Any:
        return self.client("ec2")

    @property
    def tagging(self) -> Any:
        return self.client("resourcegroupstaggingapi")
