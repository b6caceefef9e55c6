"""Property, through the real handler (emulator over HTTP + in-process moto): whatever annotations a Service
carries, no exception escapes the Lambda handler, and an invalid configuration makes NO AWS mutation, leaves a
Warning `SyncLoadBalancerFailed` event (upstream's reason) naming the annotation, and is not retried."""

from __future__ import annotations

import itertools
import json
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kubernetes import client

from ccm.aws import lbconfig as a
from ccm.aws.clients import CallCounter
from ccm.contracts.cloud import ImplementedElsewhere, InvalidServiceConfig
from ccm.contracts.messages import delta_for
from tests.integration.conftest import World
from tests.integration.test_service_reconciler import (  # noqa: F401  (emulator, stack: fixtures)
    Ctx,
    create_service,
    emulator,
    sqs_event,
    stack,
)
from tests.unit.test_annotations import _annotations

_names = (f"prop-{i}" for i in itertools.count())


def deliver_once(ctx: dict[str, Any], body: str, group: str) -> dict[str, Any]:
    """One delivery through the handler (raises if anything escaped), then the record is gone either way: a valid
    Service naming what AWS does not hold is retried in real life (its own group, backoff), not the point here."""
    event = sqs_event(ctx, [body], group=group)
    assert len(event["Records"]) == 1
    response: dict[str, Any] = ctx["runtime"].handle_batch(event, Ctx())
    ctx["sqs"].delete_message(QueueUrl=ctx["queue_url"], ReceiptHandle=event["Records"][0]["receiptHandle"])
    return response


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(annotations=_annotations, lb_type=st.sampled_from([None, "nlb", "clb"]))
def test_any_annotations_never_escape_and_invalid_ones_change_nothing(
    stack: dict[str, Any],  # noqa: F811
    world: World,
    annotations: dict[str, str],
    lb_type: str | None,
):
    if lb_type is not None:
        annotations = {**annotations, a.TYPE_ANNOTATION: lb_type}
    name = next(_names)
    create_service(stack["core"], name)
    try:
        patched = stack["core"].patch_namespaced_service(
            name,
            "default",
            {"metadata": {"annotations": annotations}},
            _preload_content=False,
            _content_type="application/merge-patch+json",
        )
    except client.ApiException as err:
        assert err.status == 422  # an annotation key the API server itself refuses never reaches us
        return
    live = json.loads(patched.data)
    try:
        a.parse_load_balancer_config(live, default_lb_type="nlb")
        invalid = False
    except ImplementedElsewhere:
        return  # left to the AWS Load Balancer Controller: nothing to check here
    except InvalidServiceConfig:
        invalid = True

    world.clients.counter.reset_thread()
    response = deliver_once(stack, delta_for("Service", "ADDED", live).to_body(), f"default/{name}")
    if invalid:
        assert response == {"batchItemFailures": []}  # not retried until the Service changes
        assert CallCounter.mutating(world.clients.counter.thread_calls()) == 0
        events = json.loads(stack["core"].list_namespaced_event("default", _preload_content=False).data)["items"]
        uid = live["metadata"]["uid"]  # Events outlive their objects: match the incarnation, not the name
        warnings = [e for e in events if e["involvedObject"].get("uid") == uid and e["type"] == "Warning"]
        assert [e["reason"] for e in warnings] == ["SyncLoadBalancerFailed"]
        assert any(key in warnings[0]["message"] for key in annotations)
