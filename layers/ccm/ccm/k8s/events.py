"""Events as upstream's recorder leaves them: a repeat is one Event whose count grows, not a new object.

client-go's EventCorrelator keeps, per process, the Events it posted by key (source, involved object without its
resourceVersion, type, reason, message) and PATCHes count and lastTimestamp of a repeat. Our functions are
short-lived and many, so the key also names the Event (`<object>.<16 hex of the key>`): whichever execution
environment repeats it, the create meets the existing one (409 AlreadyExists), which it then reads and counts on.
A warm environment remembers the count (a bounded cache, as client-go's LRU): a repeat there is one PATCH. An Event
the server expired meanwhile (its TTL, an hour by default) is simply created again. A Service failing for a day
leaves one Warning whose count is its retries.

Who reports: `source.component` and `reportingComponent` name our controllers (`serverless-ccm/...`), never the
built-in ones (`service-controller` is EKS's own, and `kubectl describe` shows that name as "From"); the reasons
stay upstream's.
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections import OrderedDict
from datetime import UTC, datetime
from typing import Any, Final

from ccm.k8s.rest import ApiError, KubeRest, quote

PREFIX: Final = "serverless-ccm/"
SERVICE_CONTROLLER: Final = PREFIX + "service-controller"
NODE_CONTROLLER: Final = PREFIX + "cloud-node-controller"
NODE_LIFECYCLE_CONTROLLER: Final = PREFIX + "cloud-node-lifecycle-controller"
ROUTE_CONTROLLER: Final = PREFIX + "route-controller"
SWEEPER: Final = PREFIX + "sweeper"
REMEMBERED: Final = 4096  # client-go's maxLruCacheEntries
MAX_MESSAGE: Final = 1024


def now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def event_name(involved: dict[str, Any], event_type: str, reason: str, message: str, component: str) -> str:
    """Pure: the Event's name, the same for every repeat (client-go's getEventKey, resourceVersion left out)."""
    key = {k: involved.get(k) for k in ("apiVersion", "kind", "namespace", "name", "uid")}
    body = json.dumps([component, key, event_type, reason, message], sort_keys=True, separators=(",", ":"))
    return f"{involved['name']}.{hashlib.sha256(body.encode()).hexdigest()[:16]}"


class EventRecorder:
    """One per Kubernetes client (execution environment)."""

    def __init__(self, api: KubeRest, reporting_instance: str) -> None:
        self.api = api
        self.reporting_instance = reporting_instance
        self._counts: OrderedDict[str, int] = OrderedDict()  # event path -> the count this environment last wrote
        self._lock = threading.Lock()

    def post(self, involved: dict[str, Any], event_type: str, reason: str, message: str, component: str) -> None:
        """A core/v1 Event about `involved`, or the count of the same one raised. Events about cluster-scoped
        objects (Nodes) live in "default", as upstream's recorder puts them."""
        namespace = involved.get("namespace") or "default"
        message = message[:MAX_MESSAGE]
        name = event_name(involved, event_type, reason, message, component)
        events_collection = f"/api/v1/namespaces/{quote(namespace)}/events"
        events_path = f"{events_collection}/{quote(name)}"
        new = self._event(name, namespace, involved, event_type, reason, message, component)
        count = self._remembered(events_path)
        if count is None:
            try:
                self.api.post(events_collection, new)
                self._remember(events_path, 1)
                return
            except ApiError as err:
                if err.status != 409:
                    raise
            existing: dict[str, Any] = self.api.get(events_path)  # another environment, or an earlier life of this one
            count = int(existing.get("count") or 1)
        try:
            self.api.patch(events_path, {"count": count + 1, "lastTimestamp": new["lastTimestamp"]})
        except ApiError as err:
            if err.status != 404:
                raise
            self.api.post(events_collection, new)  # expired by the server since: a new Event, counting from one again
            count = 0
        self._remember(events_path, count + 1)

    def _event(
        self,
        name: str,
        namespace: str,
        involved: dict[str, Any],
        event_type: str,
        reason: str,
        message: str,
        component: str,
    ) -> dict[str, Any]:
        stamp = now()
        return {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": name, "namespace": namespace},
            "involvedObject": involved,
            "type": event_type,
            "reason": reason,
            "message": message,
            "source": {"component": component},
            "reportingComponent": component,
            "reportingInstance": self.reporting_instance,
            "firstTimestamp": stamp,
            "lastTimestamp": stamp,
            "count": 1,
        }

    def _remembered(self, path: str) -> int | None:
        with self._lock:
            count = self._counts.get(path)
            if count is not None:
                self._counts.move_to_end(path)
            return count

    def _remember(self, path: str, count: int) -> None:
        with self._lock:
            self._counts[path] = count
            self._counts.move_to_end(path)
            while len(self._counts) > REMEMBERED:
                self._counts.popitem(last=False)
