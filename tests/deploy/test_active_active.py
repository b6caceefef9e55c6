"""Two watcher replicas (deploy/base runs 2, active-active) against one API emulator and one pair of SQS FIFO
queues on a moto server: every change is sent by both and arrives once, because the deduplication ids of the
two replicas are equal — including relist SYNCs, periodic resync SYNCs and synthesised DELETEDs."""

from __future__ import annotations

import copy
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from moto.server import ThreadedMotoServer

from ccm.contracts.messages import KINDS, delta_for, parse_delta
from devstack.k8s_emulator import Emulator
from tests.watcher.conftest import receive_all, sqs_client, wait_until
from tests.watcher.objects import node, service
from watcher import relevance
from watcher.app import Watcher, seconds_to_next_resync
from watcher.config import Config


class RecordingSqs:
    """Passes every call to the real (moto server) client and remembers the entries each replica sent."""

    def __init__(self, real: Any) -> None:
        self._real = real
        self.sent: list[dict[str, str]] = []

    def send_message_batch(self, **kwargs: Any) -> Any:
        response = self._real.send_message_batch(**kwargs)
        ok = {e["Id"] for e in response.get("Successful") or ()}
        self.sent += [e for e in kwargs["Entries"] if e["Id"] in ok]
        return response

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)


@pytest.fixture(scope="module")
def sqs() -> Iterator[Any]:
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    yield sqs_client(f"http://{host}:{port}")
    server.stop()


@pytest.fixture
def queues(sqs: Any) -> dict[str, str]:
    """FIFO queues configured as template.yaml's (explicit dedup ids, per-group deduplication scope)."""
    suffix = uuid.uuid4().hex[:10]
    attributes = {
        "FifoQueue": "true",
        "ContentBasedDeduplication": "false",
        "DeduplicationScope": "messageGroup",
        "FifoThroughputLimit": "perMessageGroupId",
    }
    return {
        kind: sqs.create_queue(QueueName=f"{name}-{suffix}.fifo", Attributes=attributes)["QueueUrl"]
        for kind, name in (("Service", "services"), ("Node", "nodes"))
    }


def start_watcher(emu: Emulator, kubeconfig: str, sqs: Any, queues: dict[str, str]) -> tuple[Watcher, RecordingSqs]:
    recorder = RecordingSqs(sqs)
    config = Config(
        services_queue_url=queues["Service"],
        nodes_queue_url=queues["Node"],
        kubeconfig=kubeconfig,
        health_host="127.0.0.1",
        health_port=0,
        watch_timeout_seconds=30,
        backoff_initial=0.05,
        backoff_max=0.4,
        sqs_probe_seconds=0.3,
    )
    watcher = Watcher(config, sqs=recorder)
    watcher.start()
    return watcher, recorder


def edit(emu: Emulator, plural: str, namespace: str | None, name: str, **meta: Any) -> None:
    obj = copy.deepcopy(emu.get(plural, namespace, name))
    assert obj is not None
    obj.setdefault("apiVersion", "v1")
    obj.setdefault("kind", "Service" if plural == "services" else "Node")
    for field, value in meta.items():
        obj["metadata"].setdefault(field, {}).update(value)
    emu.update(obj)


