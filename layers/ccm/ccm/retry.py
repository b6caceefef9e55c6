"""The retry policy of every queue-driven runtime (services, nodes, routes), in one place, as pure functions.

Retries go through the queue, never a sleep: a record that is to come back later gets its visibility timeout set
to a delay and is reported as a batch item failure, so every retry costs one receive. The queues move a message
to the DLQ after MAX_RECEIVES receives (template.yaml `maxReceiveCount`; a test keeps the two equal). Two kinds:

- a **failure** (anything unexpected) backs off as upstream's controllers do: 5 s doubling to 300 s. A poison
  message reaches the DLQ after MAX_RECEIVES receives, FAILURE_BUDGET_SECONDS (about 25 minutes) after its first.
- a **wait** (RetryError: a state AWS documents and ends by itself - a deleted load balancer's network interfaces
  still holding its security group (DependencyViolation), a target group still ResourceInUse, a target group not
  healthy yet) is not an error: it is logged at INFO with what is waited on and counted apart from failures. Its
  delay starts at what the driver asked for and doubles to 300 s, so the receive budget covers at least
  WAIT_BUDGET_SECONDS (25 minutes; AWS holds a deleted NLB's group for minutes). A wait that never ends still
  reaches the DLQ, after MAX_RECEIVES receives.

Why 10 receives rather than 5 with longer waits (60 s doubling would also pass 15 minutes): a wait usually ends
within a few minutes, and every retry delay also holds back newer deltas of the same object (FIFO group); with
10 receives the first retries stay short and no delay exceeds 300 s; the price is a poison message dead-lettered
after about 25 minutes instead of 2.5. Why not re-send a fresh message to reset the receive count: FIFO queues
have no per-message DelaySeconds (the copy would be received at once and deferred again, costing a receive anyway),
the copy would go behind newer deltas of the same object and need a new deduplication id, and a wait that never
ends would never reach the DLQ. A FIFO message waiting out its visibility holds only its own group: other objects
keep flowing.

Not a wait: a load balancer still `provisioning`. AWS documents the state (ELBv2 API reference, LoadBalancerState:
provisioning, then active) but no call refused because of it: the errors of every call the drivers make on an
existing load balancer (CreateListener, ModifyListener, ModifyLoadBalancerAttributes, SetSecurityGroups, SetSubnets,
RegisterTargets, DeleteLoadBalancer) name none tied to it. DeleteLoadBalancer's ResourceInUse is documented without
a state, and the reported cause is a VPC endpoint service still using the NLB, which does not end by itself: it
stays a failure. Classic ELB has no provisioning state. So the drivers do not wait on it, and the devstack invents
no refusal for it; a new NLB's hostname is reported at once, as cloud-provider-aws does.

A record not started, or cut short, because the invocation's time ran out (ccm.deadline) is neither: it comes back
after RETURN_DELAY_SECONDS.

Nor is a **continuation**: in a burst of creations, the pass that creates an NLB ends once its hostname is
published (PassFlags.hostname_first) and the record comes back after CONTINUATION_DELAY_SECONDS for the rest. Its
next receive is an ordinary retry (a thorough pass: it reads what the first pass made, and whatever a crash in
between may have left). The delay is what keeps the burst's CreateLoadBalancer calls ahead of the continuations'
CreateTargetGroup / CreateListener, which draw from the same ELB bucket (20, then 5 a second): 200 creations take
(200 - 20) / 5 = 36 s of that bucket, so continuations seen after 45 s leave it to them. Listeners added that late
delay no traffic: a new NLB is `provisioning` for minutes after CreateLoadBalancer answers.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Final

MAX_RECEIVES: Final = 10
FAILURE_BASE_SECONDS: Final = 5
MAX_DELAY_SECONDS: Final = 300
MIN_WAIT_SECONDS: Final = 5
RETURN_DELAY_SECONDS: Final = 1
CONTINUATION_DELAY_SECONDS: Final = 45
# Tests only: scales every queue retry delay (e.g. 0.02 -> a 15-minute schedule in ~20 s). Unset in deployments.
DELAY_SCALE_ENV: Final = "CCM_RETRY_DELAY_SCALE"


class RetryError(Exception):
    """Not a failure: wait for a documented state to pass and come back after `delay_seconds` (the first delay;
    repeated waits double it). The message says what is waited on; it is logged at INFO."""

    def __init__(self, message: str, delay_seconds: int) -> None:
        super().__init__(message)
        self.delay_seconds = delay_seconds

    @property
    def waiting_on(self) -> str:
        return str(self)


def failure_delay(attempt: int) -> int:
    """Per-key exponential backoff of the upstream controllers: 5 s * 2^(attempt-1), capped at 300 s."""
    return min(MAX_DELAY_SECONDS, FAILURE_BASE_SECONDS * 2 ** max(0, attempt - 1))


def wait_delay(attempt: int, asked: int) -> int:
    """The driver's delay at the first receive, doubled at every further one up to 300 s (a longer first delay is
    kept as asked)."""
    first = max(MIN_WAIT_SECONDS, asked)
    return min(max(first, MAX_DELAY_SECONDS), first * 2 ** max(0, attempt - 1))


def budget_seconds(delays: list[int]) -> int:
    """How long a message keeps coming back when every receive asks for these delays: the message moves to the DLQ
    on the receive after the last one."""
    return sum(delays[:MAX_RECEIVES])


FAILURE_BUDGET_SECONDS: Final = budget_seconds([failure_delay(a) for a in range(1, MAX_RECEIVES + 1)])
WAIT_BUDGET_SECONDS: Final = budget_seconds([wait_delay(a, MIN_WAIT_SECONDS) for a in range(1, MAX_RECEIVES + 1)])


def waited_on(err: BaseException | None) -> RetryError | None:
    """The RetryError behind `err` (itself or along its explicit `raise ... from` causes), if any. Implicit context
    is not followed: an error raised while handling a wait is a failure."""
    seen: set[int] = set()
    while err is not None and id(err) not in seen:
        if isinstance(err, RetryError):
            return err
        seen.add(id(err))
        err = err.__cause__
    return None


@dataclass(frozen=True, slots=True)
class Retry:
    """When to see a record again, and whether that is a wait (`waiting_on` set) or a failure."""

    delay_seconds: int
    waiting_on: str | None = None

    @property
    def is_wait(self) -> bool:
        return self.waiting_on is not None


def retry_for(err: BaseException, attempt: int) -> Retry:
    """The retry of a record whose processing raised `err` at receive number `attempt`."""
    wait = waited_on(err)
    if wait is not None:
        return Retry(scaled(wait_delay(attempt, wait.delay_seconds)), wait.waiting_on)
    return Retry(scaled(failure_delay(attempt)))


def scaled(delay: int) -> int:
    """`delay` times CCM_RETRY_DELAY_SCALE (tests), at least 1 s; unchanged when unset."""
    # Process-level on purpose, not in Settings: a test-only knob no deployment sets, read per retry so the devstack
    # and the tests can scale a runtime that is already built (ccm.wiring.settings lists these hooks).
    raw = os.environ.get(DELAY_SCALE_ENV, "")
    try:
        scale = float(raw) if raw else 1.0
    except ValueError:
        scale = 1.0
    return delay if scale == 1.0 else max(1, round(delay * scale))
