"""boto3 clients with bounded retries, the invocation's deadline and exact call counting (botocore event hooks).

Calls are counted on `before-call` (once per API call, whatever its retries); throttling errors on `needs-retry`,
which botocore emits after EVERY attempt, so a throttled attempt that a retry later hid is counted too.
"""

from __future__ import annotations

import functools
import os
import random
import threading
import time
from collections import Counter
from collections.abc import Mapping
from typing import Any, Final

from ccm import deadline
from ccm.aws import faults
from ccm.aws.errors import response_error_code
from ccm.aws.queues import SqsQueue

READ_PREFIXES = ("Describe", "Get", "List", "Query", "Scan", "BatchGet")


# Every call is bounded, so the invocation's deadline can be kept (ccm.deadline): an attempt lasts at most
# CONNECT + READ seconds, and standard mode sleeps rand(0, 1) * min(2^(n-1), 20) s after a throttled attempt n,
# i.e. at most 4 s before the last of MAX_ATTEMPTS. Not adaptive mode: its client-side rate limiter blocks before
# sending for as long as its token bucket says, with no bound (one throttled batch ran 118 s of a 60 s timeout).
# A call that still fails is retried through the queue (ccm.retry).
CONNECT_TIMEOUT_SECONDS: Final = 2
READ_TIMEOUT_SECONDS: Final = 8
MAX_ATTEMPTS: Final = 4
MAX_RETRY_SLEEP_SECONDS: Final = 4
# What one more attempt may cost at worst: it starts only if this much call time is left.
ATTEMPT_SECONDS: Final = CONNECT_TIMEOUT_SECONDS + READ_TIMEOUT_SECONDS + MAX_RETRY_SLEEP_SECONDS
# Throttling is AWS saying "not yet", not a failure. After botocore's attempts a throttled call keeps trying, each
# time after rand(0, THROTTLE_BACKOFF_CAP_SECONDS) (full jitter, as botocore's own), for THROTTLE_WAIT_SECONDS more;
# the deadline check above still refuses an attempt the invocation could not finish. Why: in a burst of creations
# the ELB create bucket (5 a second) is shared by every thread of every environment; records that gave up after 4
# attempts came back only 5 s and more later through the queue and read everything again, leaving tokens unused
# (bench/lambda_model.py: 200 creations, p99 hostname 6.7 s over the floor; with this, under 2 s). The cap keeps each
# waiting call to about one attempt a second, no more than botocore's own later retries.
THROTTLE_WAIT_SECONDS: Final = 30.0
THROTTLE_BACKOFF_CAP_SECONDS: Final = 2.0
_THROTTLED_SINCE: Final = "ccm_throttled_since"  # in the call's request context: the same dict for every attempt


@functools.cache
def retry_config() -> Any:
    from botocore.config import Config  # deferred with boto3 (see AwsClients.session)

    return Config(
        # total_max_attempts: botocore reads `max_attempts` as retries (it made 5 attempts, the last after up to 8 s).
        retries={"mode": "standard", "total_max_attempts": MAX_ATTEMPTS},
        connect_timeout=CONNECT_TIMEOUT_SECONDS,
        read_timeout=READ_TIMEOUT_SECONDS,
    )


def _check_deadline(event_name: str = "", **_: Any) -> None:
    """before-send (every attempt, retries included): refuse to start one that could outlive the invocation."""
    deadline.check(ATTEMPT_SECONDS, event_name.removeprefix("before-send."))


# The error codes botocore's retry modes treat as throttling (botocore.retries.standard), plus EC2's own; HTTP 429
# without a known code counts too.
THROTTLING_CODES = frozenset(
    {
        "Throttling",
        "ThrottlingException",
        "ThrottledException",
        "RequestThrottledException",
        "TooManyRequestsException",
        "ProvisionedThroughputExceededException",
        "TransactionInProgressException",
        "RequestLimitExceeded",
        "BandwidthLimitExceeded",
        "LimitExceededException",
        "RequestThrottled",
        "SlowDown",
        "PriorRequestNotComplete",
        "EC2ThrottledException",
    }
)


def is_throttling(status_code: int, parsed: Mapping[str, Any]) -> bool:
    return response_error_code(parsed) in THROTTLING_CODES or status_code == 429


def throttle_sleep(attempts: int, throttled_for: float, draw: float) -> float | None:
    """Pure: how long to sleep before the next attempt of a call throttled `attempts` times, `throttled_for` seconds
    after botocore's own attempts ended (`draw` in [0, 1)); None: stop (botocore's turn, or the wait is over)."""
    if attempts < MAX_ATTEMPTS or throttled_for >= THROTTLE_WAIT_SECONDS:
        return None
    return draw * THROTTLE_BACKOFF_CAP_SECONDS


def _wait_out_throttling(response: Any = None, attempts: int = 0, request_dict: Any = None, **_: Any) -> float | None:
    """needs-retry, registered after botocore's retry handler (a shorter event name runs later): answers only once
    botocore has given up on a throttled call."""
    if response is None or attempts < MAX_ATTEMPTS or not is_throttling(response[0].status_code, response[1] or {}):
        return None
    context = (request_dict or {}).get("context")
    if not isinstance(context, dict):
        return None
    since = context.setdefault(_THROTTLED_SINCE, time.monotonic())
    return throttle_sleep(attempts, time.monotonic() - since, random.random())


