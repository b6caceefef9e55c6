"""`python -m devstack dashboard`: run a short demo on the local stack and write the template's dashboard, drawn
from the stack's own metrics, as one HTML page (devstack.dashboard, devstack.dashboard_page)."""

from __future__ import annotations

import json
import logging
import time
import uuid
from pathlib import Path
from typing import Any

from ccm.node.model import UNINITIALIZED_TAINT
from devstack.aws import NODE_IMAGE_ID
from devstack.dashboard import (
    Point,
    QueueSampler,
    TimedRecords,
    deleted_points,
    emf_points,
    lambda_points,
    panels,
    widgets,
)
from devstack.dashboard_page import render
from devstack.stack import Stack

log = logging.getLogger(__name__)
A = "service.beta.kubernetes.io/aws-load-balancer-"
# A Service that converges, and one whose author made a mistake (the failures widget has something to show).
DEMO_SERVICES: tuple[tuple[str, dict[str, str]], ...] = (
    ("hello", {}),
    ("typo", {A + "healthcheck-interval": "often"}),
)


def collect(stack: Stack, sampler: QueueSampler) -> list[Point]:
    assert stack.runner is not None and stack.facts is not None
    points = list(sampler.points)
    points += lambda_points(stack.runner.log)
    points += deleted_points(stack.runner.log, stack.facts)
    for function in stack.facts.functions:
        points += emf_points(stack.runner.log_records(function))
    return points


def log_lines(stack: Stack) -> dict[str, TimedRecords]:
    """Each function's JSON log lines with their time: what the log widgets' queries read."""
    assert stack.runner is not None and stack.facts is not None
    return {function: stack.runner.timed_log_records(function) for function in stack.facts.functions}


def page(stack: Stack, sampler: QueueSampler, period: int | None) -> tuple[str, list[dict[str, Any]]]:
    assert stack.facts is not None
    drawn = panels(widgets(stack.facts), collect(stack, sampler), period, log_lines(stack))
    return render(drawn, f"serverless-ccm-{stack.config.cluster_name} (devstack)"), drawn


def empty_widgets(drawn: list[dict[str, Any]]) -> list[str]:
    return [p["title"] for p in drawn if not any(line["points"] for line in p["lines"])]


def join_node(stack: Stack) -> str:
    """A new instance and its Node as a kubelet with --cloud-provider=external registers it (uninitialized taint,
    NotReady): the nodes Lambda initialises it."""
    assert stack.world is not None
    az = stack.world.azs[0]
    inst = stack.aws("ec2").run_instances(
        ImageId=NODE_IMAGE_ID,
        InstanceType="m5.large",
        MinCount=1,
        MaxCount=1,
        SubnetId=stack.world.private_subnets[az],
        SecurityGroupIds=[stack.world.node_sg_id],
    )["Instances"][0]
    name: str = inst["PrivateDnsName"]
    body = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
        "spec": {"taints": [{"key": UNINITIALIZED_TAINT, "effect": "NoSchedule"}]},
        "status": {"conditions": [{"type": "Ready", "status": "False", "reason": "KubeletNotReady"}]},
    }
    core: Any = stack.core()
    core.create_node(body, _preload_content=False)
    return name


def create_service(core: Any, name: str, notes: dict[str, str]) -> None:
    body = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name, "namespace": "default", "annotations": notes},
        "spec": {"type": "LoadBalancer", "selector": {"app": name}, "ports": [{"name": "http", "port": 80}]},
    }
    core.create_namespaced_service("default", body, _preload_content=False)


def run_demo(stack: Stack, timeout: float = 90, waves: int = 3, spacing: float = 4.0) -> None:
    """A node joins, Services are created (one converges, one is refused), then `waves` more Services one every
    `spacing` seconds (so each series spans several periods, as a day of a real cluster does), and the sweeper's
    schedule fires once; returns when the node is initialised, every converging Service has its hostname and the
    refused one its Warning."""
    core: Any = stack.core()  # raw JSON answers (_preload_content=False): typed as Any
    node = join_node(stack)
    for name, notes in DEMO_SERVICES:
        create_service(core, name, notes)
    converging = ["hello"]
    for wave in range(1, waves + 1):
        time.sleep(spacing)
        create_service(core, f"web-{wave}", {})
        converging.append(f"web-{wave}")

    def initialised() -> bool:
        found = json.loads(core.read_node(node, _preload_content=False).data)
        return not any(t["key"] == UNINITIALIZED_TAINT for t in found["spec"].get("taints") or [])

    def hostnames() -> bool:
        for name in converging:
            svc = json.loads(core.read_namespaced_service(name, "default", _preload_content=False).data)
            ingress = ((svc.get("status") or {}).get("loadBalancer") or {}).get("ingress") or [{}]
            if not ingress[0].get("hostname"):
                return False
        return True

    def refused() -> bool:
        events = json.loads(core.list_namespaced_event("default", _preload_content=False).data)["items"]
        return any(e["involvedObject"]["name"] == "typo" and e["type"] == "Warning" for e in events)

    stack.wait_for(initialised, timeout=timeout, what="the new node initialised")
    stack.wait_for(hostnames, timeout=timeout, what=f"the hostnames of {converging}")
    stack.wait_for(refused, timeout=timeout, what="typo's Warning")
    assert stack.runner is not None and stack.facts is not None
    if "SweeperFunction" in stack.facts.functions:
        scheduled = {"version": "0", "id": str(uuid.uuid4()), "detail-type": "Scheduled Event", "source": "aws.events"}
        stack.runner.invoke("SweeperFunction", {**scheduled, "time": time.strftime("%Y-%m-%dT%H:%M:%SZ")})


def dashboard(stack: Stack, out: Path, period: int | None = 10, timeout: float = 90) -> list[str]:
    """Run the demo on a started stack, wait (up to `timeout`) until every widget has data, write the page; returns
    the titles of widgets still without data."""
    sampler = QueueSampler(stack.queue_urls, stack.config.region).start()
    try:
        run_demo(stack, timeout)
        deadline = time.monotonic() + timeout
        while True:
            text, drawn = page(stack, sampler, period)
            missing = empty_widgets(drawn)
            if not missing or time.monotonic() > deadline:
                break
            log.info("waiting for data in %s", missing)
            time.sleep(1)
    finally:
        sampler.stop()
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text)
    return missing
