"""List pages and watch streams over ccm.k8s.rest, as plain dicts: what the watcher needs from the API.

The wire protocol is kube-apiserver's: a watch is a GET with `watch=true` whose (chunked) body carries one JSON
event per line, `{"type": ADDED|MODIFIED|DELETED|BOOKMARK|ERROR, "object": ...}`. An ERROR event's object is a
Status (410 Gone when the resourceVersion was compacted away) and ends the watch: it is raised as ApiError with the
Status as body, exactly like an HTTP error answer, so callers handle both the same way.
"""

from __future__ import annotations

import contextlib
import json
import threading
from collections.abc import Generator, Iterator
from typing import Any

from ccm.k8s.rest import ApiError, KubeRest


def list_page(
    rest: KubeRest,
    path: str,
    *,
    limit: int,
    continue_token: str | None,
    timeout: tuple[float, float],
    not_older_than: str | None = None,
) -> dict[str, Any]:
    """One page of a paginated list (`limit`/`continue`), read and parsed: one page in memory at a time.
    `not_older_than`: a resourceVersion the answer must be at least as new as (resourceVersionMatch=NotOlderThan):
    a server that has not reached it answers 504 ResourceVersionTooLarge."""
    query: dict[str, str | int] = {"limit": limit}
    if continue_token:
        query["continue"] = continue_token
    if not_older_than:
        query["resourceVersion"] = not_older_than
        query["resourceVersionMatch"] = "NotOlderThan"
    response = rest.open(path, query=query, timeout=timeout)
    try:
        page: dict[str, Any] = json.loads(response.read())
    finally:
        response.release_conn()
    return page


class Watch:
    """One watch request; `events()` yields its events as dicts. `stop()` may be called from any thread, before or
    during the iteration: it ends the iteration promptly, even while a read is blocked waiting for the next event."""

    def __init__(
        self,
        rest: KubeRest,
        path: str,
        *,
        resource_version: str | None,
        timeout_seconds: int,
        timeout: tuple[float, float],
    ) -> None:
        self._rest = rest
        self._path = path
        self._query: dict[str, str | int] = {
            "watch": "true",
            "allowWatchBookmarks": "true",
            "timeoutSeconds": timeout_seconds,
        }
        if resource_version:
            self._query["resourceVersion"] = resource_version
        self._timeout = timeout
        self._lock = threading.Lock()
        self._stopped = False
        self._response: Any = None

    def stop(self) -> None:
        with self._lock:
            self._stopped = True
            response = self._response
        if response is not None:
            # Unblocks a read waiting in another thread (urllib3 >= 2.3); the iterating thread releases the rest.
            # It may have just done so: a socket already closed is what stop() wants anyway.
            with contextlib.suppress(OSError, ValueError):
                response.shutdown()

    def events(self) -> Generator[dict[str, Any], None, None]:
        with self._lock:
            if self._stopped:
                return
        response = self._rest.open(self._path, query=self._query, timeout=self._timeout)
        with self._lock:
            self._response = response
            stopped = self._stopped
        try:
            if not stopped:
                yield from self._parse(response)
        except Exception:
            if not self._stopped:  # a read cut by stop() is the stop, not a failure
                raise
        finally:
            with self._lock:
                self._response = None
            response.close()
            response.release_conn()

    def _parse(self, response: Any) -> Iterator[dict[str, Any]]:
        for line in _lines(response):
            if self._stopped:
                return
            if not line.strip():
                continue
            event: dict[str, Any] = json.loads(line)
            if event.get("type") == "ERROR":
                status = event.get("object") or {}
                raise ApiError(
                    int(status.get("code") or 500), str(status.get("reason") or ""), json.dumps(status).encode()
                )
            yield event


def _lines(response: Any) -> Iterator[bytes]:
    """Complete lines as they arrive; `stream(None)` yields each HTTP chunk as soon as it is read."""
    pending = b""
    for chunk in response.stream(None, decode_content=True):
        pending += chunk
        *lines, pending = pending.split(b"\n")
        yield from lines
    if pending.strip():
        yield pending
