"""ccm.k8s.watch, the watcher's list + watch on the project's own client, against the emulator over HTTP (TLS and
token checking on): events as plain dicts, bookmarks, in-stream and HTTP 410 as ApiError, and a stop() from another
thread that ends a watch blocked waiting for events."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ccm.k8s.kubeconfig import from_kubeconfig
from ccm.k8s.rest import ApiError, KubeRest
from ccm.k8s.watch import Watch, list_page
from devstack.k8s_emulator import Emulator

TIMEOUT = (5.0, 30.0)


@pytest.fixture
def emulator() -> Iterator[Emulator]:
    emu = Emulator(require_token=True, tls=True, bookmark_interval=0.2).start()
    yield emu
    emu.stop()


@pytest.fixture
def rest(emulator: Emulator, tmp_path: Path) -> KubeRest:
    return from_kubeconfig(emulator.write_kubeconfig(str(tmp_path / "kubeconfig")))


def node(name: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}}


def test_pages_then_events_from_the_lists_resource_version_with_bookmarks(emulator: Emulator, rest: KubeRest) -> None:
    for name in ("a", "b", "c"):
        emulator.create(node(name))
    first = list_page(rest, "/api/v1/nodes", limit=2, continue_token=None, timeout=TIMEOUT)
    second = list_page(rest, "/api/v1/nodes", limit=2, continue_token=first["metadata"]["continue"], timeout=TIMEOUT)
    assert [n["metadata"]["name"] for n in first["items"] + second["items"]] == ["a", "b", "c"]
    assert not second["metadata"].get("continue")

    emulator.create(node("d"))
    watch = Watch(
        rest,
        "/api/v1/nodes",
        resource_version=first["metadata"]["resourceVersion"],
        timeout_seconds=30,
        timeout=TIMEOUT,
    )
    seen: list[tuple[str, str | None]] = []
    events = watch.events()
    for event in events:
        seen.append((event["type"], event["object"]["metadata"].get("name")))
        if event["type"] == "BOOKMARK":
            break
    events.close()
    assert seen == [("ADDED", "d"), ("BOOKMARK", None)]  # nothing listed is replayed
    query = next(e["query"] for e in emulator.request_log.snapshot() if e["watch"])
    assert "allowWatchBookmarks=true" in query and "watch=true" in query and "timeoutSeconds=30" in query


def test_a_compacted_resource_version_is_a_410_in_stream_or_over_http(emulator: Emulator, rest: KubeRest) -> None:
    emulator.create(node("a"))
    rv = list_page(rest, "/api/v1/nodes", limit=10, continue_token=None, timeout=TIMEOUT)["metadata"]["resourceVersion"]
    open_watch = Watch(rest, "/api/v1/nodes", resource_version=rv, timeout_seconds=30, timeout=TIMEOUT).events()
    assert next(open_watch)["type"] == "BOOKMARK"
    emulator.create(node("b"))
    emulator.compact()
    with pytest.raises(ApiError) as err:
        list(open_watch)  # the ADDED of "b" may come first; the stream then ends with the ERROR event
    assert err.value.status == 410 and '"code": 410' in err.value.body
    # A new watch from the compacted resourceVersion (answered in-stream or as HTTP 410 by the emulator's setting).
    with pytest.raises(ApiError) as err:
        list(Watch(rest, "/api/v1/nodes", resource_version=rv, timeout_seconds=30, timeout=TIMEOUT).events())
    assert err.value.status == 410


def test_stop_from_another_thread_ends_a_blocked_watch_at_once(tmp_path: Path) -> None:
    emu = Emulator(bookmark_interval=600).start()  # no event, no bookmark: the read blocks
    try:
        rest = from_kubeconfig(emu.write_kubeconfig(str(tmp_path / "kubeconfig")))
        watch = Watch(rest, "/api/v1/nodes", resource_version=None, timeout_seconds=300, timeout=(5.0, 330.0))
        done = threading.Event()
        seen: list[dict[str, Any]] = []

        def consume() -> None:
            seen.extend(watch.events())  # ends quietly: a stop is not an error
            done.set()

        thread = threading.Thread(target=consume, daemon=True)
        thread.start()
        deadline = time.monotonic() + 10
        while not [e for e in emu.request_log.snapshot() if e["watch"]] and time.monotonic() < deadline:
            time.sleep(0.02)
        started = time.monotonic()
        watch.stop()
        assert done.wait(10), "stop() did not end the blocked watch"
        assert time.monotonic() - started < 5 and seen == []
        # A Watch stopped before it is iterated never opens a request.
        before = len(emu.request_log.snapshot())
        stopped = Watch(rest, "/api/v1/nodes", resource_version=None, timeout_seconds=300, timeout=(5.0, 330.0))
        stopped.stop()
        assert list(stopped.events()) == [] and len(emu.request_log.snapshot()) == before
    finally:
        emu.stop()
