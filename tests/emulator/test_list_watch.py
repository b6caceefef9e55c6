"""Selectors, pagination and watch semantics (replay, bookmarks, timeouts, 410, drops)."""

from __future__ import annotations

import threading
import time
from typing import Any

import kubernetes
import pytest
from kubernetes.client.rest import ApiException

from devstack.k8s_emulator import Emulator
from devstack.k8s_emulator.store import FUTURE_WATCH_HTTP_504, FUTURE_WATCH_SHAPES, FUTURE_WATCH_SILENT

from .conftest import Raw, service_body

SVC_PATH = "/api/v1/namespaces/default/services"


def _seed(emu: Emulator) -> None:
    for name, labels in [
        ("a", {"app": "web", "tier": "front"}),
        ("b", {"app": "web", "tier": "back"}),
        ("c", {"app": "db"}),
        ("d", {}),
    ]:
        body = service_body(name)
        body["metadata"]["labels"] = labels
        emu.create(body)


@pytest.mark.parametrize(
    ("selector", "expected"),
    [
        ("app=web", ["a", "b"]),
        ("app==web", ["a", "b"]),
        ("app!=web", ["c", "d"]),
        ("app in (web,db)", ["a", "b", "c"]),
        ("app notin (web)", ["c", "d"]),
        ("tier", ["a", "b"]),
        ("!tier", ["c", "d"]),
        ("app=web,tier=back", ["b"]),
        ("app in (web), tier notin (front)", ["b"]),
    ],
)
def test_label_selectors(emu: Emulator, core: kubernetes.client.CoreV1Api, selector: str, expected: list[str]) -> None:
    _seed(emu)
    names = [s.metadata.name for s in core.list_namespaced_service("default", label_selector=selector).items]
    assert names == expected


def test_field_selectors(emu: Emulator, core: kubernetes.client.CoreV1Api, raw: Raw) -> None:
    _seed(emu)
    assert [
        s.metadata.name for s in core.list_namespaced_service("default", field_selector="metadata.name=c").items
    ] == ["c"]
    assert len(core.list_service_for_all_namespaces(field_selector="metadata.namespace!=default").items) == 0
    status, _, body = raw.request("GET", SVC_PATH + "?fieldSelector=spec.type%3DClusterIP")
    assert status == 400 and "not a known field selector" in body["message"]
    status, _, body = raw.request("GET", SVC_PATH + "?labelSelector=%3D%3D%3D")
    assert status == 400


def test_pagination_is_a_consistent_snapshot(emu: Emulator, core: kubernetes.client.CoreV1Api) -> None:
    _seed(emu)
    page1 = core.list_namespaced_service("default", limit=2)
    assert [s.metadata.name for s in page1.items] == ["a", "b"]
    assert page1.metadata._continue and page1.metadata.remaining_item_count == 2
    emu.create(service_body("bb"))  # sorts into page 2, but was created after the snapshot
    emu.delete("services", "default", "c")
    page2 = core.list_namespaced_service("default", limit=2, _continue=page1.metadata._continue)
    assert [s.metadata.name for s in page2.items] == ["c", "d"]
    assert not page2.metadata._continue
    assert page2.metadata.resource_version == page1.metadata.resource_version
    fresh = core.list_namespaced_service("default")
    assert [s.metadata.name for s in fresh.items] == ["a", "b", "bb", "d"]


def test_expired_continue_token_is_410(emu: Emulator, core: kubernetes.client.CoreV1Api, raw: Raw) -> None:
    _seed(emu)
    page1 = core.list_namespaced_service("default", limit=1)
    emu.create(service_body("later"))
    emu.compact()
    with pytest.raises(ApiException) as exc:
        core.list_namespaced_service("default", limit=1, _continue=page1.metadata._continue)
    assert exc.value.status == 410
    status, _, _ = raw.request("GET", SVC_PATH + "?limit=1&continue=garbage")
    assert status == 400