class CallCounter:
    """Counts every API call made through the clients it is attached to (retries included)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.calls: Counter[str] = Counter()
        self.throttles: Counter[str] = Counter()  # throttled attempts per operation
        # Per-thread view: the devstack runner runs several "Lambdas" as threads of one process.
        self._local = threading.local()

    def attach(self, client: Any) -> Any:
        client.meta.events.register("before-call.*.*", self._on_call)
        client.meta.events.register("needs-retry.*.*", self._on_attempt)
        return client

    def _on_attempt(self, response: Any = None, operation: Any = None, **_: Any) -> None:
        """After each attempt; returns None so botocore's own retry handler decides about retrying."""
        if response is None or operation is None:  # connection errors carry no response
            return
        http_response, parsed = response
        if not is_throttling(http_response.status_code, parsed or {}):
            return
        op = f"{operation.service_model.service_name}:{operation.name}"
        with self._lock:
            self.throttles[op] += 1
        self._thread_counters()[1][op] += 1

    def _on_call(self, model: Any, **_: Any) -> None:
        service = model.service_model.service_name
        op = f"{service}:{model.name}"
        with self._lock:
            self.calls[op] += 1
        self.thread_calls()[op] += 1

    def _thread_counters(self) -> tuple[Counter[str], Counter[str]]:
        if not hasattr(self._local, "calls"):
            self.reset_thread()
        return self._local.calls, self._local.throttles

    def thread_calls(self) -> Counter[str]:
        """Calls made by the current thread since it last called reset_thread()."""
        return self._thread_counters()[0]

    def thread_throttles(self) -> int:
        """Throttled attempts (retried or not) of the current thread since it last called reset_thread()."""
        return sum(self._thread_counters()[1].values())

    def thread_counts(self) -> tuple[Counter[str], Counter[str]]:
        """The current thread's calls and throttled attempts, per operation."""
        calls, throttles = self._thread_counters()
        return Counter(calls), Counter(throttles)

    def add_to_thread(self, calls: Counter[str], throttles: Counter[str]) -> None:
        """Count, as the current thread's, what a helper thread made for it (ccm.aws.parallel); the totals already
        have them."""
        mine, my_throttles = self._thread_counters()
        mine.update(calls)
        my_throttles.update(throttles)

    def reset_thread(self) -> None:
        self._local.calls = Counter()
        self._local.throttles = Counter()

    def snapshot(self) -> Counter[str]:
        with self._lock:
            return Counter(self.calls)

    @staticmethod
    def mutating(calls: Mapping[str, int]) -> int:
        return sum(n for op, n in calls.items() if not op.split(":", 1)[1].startswith(READ_PREFIXES))


class AwsClients:
    """One session and one client per service, reused across warm invocations."""

    def __init__(self, region: str | None = None, counter: CallCounter | None = None) -> None:
        self.region = region or None
        self.counter = counter or CallCounter()
        self._session: Any = None
        self._clients: dict[str, Any] = {}
        self._lock = threading.Lock()
        self._queue_urls: dict[str, str] = {}  # queue ARN -> URL, learned once per execution environment

    @property
    def session(self) -> Any:
        """Made on first use: importing boto3 costs ~170-300 ms, which the handler module's import (the cold
        start's init phase) then does not pay; a batch that needs no AWS call never pays it at all."""
        if self._session is None:
            import boto3

            self._session = boto3.session.Session(region_name=self.region)
        return self._session

    def client(self, service: str) -> Any:
        with self._lock:
            if service not in self._clients:
                made = self.session.client(service, config=retry_config())
                made.meta.events.register("before-send.*.*", _check_deadline)  # first: before any injected delay
                made.meta.events.register("needs-retry", _wait_out_throttling)  # after botocore's own handler
                faults.attach(made)
                _inject_latency(made)
                self._clients[service] = self.counter.attach(made)
            return self._clients[service]

    def queue(self, url: str) -> SqsQueue:
        return SqsQueue(self, url)

    def queue_of_arn(self, arn: str) -> SqsQueue:
        """The queue an event source mapping names by ARN (one GetQueueUrl the first time)."""
        if arn not in self._queue_urls:
            _, _, _, _, account, name = arn.split(":", 5)
            answer = self.client("sqs").get_queue_url(QueueName=name, QueueOwnerAWSAccountId=account)
            self._queue_urls[arn] = answer["QueueUrl"]
        return SqsQueue(self, self._queue_urls[arn])

    @property
    def elbv2(self) -> Any:
        return self.client("elbv2")

    @property
    def ec2(self) -> Any:
        return self.client("ec2")

    @property
    def tagging(self) -> Any:
        return self.client("resourcegroupstaggingapi")


# Bench-only knob (bench/scenarios/latency.py): sleep before every HTTP attempt, standing in for AWS's own latency
# when the devstack's moto answers in microseconds. Unset in every deployment; the request still goes out for real.
INJECT_LATENCY_ENV = "CCM_AWS_INJECT_LATENCY_MS"


def _inject_latency(client: Any) -> None:
    # Process-level on purpose, not in Settings: only the bench sets it (ccm.wiring.settings lists these hooks).
    delay = float(os.environ.get(INJECT_LATENCY_ENV) or 0) / 1000
    if delay > 0:
        client.meta.events.register("before-send.*.*", lambda **_: time.sleep(delay))
