# ruff: noqa: F811  (the fixtures imported from the other modules are parameters here)
"""Issue 24: NLB `ip` targets from EndpointSlices, through the real Lambda handler, the API emulator (pods played by
the devstack's kubelet, slices by its EndpointSlice controller, as kube-controller-manager writes them) and
in-process moto answering `ip` target groups as AWS does (devstack.aws_faithful_elb)."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import boto3
import pytest
from kubernetes import client, config

from ccm.aws.clients import CallCounter
from ccm.config import Settings
from ccm.contracts.messages import delta_for, endpoints_hint
from ccm.k8s.kube import Kube
from ccm.k8s.kubeconfig import from_kubeconfig
from ccm.wiring.services import build_service_runtime
from devstack import aws_faithful
from devstack.endpointslices import EndpointSliceController
from devstack.k8s_emulator import Emulator
from devstack.pod_world import Kubelet, PodSet, container
from tests.integration.conftest import CLUSTER, REGION, World
from tests.integration.test_one_model_per_pass import stack  # noqa: F401
from tests.integration.test_service_reconciler import emulator, invoke, read  # noqa: F401

A = "service.beta.kubernetes.io/aws-load-balancer-"
IP_MODE = {A + "type": "nlb", A + "nlb-target-type": "ip"}


class Pods:
    """A Deployment's pods on the world's nodes, their kubelet and the EndpointSlice controller."""

    def __init__(self, emu: Emulator) -> None:
        self.emu = emu
        nodes = [n["metadata"]["name"] for n in emu.list("nodes")]
        # Pod addresses inside the VPC's subnets (10.0.0.0/24, 10.0.1.0/24), as the VPC CNI gives them.
        pools = {name: ("10.0.0.128/25" if i % 2 == 0 else "10.0.1.128/25") for i, name in enumerate(nodes)}
        self.set = PodSet(emu, "web", nodes)
        self.kubelet = Kubelet(emu, ready_after=0.0, ip_pools=pools)
        self.slices = EndpointSliceController(emu)
        self.template = {"containers": [container(ports=[{"name": "http", "containerPort": 8080}])]}

    def settle(self) -> None:
        self.kubelet.sync()
        self.kubelet.sync()  # the second pass sees them ready
        self.slices.sync_all()

    def scale(self, count: int) -> None:
        self.set.create(count, self.template)
        self.settle()

    def ready_targets(self) -> set[tuple[str, int]]:
        ready = [p for p in self.set.pods() if (p.get("status") or {}).get("podIP")]
        return {(p["status"]["podIP"], 8080) for p in ready}


def create_ip_service(core: Any, pods: Pods, annotations: dict[str, str], **spec: Any) -> dict[str, Any]:
    """The Service (one port to the pods' `http` unless `spec` says otherwise), then its slices (the EndpointSlice
    controller acts on Services)."""
    body = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "web", "namespace": "default", "annotations": annotations},
        "spec": {
            "type": "LoadBalancer",
            "selector": {"app": "web"},
            "ports": [{"name": "http", "port": 80, "targetPort": "http"}],
            **spec,
        },
    }
    svc: dict[str, Any] = json.loads(core.create_namespaced_service("default", body, _preload_content=False).data)
    pods.slices.sync_all()
    return svc


def target_groups() -> list[dict[str, Any]]:
    return list(boto3.client("elbv2", region_name=REGION).describe_target_groups()["TargetGroups"])


def health(tg_arn: str) -> list[dict[str, Any]]:
    return list(
        boto3.client("elbv2", region_name=REGION).describe_target_health(TargetGroupArn=tg_arn)[
            "TargetHealthDescriptions"
        ]
    )


def registered(tg_arn: str, include_draining: bool = False) -> set[tuple[str, int]]:
    return {
        (d["Target"]["Id"], d["Target"]["Port"])
        for d in health(tg_arn)
        if include_draining or d["TargetHealth"]["State"] != "draining"
    }


def hint(svc: dict[str, Any], emu: Emulator) -> str:
    slices = {s["metadata"]["name"]: s["metadata"]["resourceVersion"] for s in emu.list("endpointslices", "default")}
    return endpoints_hint("default/web", svc["metadata"]["uid"], slices, {}, 0.0).to_body()


@pytest.fixture
def pods(emulator: Emulator, stack: dict[str, Any]) -> Pods:
    return Pods(emulator)


def test_ip_targets_follow_the_endpointslices_ready_ones_only(
    stack: dict[str, Any], world: World, emulator: Emulator, pods: Pods
) -> None:
    core = stack["core"]
    pods.scale(4)
    svc = create_ip_service(core, pods, IP_MODE)
    assert invoke(stack, [delta_for("Service", "ADDED", svc).to_body()]) == {"batchItemFailures": []}
    assert (read(core) or {})["status"]["loadBalancer"]["ingress"]
    (tg,) = target_groups()
    assert tg["TargetType"] == "ip" and tg["Port"] == 80 and tg["HealthCheckPort"] == "traffic-port"
    assert registered(tg["TargetGroupArn"]) == pods.ready_targets() and len(pods.ready_targets()) == 4

    # Scaled up: the watcher's hint makes one targets-only pass; only the new ones are registered.
    pods.scale(2)
    world.clients.counter.reset_thread()
    assert invoke(stack, [hint(svc, emulator)]) == {"batchItemFailures": []}
    calls = {op: n for op, n in world.clients.counter.thread_calls().items() if not op.startswith("dynamodb:")}
    # By the checkpoint's target-group ARN: no load balancer read, one health read, one write.
    assert calls == {"elbv2:DescribeTargetHealth": 1, "elbv2:RegisterTargets": 1}
    assert registered(tg["TargetGroupArn"]) == pods.ready_targets() and len(pods.ready_targets()) == 6

    # Two pods terminating (graceful deletion: still running, their endpoints terminating): deregistered at once.
    leaving = pods.set.pods()[:2]
    for pod in leaving:
        pods.set.delete(pod)
    pods.slices.sync_all()
    assert invoke(stack, [hint(svc, emulator)]) == {"batchItemFailures": []}
    gone = {(p["status"]["podIP"], 8080) for p in leaving}
    now = registered(tg["TargetGroupArn"])
    assert not now & gone and len(now) == 4
    assert gone <= registered(tg["TargetGroupArn"], include_draining=True)  # draining, as AWS does

    # The same hint again (a duplicate): the sets are equal, no write.
    world.clients.counter.reset_thread()
    assert invoke(stack, [hint(svc, emulator)]) == {"batchItemFailures": []}
    assert CallCounter.mutating(world.clients.counter.thread_calls()) == 0


def test_a_resync_of_a_checkpointed_ip_service_converges_its_targets_without_reading_the_load_balancer(
    stack: dict[str, Any], world: World, emulator: Emulator, pods: Pods
) -> None:
    """The hourly SYNC is the safety net for a lost hint: it converges the targets, by the checkpoint's group ARNs
    (the load balancer's one existence read, one health read per group), not with a full ensure's reads."""
    core = stack["core"]
    pods.scale(3)
    svc = create_ip_service(core, pods, IP_MODE)
    assert invoke(stack, [delta_for("Service", "ADDED", svc).to_body()]) == {"batchItemFailures": []}
    (tg,) = target_groups()
    pods.scale(2)  # its hint lost
    live = read(core)
    assert live is not None
    world.clients.counter.reset_thread()
    assert invoke(stack, [delta_for("Service", "SYNC", live).to_body()]) == {"batchItemFailures": []}
    calls = {op: n for op, n in world.clients.counter.thread_calls().items() if not op.startswith("dynamodb:")}
    assert calls == {
        "elbv2:DescribeLoadBalancers": 1,
        "elbv2:DescribeTargetHealth": 1,
        "elbv2:RegisterTargets": 1,
    }
    assert registered(tg["TargetGroupArn"]) == pods.ready_targets() and len(pods.ready_targets()) == 5


def test_a_hint_for_a_service_in_instance_mode_changes_nothing(
    stack: dict[str, Any], world: World, emulator: Emulator, pods: Pods
) -> None:
    core = stack["core"]
    pods.scale(2)
    svc = create_ip_service(core, pods, {A + "type": "nlb"})
    assert invoke(stack, [delta_for("Service", "ADDED", svc).to_body()]) == {"batchItemFailures": []}
    world.clients.counter.reset_thread()
    assert invoke(stack, [hint(svc, emulator)]) == {"batchItemFailures": []}
    assert world.clients.counter.thread_calls() == {}
    (tg,) = target_groups()
    assert tg["TargetType"] == "instance"


def test_instance_to_ip_switches_to_a_filled_group_then_deletes_the_old_one(
    stack: dict[str, Any], world: World, emulator: Emulator, pods: Pods
) -> None:
    core = stack["core"]
    pods.scale(3)
    svc = create_ip_service(core, pods, {A + "type": "nlb"})
    assert invoke(stack, [delta_for("Service", "ADDED", svc).to_body()]) == {"batchItemFailures": []}
    (old,) = target_groups()
    elbv2 = boto3.client("elbv2", region_name=REGION)
    lb_arn = old["LoadBalancerArns"][0]

    def forwarded_to() -> str:
        (listener,) = elbv2.describe_listeners(LoadBalancerArn=lb_arn)["Listeners"]
        return str(listener["DefaultActions"][0]["TargetGroupArn"])

    core.patch_namespaced_service("web", "default", {"metadata": {"annotations": {A + "nlb-target-type": "ip"}}})
    changed = read(core)
    assert changed is not None
    # TargetType is create-only: a new group, filled with the pods before the listener moves; the old instance group
    # keeps serving meanwhile (the pass waits: its healthy targets are the only ones serving).
    response = invoke(stack, [delta_for("Service", "MODIFIED", changed).to_body()])
    new = next(tg for tg in target_groups() if tg["TargetType"] == "ip")
    assert registered(new["TargetGroupArn"]) == pods.ready_targets()
    assert response["batchItemFailures"]  # a wait: the old group's targets are healthy, the new one's not yet
    assert forwarded_to() == old["TargetGroupArn"]
    # The queue's retry (a thorough pass; the waiting record is dropped so the group is free): the new group is
    # filled, and AWS health-checks a group only once a listener forwards to it (its targets are `unused`).
    assert {d["TargetHealth"]["State"] for d in health(new["TargetGroupArn"])} == {"unused"}
    stack["sqs"].purge_queue(QueueUrl=stack["queue_url"])
    assert invoke(stack, [delta_for("Service", "SYNC", changed).to_body()]) == {"batchItemFailures": []}
    assert forwarded_to() == new["TargetGroupArn"]
    assert [tg["TargetGroupArn"] for tg in target_groups()] == [new["TargetGroupArn"]]


@pytest.fixture
def listing_stack(world: World, emulator: Emulator, tmp_path: Path) -> Iterator[dict[str, Any]]:
    """The stack without a membership table: member nodes (the Ready ones a gate needs) come from a LIST."""
    for n in world.nodes():
        emulator.create(n)
    sqs = boto3.client("sqs", region_name=REGION)
    queue_url = sqs.create_queue(QueueName="svc.fifo", Attributes={"FifoQueue": "true", "VisibilityTimeout": "360"})[
        "QueueUrl"
    ]
    runtime = build_service_runtime(
        Settings(CLUSTER, world.vpc_id, default_lb_type="nlb"),
        Kube(from_kubeconfig(str(tmp_path / "kubeconfig"))),
        world.clients,
    )
    api_client = config.new_client_from_config(config_file=str(tmp_path / "kubeconfig"))
    yield {"core": client.CoreV1Api(api_client), "runtime": runtime, "sqs": sqs, "queue_url": queue_url}


def test_a_pod_declaring_our_gate_is_registered_and_turns_ready_once_its_target_is_healthy(
    emulator: Emulator,
    listing_stack: dict[str, Any],
    faithful_aws: aws_faithful.FaithfulSettings,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """No webhook: the pod's own template lists `target-health.ccm.aws/web`; the pass registers its endpoint (not
    ready: it waits only on our gate), sets the condition from the target's health and comes back while the target
    is still `initial`; once AWS says healthy, the condition is True and the kubelet makes the pod Ready."""
    aws_faithful.install(replace(faithful_aws, target_time_scale=0.01))  # health checks 100 times faster
    monkeypatch.setenv("CCM_RETRY_DELAY_SCALE", "0.01")  # and the queue's delays
    stack_ = listing_stack
    pods = Pods(emulator)
    pods.template = {**pods.template, "readinessGates": [{"conditionType": "target-health.ccm.aws/web"}]}
    pods.scale(2)
    svc = create_ip_service(stack_["core"], pods, IP_MODE)
    assert not [p for p in pods.set.pods() if _condition(p, "Ready") == "True"]  # held by the gate alone
    response = invoke(stack_, [delta_for("Service", "ADDED", svc).to_body()])
    (tg,) = target_groups()
    assert registered(tg["TargetGroupArn"]) == pods.ready_targets() and len(pods.ready_targets()) == 2
    assert {_condition(p, GATE) for p in pods.set.pods()} == {"False"}  # initial: not healthy yet
    assert response["batchItemFailures"]  # the record comes back after one (scaled) health-check interval

    deadline = time.monotonic() + 30
    while {_condition(p, GATE) for p in pods.set.pods()} != {"True"} and time.monotonic() < deadline:
        time.sleep(1.2)  # the record's delay, scaled down to its floor (1 s)
        invoke(stack_, [])  # the same record, received again
    assert {_condition(p, GATE) for p in pods.set.pods()} == {"True"}
    pods.settle()
    assert {_condition(p, "Ready") for p in pods.set.pods()} == {"True"}


GATE = "target-health.ccm.aws/web"


def _condition(pod: dict[str, Any], kind: str) -> str | None:
    return next((c["status"] for c in (pod.get("status") or {}).get("conditions") or [] if c["type"] == kind), None)