def test_watch_replays_from_resource_version(emu: Emulator, core: kubernetes.client.CoreV1Api) -> None:
    a = core.create_namespaced_service("default", service_body("a"))
    core.create_namespaced_service("default", service_body("b"))
    core.patch_namespaced_service("a", "default", {"metadata": {"labels": {"v": "2"}}})
    core.delete_namespaced_service("b", "default")
    events = [
        (e["type"], e["object"].metadata.name)
        for e in kubernetes.watch.Watch().stream(
            core.list_namespaced_service, "default", resource_version=a.metadata.resource_version, timeout_seconds=1
        )
    ]
    assert events == [("ADDED", "b"), ("MODIFIED", "a"), ("DELETED", "b")]


def test_watch_without_rv_sends_current_state_then_live(emu: Emulator, core: kubernetes.client.CoreV1Api) -> None:
    core.create_namespaced_service("default", service_body("a"))
    seen: list[tuple[str, str, str]] = []

    def consume() -> None:
        for e in kubernetes.watch.Watch().stream(core.list_namespaced_service, "default", timeout_seconds=2):
            obj = e["object"]
            seen.append((e["type"], obj.metadata.name, obj.metadata.resource_version))

    t = threading.Thread(target=consume)
    t.start()
    _wait_for(lambda: len(seen) >= 1)
    core.create_namespaced_service("default", service_body("b"))
    t.join(5)
    assert [(typ, name) for typ, name, _ in seen] == [("ADDED", "a"), ("ADDED", "b")]
    assert int(seen[1][2]) > int(seen[0][2])


def test_watch_selector_transitions(emu: Emulator, raw: Raw, core: kubernetes.client.CoreV1Api) -> None:
    svc = core.create_namespaced_service("default", service_body("a"))
    core.patch_namespaced_service("a", "default", {"metadata": {"labels": {"app": "other"}}})
    core.patch_namespaced_service("a", "default", {"metadata": {"labels": {"app": "a"}}})
    core.patch_namespaced_service("a", "default", {"metadata": {"annotations": {"x": "y"}}})
    _, events = raw.watch(
        f"{SVC_PATH}?watch=1&labelSelector=app%3Da&timeoutSeconds=1&resourceVersion={svc.metadata.resource_version}"
    )
    assert [e["type"] for e in events] == ["DELETED", "ADDED", "MODIFIED"]


def test_single_object_watch_by_field_selector(emu: Emulator, raw: Raw) -> None:
    emu.create(service_body("a"))
    emu.create(service_body("b"))
    _, events = raw.watch(f"{SVC_PATH}?watch=true&fieldSelector=metadata.name%3Db&timeoutSeconds=1")
    assert [(e["type"], e["object"]["metadata"]["name"]) for e in events] == [("ADDED", "b")]
    assert events[0]["object"]["kind"] == "Service" and events[0]["object"]["apiVersion"] == "v1"


def test_bookmarks(emu: Emulator, raw: Raw, core: kubernetes.client.CoreV1Api) -> None:
    created = emu.create(service_body("a"))
    started = time.monotonic()
    _, events = raw.watch(
        f"{SVC_PATH}?watch=1&allowWatchBookmarks=true&timeoutSeconds=1"
        f"&resourceVersion={created['metadata']['resourceVersion']}"
    )
    assert time.monotonic() - started < 3
    bookmarks = [e for e in events if e["type"] == "BOOKMARK"]
    assert len(bookmarks) >= 2  # interval is 0.3 s in these tests
    assert bookmarks[0]["object"] == {
        "kind": "Service",
        "apiVersion": "v1",
        "metadata": {"resourceVersion": created["metadata"]["resourceVersion"]},
    }
    # The python client surfaces them too.
    types = [
        e["type"]
        for e in kubernetes.watch.Watch().stream(
            core.list_namespaced_service,
            "default",
            allow_watch_bookmarks=True,
            timeout_seconds=1,
            resource_version=created["metadata"]["resourceVersion"],
        )
    ]
    assert "BOOKMARK" in types


def test_send_initial_events_ends_with_annotated_bookmark(emu: Emulator, raw: Raw) -> None:
    emu.create(service_body("a"))
    _, events = raw.watch(
        f"{SVC_PATH}?watch=1&sendInitialEvents=true&resourceVersionMatch=NotOlderThan"
        "&allowWatchBookmarks=true&timeoutSeconds=1",
        max_events=2,
    )
    assert events[0]["type"] == "ADDED"
    assert events[1]["type"] == "BOOKMARK"
    assert events[1]["object"]["metadata"]["annotations"] == {"k8s.io/initial-events-end": "true"}


