"""Capped exponential backoff with "equal jitter": a delay in [ceiling/2, ceiling)."""

from __future__ import annotations

import random


class Backoff:
    def __init__(self, initial: float = 0.5, maximum: float = 30.0, rng: random.Random | None = None) -> None:
        self.initial = initial
        self.maximum = maximum
        self.attempt = 0
        self._rng = rng or random.Random()

    def next_delay(self) -> float:
        # Jitter keeps watchers that failed together from retrying in lockstep; the lower half-bound keeps a
        # failing dependency from being hammered by near-zero delays.
        ceiling = min(self.maximum, self.initial * (2 ** min(self.attempt, 32)))
        self.attempt += 1
        return self._rng.uniform(ceiling / 2, ceiling)

    def reset(self) -> None:
        self.attempt = 0
