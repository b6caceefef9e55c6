"""The burst hint of Service creations (Delta.burst, ccm.contracts.messages): how many LoadBalancer Services the
watcher sent ADDED within BURST_WINDOW_SECONDS, the batch being sent included.

Why the watcher: AWS's ELB API serves every create (load balancers, target groups, listeners) from one token bucket
(20, then 5 a second). With several creations at once, the service function writes each hostname right after
CreateLoadBalancer and leaves the listeners for later, so no creation waits behind another's listeners. A batch of
the queue only knows its own records, and a burst's first messages often arrive one per batch; the watcher sees
them all.

A lone creation with none in the window is held LINGER_SECONDS before it is sent (once), so that a burst's first
message can go out with the ones right behind it (`kubectl apply` of many Services creates them tens of milliseconds
apart) and carry their count. That is all a single Service's creation pays for the hint.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Sequence
from typing import Final

from ccm.contracts.messages import Delta

BURST_WINDOW_SECONDS: Final = 2.0  # creations this close compete for the create bucket's first tokens
LINGER_SECONDS: Final = 0.05


def is_creation(delta: Delta) -> bool:
    return delta.kind == "Service" and delta.type == "ADDED"


class CreationWindow:
    """The send times of recent creations (the sender thread's own: no lock)."""

    def __init__(self, window: float = BURST_WINDOW_SECONDS, clock: Callable[[], float] = time.monotonic) -> None:
        self._window = window
        self._clock = clock
        self._sent: deque[float] = deque()
        self._lingered: set[tuple[str, str]] = set()

    def _recent(self, now: float) -> int:
        while self._sent and now - self._sent[0] > self._window:
            self._sent.popleft()
        return len(self._sent)

    def should_linger(self, batch: Sequence[Delta]) -> bool:
        """A lone creation with no other in the window, not held before: hold it LINGER_SECONDS (once)."""
        creations = [d for d in batch if is_creation(d)]
        if len(creations) != 1 or self._recent(self._clock()) > 0:
            return False
        key = (creations[0].key, creations[0].uid)
        if key in self._lingered:
            self._lingered.discard(key)
            return False
        self._lingered = {key}  # only the last one held can come back
        return True

    def stamp(self, batch: Sequence[Delta]) -> list[Delta]:
        """The batch with each creation carrying the burst count (the window's, this batch's included)."""
        creations = sum(1 for d in batch if is_creation(d))
        if not creations:
            return list(batch)
        now = self._clock()
        burst = self._recent(now) + creations
        self._sent.extend([now] * creations)
        return [d.with_burst(burst) if is_creation(d) else d for d in batch]
