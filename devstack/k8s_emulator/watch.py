"""Per-watch event queues and the filtering rules the real watch cache applies."""

from __future__ import annotations

import queue
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

Obj = dict[str, Any]


@dataclass(frozen=True)
class Event:
    rv: int
    type: str  # ADDED / MODIFIED / DELETED
    key: str  # storage key, e.g. "services"
    namespace: str
    obj: Obj  # never mutated after emission
    old: Obj | None


# Queue items: (type, payload). payload is an object for ADDED/MODIFIED/DELETED/ERROR,
# the resourceVersion (int) plus extra annotations for BOOKMARK. None ends the stream cleanly (terminal chunk);
# ABORT cuts it without one, as a dying server does (clients see "Response ended prematurely").
Item = tuple[str, Any] | None
ABORT: Item = ("ABORT", None)


class Watcher:
    def __init__(self, key: str, namespace: str | None, predicate: Callable[[Obj], bool]) -> None:
        self.key = key
        self.namespace = namespace
        self.predicate = predicate
        self.queue: queue.Queue[Item] = queue.Queue()
        self.closed = False
        self.silent = False  # a watch the server cannot serve yet (see Store.future_watch): no bookmarks

    def _in_scope(self, ev: Event) -> bool:
        return ev.key == self.key and (self.namespace is None or ev.namespace == self.namespace)

    def deliver(self, ev: Event) -> None:
        """Called with the store lock held, so queue order == resourceVersion order."""
        if self.closed or not self._in_scope(ev):
            return
        now = self.predicate(ev.obj)
        before = ev.old is not None and self.predicate(ev.old)
        # An object moving into / out of the selector shows up as ADDED / DELETED, as in the cacher.
        if ev.type == "ADDED" and now:
            self.queue.put(("ADDED", ev.obj))
        elif ev.type == "MODIFIED":
            if now and before:
                self.queue.put(("MODIFIED", ev.obj))
            elif now:
                self.queue.put(("ADDED", ev.obj))
            elif before:
                self.queue.put(("DELETED", ev.obj))
        elif ev.type == "DELETED" and (now or before):
            self.queue.put(("DELETED", ev.obj))

    def add_initial(self, obj: Obj) -> None:
        self.queue.put(("ADDED", obj))

    def silence(self) -> None:
        self.silent = True

    def bookmark(self, rv: int, initial_events_end: bool = False) -> None:
        if not self.closed and not self.silent:
            self.queue.put(("BOOKMARK", (rv, initial_events_end)))

    def close(self, error: Obj | None = None, abort: bool = False) -> None:
        if self.closed:
            return
        self.closed = True
        if error is not None:
            self.queue.put(("ERROR", error))
        self.queue.put(ABORT if abort else None)