def test_timeout_seconds_ends_stream(emu: Emulator, raw: Raw) -> None:
    started = time.monotonic()
    status, events = raw.watch(f"{SVC_PATH}?watch=1&timeoutSeconds=1", timeout=5)
    elapsed = time.monotonic() - started
    assert status == 200 and events == [] and 0.9 <= elapsed < 2.5


def test_too_old_resource_version_is_200_with_an_in_stream_410(
    emu: Emulator, raw: Raw, core: kubernetes.client.CoreV1Api
) -> None:
    # kube-apiserver's watch cache answers a too-old RV with HTTP 200 and one ERROR event (cacher.Watch ->
    # newErrWatcher), observed on a real server.
    old = emu.create(service_body("a"))["metadata"]["resourceVersion"]
    emu.create(service_body("b"))
    emu.compact()
    status, events = raw.watch(f"{SVC_PATH}?watch=1&resourceVersion={old}")
    assert status == 200 and [e["type"] for e in events] == ["ERROR"]
    assert events[0]["object"]["code"] == 410 and events[0]["object"]["reason"] == "Expired"
    # The official client retries once, then raises the 410 for the caller to relist.
    with pytest.raises(ApiException) as exc:
        list(
            kubernetes.watch.Watch().stream(
                core.list_namespaced_service, "default", resource_version=old, timeout_seconds=1
            )
        )
    assert exc.value.status == 410
    current = core.list_namespaced_service("default").metadata.resource_version
    status, events = raw.watch(f"{SVC_PATH}?watch=1&timeoutSeconds=1&resourceVersion={current}")
    assert status == 200 and events == []


def test_too_old_resource_version_can_be_http_410(core: kubernetes.client.CoreV1Api) -> None:
    # Without the watch cache (etcd-backed watches) the answer is HTTP 410: both are seen in the wild.
    with Emulator(expired_watch_in_stream=False) as emu:
        old = emu.create(service_body("a"))["metadata"]["resourceVersion"]
        emu.create(service_body("b"))
        emu.compact()
        status, body = Raw(emu).watch(f"{SVC_PATH}?watch=1&resourceVersion={old}")
    assert status == 410 and body[0]["code"] == 410 and body[0]["reason"] == "Expired"


def test_a_list_at_a_future_resource_version_is_refused(emu: Emulator, raw: Raw) -> None:
    # storage.NewTooLargeResourceVersionError: 504 Timeout, cause ResourceVersionTooLarge, retry after 1 s.
    current = int(emu.create(service_body("a"))["metadata"]["resourceVersion"])
    for query in (
        f"resourceVersion={current + 100}",
        f"resourceVersion={current + 100}&resourceVersionMatch=NotOlderThan&limit=1",
    ):
        status, headers, body = raw.request("GET", f"{SVC_PATH}?{query}")
        assert status == 504, query
        assert body["reason"] == "Timeout" and body["details"]["causes"][0]["reason"] == "ResourceVersionTooLarge"
        assert body["message"] == f"Timeout: Too large resource version: {current + 100}, current: {current}"
        assert headers["retry-after"] == "1"
    status, _, body = raw.request("GET", f"{SVC_PATH}?resourceVersion={current}")
    assert status == 200 and [i["metadata"]["name"] for i in body["items"]] == ["a"]


@pytest.mark.parametrize("shape", FUTURE_WATCH_SHAPES)
def test_a_watch_from_a_future_resource_version_in_each_shape(shape: str) -> None:
    """1.28+ (the default): HTTP 200, then nothing until timeoutSeconds, not even a bookmark or an event written
    meanwhile. The other shapes: HTTP 504, or HTTP 200 whose only event is the 504 as an ERROR."""
    with Emulator(future_watch=shape, bookmark_interval=0.2) as emu:
        current = int(emu.create(service_body("a"))["metadata"]["resourceVersion"])
        path = f"{SVC_PATH}?watch=1&allowWatchBookmarks=true&timeoutSeconds=2&resourceVersion={current + 100}"
        raw = Raw(emu)
        writer = threading.Timer(0.5, lambda: emu.create(service_body("b")))
        writer.start()
        status, events = raw.watch(path)
        writer.join()
    if shape == FUTURE_WATCH_SILENT:
        assert (status, events) == (200, [])
    elif shape == FUTURE_WATCH_HTTP_504:
        assert status == 504 and events[0]["details"]["causes"][0]["reason"] == "ResourceVersionTooLarge"
    else:
        assert status == 200 and [e["type"] for e in events] == ["ERROR"]
        assert events[0]["object"]["code"] == 504
        assert events[0]["object"]["details"]["causes"][0]["reason"] == "ResourceVersionTooLarge"


