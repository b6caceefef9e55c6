"""Make every Service delta fit in one SQS message, whatever the Service carries.

A delta is a hint: the reconciler re-reads the live object, so what a message must carry is the key and uid (its
group and deduplication id) plus the few fields a decision reads without the live object: `type` and `finalizers`
(whether a vanished Service had a load balancer, ccm.service.decisions) and `deletionTimestamp`. Annotations are the
only part of a trimmed object whose size the user controls (up to 256 KiB of them pass kube-apiserver's validation),
so they go first, largest first; the rest of the trimmed object goes only if that was not enough. Dropping the
delta instead, as the sender once did, leaked the load balancer of a Service deleted with large annotations.
"""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any, Final

from ccm.contracts.messages import Delta

# SQS: a message (body and attributes) may not exceed the queue's MaximumMessageSize, 262,144 bytes unless raised
# (CreateQueue API reference, "MaximumMessageSize ... Default: 262,144 (256 KiB)"). Our queues keep the default.
MAX_MESSAGE_BYTES: Final = 256 * 1024
KEPT_WHEN_MINIMAL: Final = ("type", "finalizers", "deletionTimestamp")
TRIMMED_MARK: Final = "trimmedToFit"  # lists what was left out, for whoever reads the message by hand


def body_size(delta: Delta) -> int:
    return len(delta.to_body().encode())


def _entry_size(key: str, value: Any) -> int:
    return len(json.dumps({key: value}, separators=(",", ":")).encode())


def fit(delta: Delta, limit: int = MAX_MESSAGE_BYTES) -> Delta:
    """The delta itself when its body fits in ``limit`` bytes, else a copy with a smaller ``object``."""
    size = body_size(delta)
    if size <= limit or delta.kind != "Service":
        # Node deltas are data, not hints: the nodes Lambda builds membership records from their labels, taints and
        # providerID without re-reading the Node, so trimming them would store a wrong record. A Node needs about
        # 700 maximal labels to get here; the sender then rejects it (logged, counted) and the periodic node passes
        # repair what it carried.
        return delta
    obj = dict(delta.object)
    annotations = dict(obj.get("annotations") or {})
    excess = size - limit + 256  # room for the mark
    dropped: list[str] = []
    for key in sorted(annotations, key=lambda k: _entry_size(k, annotations[k]), reverse=True):
        if excess <= 0:
            break
        excess -= _entry_size(key, annotations.pop(key))
        dropped.append(key)
    if dropped:
        obj["annotations"] = annotations
        obj[TRIMMED_MARK] = ["annotations"]
        smaller = replace(delta, object=obj)
        if body_size(smaller) <= limit:
            return smaller
    minimal: dict[str, Any] = {k: delta.object[k] for k in KEPT_WHEN_MINIMAL if k in delta.object}
    minimal[TRIMMED_MARK] = sorted(k for k in delta.object if k not in KEPT_WHEN_MINIMAL)
    return replace(delta, object=minimal)
