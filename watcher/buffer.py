"""Bounded, coalescing, order-preserving delta buffer shared by the informers (producers) and the sender.

Coalescing: a newer delta for the same (kind, key, uid) replaces the pending one in place. Deltas are hints
(reconcilers re-read), so only the newest matters. The uid is part of the coalescing key on purpose: the
DELETED of an old incarnation must survive a re-creation under the same name, or its load balancer would leak.
An ENDPOINTS hint has a lane of its own (it coalesces with ENDPOINTS only): a reconcile of an unchanged spec may
trust its checkpoint and skip the targets, and a hint must never replace a pending change of the Service. A
DELETED drops the pending ENDPOINTS of its (key, uid): the delete covers them.

Ordering: SQS FIFO orders per MessageGroupId (= key). A batch never holds two entries of the same group and
failed entries go back to the *front*, so a partially failed batch cannot reorder one key's deltas.

Bound: `capacity` counts pending plus in-flight deltas. When full, a new (non-coalescable) delta is refused and
its kind is marked overflowed; the sender asks the informer for a full relist once SQS is healthy again.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Iterable

from ccm.contracts.messages import ENDPOINTS, KINDS, Delta

_CoalesceKey = tuple[str, str, bool]  # (key, uid, is an ENDPOINTS hint) within one kind's queue

# Bounds how far past same-group entries a batch looks for other groups; keeps take() O(1)-ish.
_SCAN_LIMIT = 256


class DeltaBuffer:
    def __init__(self, capacity: int) -> None:
        if capacity < 1:
            raise ValueError("capacity must be >= 1")
        self.capacity = capacity
        self._queues: dict[str, OrderedDict[_CoalesceKey, Delta]] = {kind: OrderedDict() for kind in KINDS}
        self._inflight = 0
        self._overflowed: set[str] = set()
        self._next_kind = 0
        self._cond = threading.Condition()

    def __len__(self) -> int:
        with self._cond:
            return self._size()

    def _size(self) -> int:
        return sum(len(q) for q in self._queues.values()) + self._inflight

    def put(self, delta: Delta) -> bool:
        """Queue a delta; False when it had to be refused because the buffer is full."""
        ck = _coalesce_key(delta)
        with self._cond:
            queue = self._queues[delta.kind]
            self._drop_covered_hint(queue, delta)
            if ck in queue:
                queue[ck] = delta
                return True
            if self._size() >= self.capacity:
                self._overflowed.add(delta.kind)
                return False
            queue[ck] = delta
            self._cond.notify_all()
            return True

    def put_wait(self, delta: Delta, timeout: float) -> bool:
        """Queue a delta, waiting up to timeout for room; never marks an overflow (the caller retries)."""
        ck = _coalesce_key(delta)
        with self._cond:
            queue = self._queues[delta.kind]
            self._drop_covered_hint(queue, delta)
            if ck not in queue and not self._cond.wait_for(lambda: self._size() < self.capacity, timeout):
                return False
            queue[ck] = delta
            self._cond.notify_all()
            return True

    def take(self, max_entries: int = 10, timeout: float | None = None) -> list[Delta]:
        """Up to max_entries deltas of one kind with distinct keys, oldest first; [] after timeout."""
        with self._cond:
            if not self._cond.wait_for(lambda: any(self._queues.values()), timeout):
                return []
            kinds = [KINDS[(self._next_kind + i) % len(KINDS)] for i in range(len(KINDS))]
            kind = next(k for k in kinds if self._queues[k])
            # Alternate kinds so a flood of one kind cannot starve the other queue.
            self._next_kind = (KINDS.index(kind) + 1) % len(KINDS)
            queue = self._queues[kind]
            picked: list[_CoalesceKey] = []
            keys: set[str] = set()
            for scanned, ck in enumerate(queue):
                if len(picked) >= max_entries or scanned >= _SCAN_LIMIT:
                    break
                if ck[0] not in keys:
                    keys.add(ck[0])
                    picked.append(ck)
            self._inflight += len(picked)
            return [queue.pop(ck) for ck in picked]

    def done(self, count: int) -> None:
        """`count` taken deltas are finished with (sent or definitively rejected)."""
        with self._cond:
            self._inflight -= count
            self._cond.notify_all()

    def requeue_front(self, deltas: Iterable[Delta]) -> None:
        """Give taken deltas back, ahead of everything queued after them."""
        items = list(deltas)
        with self._cond:
            self._inflight -= len(items)
            for delta in reversed(items):
                queue = self._queues[delta.kind]
                ck = _coalesce_key(delta)
                if ck not in queue:
                    queue[ck] = delta
                # else: a newer delta for the same object arrived meanwhile and wins, but it takes the failed
                # one's place so it still precedes later deltas of the same key.
                queue.move_to_end(ck, last=False)
            self._cond.notify_all()

    @staticmethod
    def _drop_covered_hint(queue: OrderedDict[_CoalesceKey, Delta], delta: Delta) -> None:
        if delta.type == "DELETED":
            queue.pop((delta.key, delta.uid, True), None)

    def take_overflowed(self) -> set[str]:
        with self._cond:
            kinds, self._overflowed = self._overflowed, set()
            return kinds

    @property
    def overflowed(self) -> frozenset[str]:
        with self._cond:
            return frozenset(self._overflowed)

    def wait_empty(self, timeout: float) -> bool:
        with self._cond:
            return self._cond.wait_for(lambda: self._size() == 0, timeout)


def _coalesce_key(delta: Delta) -> _CoalesceKey:
    return delta.key, delta.uid, delta.type == ENDPOINTS