def test_two_watchers_send_everything_and_every_change_arrives_once(
    emu: Emulator, tmp_path: Path, sqs: Any, queues: dict[str, str]
) -> None:
    for obj in (service("a"), service("b", svc_type="ClusterIP"), node("n1"), node("n2")):
        emu.create(obj)
    kubeconfig = emu.write_kubeconfig(str(tmp_path / "kubeconfig"))
    replicas = [start_watcher(emu, kubeconfig, sqs, queues) for _ in range(2)]
    try:
        for watcher, _ in replicas:
            wait_until(lambda w=watcher: w.ready, timeout=15)  # type: ignore[misc]
        step = 3  # initial lists: a, n1, n2

        def change(action: Any, *args: Any, sends: int = 1, **kwargs: Any) -> None:
            # One change at a time, until both replicas sent it: no coalescing in either buffer blurs the count.
            nonlocal step
            action(*args, **kwargs)
            step += sends
            for _, recorder in replicas:
                wait_until(lambda r=recorder: len(r.sent) >= step, timeout=15)  # type: ignore[misc]

        change(lambda: None, sends=0)
        change(emu.create, service("c"))
        internal = {"service.beta.kubernetes.io/aws-load-balancer-internal": "true"}
        change(edit, emu, "services", "default", "a", annotations=internal)
        change(edit, emu, "services", "default", "a", labels={"team": "x"}, sends=0)  # irrelevant: dropped by both
        change(emu.delete, "services", "default", "c")
        change(edit, emu, "nodes", None, "n1", labels={"role": "edge"})
        change(emu.delete, "nodes", None, "n2")
        # A relist of both (410 Gone: finds nothing new), then the periodic resync of both at the same tick.
        emu.compact()
        for watcher, _ in replicas:
            wait_until(lambda w=watcher: w.metrics.registry.get_sample_value(  # type: ignore[misc]
                "watcher_relists_total", {"kind": "Service", "reason": "gone"}
            ), timeout=15)  # fmt: skip
        change(lambda: [w.informers["Service"].resync() for w, _ in replicas])  # only "a" is relevant now
    finally:
        for watcher, _ in replicas:
            watcher.stop(flush_timeout=2)

    (first, second) = (r.sent for _, r in replicas)
    ids = [e["MessageDeduplicationId"] for e in first]
    assert len(first) == len(second) == 9 and len(set(ids)) == 9
    assert sorted(ids) == sorted(e["MessageDeduplicationId"] for e in second)

    received = [
        parse_delta(m["Body"])
        for url in queues.values()
        for m in receive_all(sqs, url, expect=5 if url == queues["Service"] else 4)
    ]
    received = [d for d in received if d.kind in KINDS]  # not the replicas' heartbeats (collapsed the same way)
    assert len(received) == 9, [(d.type, d.key) for d in received]
    assert Counter(d.deduplication_id for d in received) == Counter(ids)
    assert sorted((d.type, d.key) for d in received) == sorted(
        [
            ("SYNC", "default/a"),
            ("ADDED", "default/c"),
            ("MODIFIED", "default/a"),
            ("DELETED", "default/c"),
            ("SYNC", "default/a"),
            ("SYNC", "n1"),
            ("SYNC", "n2"),
            ("MODIFIED", "n1"),
            ("DELETED", "n2"),
        ]
    )


def test_a_synthesised_delete_collapses_with_the_watched_one() -> None:
    """One replica sees the DELETED event (deletion RV); another missed it and synthesises it after a relist from
    the last RV it knew. Same object, same deletion: the same deduplication id."""
    svc = service("a", uid="u-1", rv="7")
    remembered = relevance.decide("Service", "ADDED", svc, None, observed_at=1.0).entry
    assert remembered is not None
    synthesised = relevance.vanished("Service", {"default/a": remembered}, [], observed_at=2.0)[0]
    watched = delta_for("Service", "DELETED", {**svc, "metadata": {**svc["metadata"], "resourceVersion": "9"}})
    assert synthesised.resource_version != watched.resource_version
    assert synthesised.deduplication_id == watched.deduplication_id
    assert delta_for("Service", "DELETED", service("a", uid="u-2", rv="9")).deduplication_id != watched.deduplication_id


@pytest.mark.parametrize("period", [600.0, 300.0, 0.3])
def test_replicas_started_apart_resync_on_the_same_tick(period: float) -> None:
    # Started 17.25 s (or any time) apart, both wake at the same wall-clock multiple of the period.
    started = [1_700_000_123.5, 1_700_000_140.75]
    ticks = {round(t + seconds_to_next_resync(t, period), 6) for t in started if period > 20}
    assert len(ticks) <= 1
    for now in (*started, 1_700_000_400.0):
        wait = seconds_to_next_resync(now, period)
        assert 0 < wait <= period and abs(((now + wait) / period) - round((now + wait) / period)) < 1e-6
