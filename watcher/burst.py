"""The burst hint of Service creations (Delta.burst, ccm.contracts.messages): how many LoadBalancer Services the
watcher sent ADDED within BURST_WINDOW_SECONDS, the batch being sent included.

Why the watcher: AWS's ELB API serves every create (load balancers, target groups, listeners) from one token bucket
(20, then 5 a second). In a burst of creations, the service function writes each hostname right after
CreateLoadBalancer and leaves the listeners for later, so no creation waits behind another's listeners. A batch of
the queue only knows its own records, and a burst's first messages often arrive one per batch; the watcher sees
them all.

A creation that would go out below the burst threshold (ccm.contracts.messages.BURST_CREATIONS, counting the window)
is held LINGER_SECONDS, and held again while more creations joined it during the last hold, at most MAX_HOLDS times:
a burst's first messages then go out together and carry its count (`kubectl apply` of many Services creates them
tens of milliseconds apart). A single Service's creation pays one hold (50 ms); a few at once, at most 200 ms.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Sequence
from typing import Final

from ccm.contracts.messages import BURST_CREATIONS, Delta

BURST_WINDOW_SECONDS: Final = 2.0  # creations this close compete for the create bucket's first tokens
LINGER_SECONDS: Final = 0.05
MAX_HOLDS: Final = 4


def is_creation(delta: Delta) -> bool:
    return delta.kind == "Service" and delta.type == "ADDED"


class CreationWindow:
    """The send times of recent creations (the sender thread's own: no lock)."""

    def __init__(self, window: float = BURST_WINDOW_SECONDS, clock: Callable[[], float] = time.monotonic) -> None:
        self._window = window
        self._clock = clock
        self._sent: deque[float] = deque()
        # The batch being held: (its first creation, its creations at the last hold, holds so far).
        self._held: tuple[tuple[str, str], int, int] | None = None

    def _recent(self, now: float) -> int:
        while self._sent and now - self._sent[0] > self._window:
            self._sent.popleft()
        return len(self._sent)

    def should_linger(self, batch: Sequence[Delta]) -> bool:
        """Hold this batch LINGER_SECONDS? Yes while its creations and the window's stay below BURST_CREATIONS: once,
        then again only if more creations joined during the last hold, at most MAX_HOLDS times."""
        creations = [d for d in batch if is_creation(d)]
        if not creations:
            return False  # another kind's batch in between: the held one keeps its count
        if self._recent(self._clock()) + len(creations) >= BURST_CREATIONS:
            self._held = None
            return False
        first = (creations[0].key, creations[0].uid)
        if self._held is not None and self._held[0] == first:
            _, size, holds = self._held
            if len(creations) <= size or holds >= MAX_HOLDS:
                self._held = None
                return False
            self._held = (first, len(creations), holds + 1)
            return True
        self._held = (first, len(creations), 1)
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
