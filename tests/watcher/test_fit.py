"""watcher.fit: every delta fits in one SQS message and keeps what a decision reads without the live object."""

from __future__ import annotations

from ccm.contracts.messages import delta_for
from tests.watcher.objects import FINALIZER, service
from watcher.fit import MAX_MESSAGE_BYTES, body_size, fit


def test_a_delta_that_fits_is_returned_unchanged() -> None:
    delta = delta_for("Service", "ADDED", service(uid="u1", rv="5"), 1.0)
    assert fit(delta) is delta


def test_largest_annotations_go_first_and_small_ones_stay() -> None:
    annotations = {
        "service.beta.kubernetes.io/a": "a" * 150_000,
        "service.beta.kubernetes.io/b": "b" * 120_000,
        "service.beta.kubernetes.io/aws-load-balancer-type": "nlb",
    }
    delta = delta_for("Service", "DELETED", service(annotations=annotations, uid="u1", rv="5"), 1.0)
    assert body_size(delta) > MAX_MESSAGE_BYTES
    fitted = fit(delta)
    assert body_size(fitted) <= MAX_MESSAGE_BYTES
    assert set(fitted.object["annotations"]) == {
        "service.beta.kubernetes.io/b",
        "service.beta.kubernetes.io/aws-load-balancer-type",
    }
    assert (fitted.key, fitted.uid, fitted.deduplication_id) == (delta.key, delta.uid, delta.deduplication_id)


def test_when_annotations_are_not_enough_only_the_decision_fields_stay() -> None:
    svc = service(finalizers=[FINALIZER], uid="u1", rv="5")
    svc["spec"]["loadBalancerSourceRanges"] = [f"10.{i // 256}.{i % 256}.0/24" for i in range(20_000)]
    svc["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    delta = delta_for("Service", "MODIFIED", svc, 1.0)
    fitted = fit(delta)
    assert body_size(fitted) <= MAX_MESSAGE_BYTES
    assert fitted.object == {
        "type": "LoadBalancer",
        "finalizers": [FINALIZER],
        "deletionTimestamp": "2026-01-01T00:00:00Z",
        "trimmedToFit": ["annotations", "loadBalancerSourceRanges", "ports"],
    }


def test_node_deltas_are_never_trimmed() -> None:
    # The membership table is built from a Node delta's labels: a trimmed one would store a wrong record.
    node = {"metadata": {"name": "n1", "uid": "u", "resourceVersion": "1", "labels": {}}, "spec": {}, "status": {}}
    node["metadata"]["labels"] = {f"example.com/l{i}": "v" * 63 for i in range(5000)}
    delta = delta_for("Node", "MODIFIED", node, 1.0)
    assert body_size(delta) > MAX_MESSAGE_BYTES and fit(delta) is delta