def test_compact_sends_in_stream_410_to_open_watches(emu: Emulator, raw: Raw) -> None:
    result: dict[str, Any] = {}
    t = threading.Thread(
        target=lambda: result.update(
            zip(("status", "events"), raw.watch(f"{SVC_PATH}?watch=1&timeoutSeconds=5", timeout=8), strict=True)
        )
    )
    t.start()
    _wait_for(lambda: len(emu.store.watchers) == 1)
    emu.compact()
    t.join(5)
    assert result["status"] == 200
    assert result["events"][-1]["type"] == "ERROR"
    assert result["events"][-1]["object"]["code"] == 410


def test_drop_watches_cuts_streams_abruptly(emu: Emulator) -> None:
    # A server that dies ends the chunked stream without its terminal chunk: clients see a protocol error
    # ("Response ended prematurely"), not a clean end of stream.
    import urllib3

    outcomes: list[str] = []
    pool = urllib3.PoolManager()

    def watch() -> None:
        try:
            resp = pool.request("GET", f"{emu.url}{SVC_PATH}?watch=1", preload_content=False, timeout=8)
            for _ in resp.read_chunked():
                pass
            outcomes.append("clean end")
        except urllib3.exceptions.ProtocolError as err:
            outcomes.append(type(err).__name__)

    threads = [threading.Thread(target=watch) for _ in range(3)]
    for t in threads:
        t.start()
    _wait_for(lambda: len(emu.store.watchers) == 3)
    emu.create(service_body("a"))
    dropped_at = time.monotonic()
    assert emu.drop_watches() == 3
    for t in threads:
        t.join(5)
    assert time.monotonic() - dropped_at < 5
    assert len(outcomes) == 3 and "clean end" not in outcomes, outcomes
    entries = [e for e in emu.request_log if e["watch"]]
    assert len(entries) == 3 and all(e["bytes"] > 0 for e in entries)


def test_drop_watches_clean_ends_like_a_timeout(emu: Emulator, raw: Raw) -> None:
    result: list[tuple[int, list[dict[str, Any]]]] = []
    t = threading.Thread(target=lambda: result.append(raw.watch(f"{SVC_PATH}?watch=1", timeout=8)))
    t.start()
    _wait_for(lambda: len(emu.store.watchers) == 1)
    assert emu.drop_watches(clean=True) == 1
    t.join(5)
    assert result == [(200, [])]


def test_bookmarks_come_at_the_watch_cache_cadence(raw: Raw) -> None:
    # cacheWatcher.nextBookmarkTime: every bookmarkFrequency (1 min) and 2 s before the watch's deadline, not
    # every second. A 4 s watch on a server with the real one-minute cadence gets exactly one, at about 2 s.
    with Emulator() as emu:
        started = time.monotonic()
        status, events = Raw(emu).watch(f"{SVC_PATH}?watch=1&allowWatchBookmarks=true&timeoutSeconds=4", timeout=10)
        elapsed = time.monotonic() - started
    assert status == 200 and [e["type"] for e in events] == ["BOOKMARK"]
    assert 3.5 <= elapsed < 6
    # Without a deadline and within a minute: none.
    with Emulator() as emu:
        status, events = Raw(emu).watch(f"{SVC_PATH}?watch=1&allowWatchBookmarks=true&timeoutSeconds=1", timeout=10)
    assert status == 200 and events == []


def _wait_for(cond: Any, timeout: float = 5) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError("condition not met in time")
        time.sleep(0.02)
