"""The nodes Lambda's membership step: keep the table current and send coalesced HOSTS messages.

For each Node delta: compute the node's member record once; if what load balancers care about changed (member
flag, instance, labels), store it and tell every registered LoadBalancer Service whose target-node-labels
selector the change touches — one HOSTS message in the Service's own FIFO group (serialised with its other
reconciles, closing k/k#100846). The deduplication id is (Service UID, time bucket), so every change inside one
bucket collapses into one message, which the service reconciler defers to the bucket's end: a burst of joins
costs each target group one Register call per bucket, not one per node.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ccm.contracts.messages import Delta
from ccm.contracts.queues import MessageQueue, OutgoingMessage
from ccm.contracts.store import MembershipStore
from ccm.membership import model

log = logging.getLogger(__name__)


@dataclass
class MembershipUpdater:
    store: MembershipStore
    services_queue: MessageQueue
    bucket_seconds: int = model.DEFAULT_BUCKET_SECONDS
    clock: Callable[[], float] = time.time
    # Warm-environment memory of (service key, bucket) already told: a hint only, SQS dedup is the guarantee.
    _told: set[tuple[str, int]] = field(default_factory=set)

    def on_node_delta(self, delta: Delta) -> int:
        """Returns the number of HOSTS messages sent."""
        if delta.kind != "Node":
            return 0
        rv = int(delta.resource_version or 0)
        deleted = delta.type == "DELETED"
        new = None if deleted else model.member_record_from_trimmed(delta.key, delta.object, delta.resource_version)
        old, stored_rv = self.store.get(delta.key)
        if stored_rv and rv <= stored_rv and not deleted:
            return 0  # an older or repeated observation
        # Tell first, store second: if storing fails the retry still sees the change (SQS dedups the re-send).
        if model.same_membership(old, new):
            self.store.write(delta.key, new, max(rv, stored_rv + 1) if deleted else rv, deleted=deleted)
            return 0
        sent = self._tell([(old, new)])
        self.store.write(delta.key, new, max(rv, stored_rv + 1) if deleted else rv, deleted=deleted)
        # Tell again whoever registered in between: its reconcile may have read the members before our write.
        # (Services already told in this bucket are skipped; a reconcile registering later reads our write.)
        return sent + self._tell([(old, new)])

    def reconcile(self, nodes: list[dict[str, Any]], list_resource_version: str) -> list[model.MemberChange]:
        """The periodic pass: make the table agree with one LIST of Nodes (a missed DELETED or MODIFIED is
        repaired within one pass). One Query; writes and HOSTS messages only for differences. Returns them."""
        list_rv = int(list_resource_version or 0) or max(
            (int(n["metadata"].get("resourceVersion") or 0) for n in nodes), default=0
        )  # without the list's version the newest item is a safe lower bound: it only delays a removal
        seeded, stored = self.store.node_states()
        changes = model.membership_drift(stored, nodes, list_rv)
        pairs = [(c.old, c.new) for c in changes]
        if changes:
            self._tell(pairs)  # tell, store, tell again: as on_node_delta
            for change in changes:
                self.store.write(change.name, change.new, change.resource_version, deleted=change.gone)
                log.warning(
                    "membership repaired: %s",
                    "member node gone from the API" if change.gone else "stored membership differed from the API",
                    extra={"node": change.name, "was_member": change.old is not None, "member": change.new is not None},
                )
            self._tell(pairs)
        if not seeded:
            self.store.mark_seeded()  # every member of the LIST is stored now
        return changes

    def _tell(self, changes: list[tuple[model.MemberRecord | None, model.MemberRecord | None]]) -> int:
        now = self.clock()
        index = model.bucket(now, self.bucket_seconds)
        not_before = model.bucket_end(index, self.bucket_seconds)
        deltas = []
        for key, uid, selector in self.store.services():
            if (key, index) in self._told or not any(model.affected(selector, old, new) for old, new in changes):
                continue
            self._told.add((key, index))
            deltas.append(Delta("Service", "HOSTS", key, uid, f"hosts-{index}", now, {"notBefore": not_before}))
        _, refused = self.services_queue.send_batch(
            [OutgoingMessage(d.to_body(), d.group_id, d.deduplication_id) for d in deltas]
        )
        if refused:
            for d in deltas:  # tell them all again on the retry (SQS deduplicates those already sent)
                self._told.discard((d.key, index))
            raise RuntimeError(f"could not enqueue host updates: {refused}")
        self._told = {(k, b) for k, b in self._told if b >= index}  # forget old buckets
        return len(deltas)
