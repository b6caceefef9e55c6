"""Reading the world the way a user would: Service status from the API, load balancers from (moto) AWS."""

from __future__ import annotations

import json
from typing import Any

from botocore.exceptions import ClientError
from kubernetes import client

from devstack.stack import Stack


def create_service(stack: Stack, name: str, ports: list[int], **spec: Any) -> dict[str, Any]:
    body = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "type": "LoadBalancer",
            "selector": {"app": name},
            "ports": [{"name": f"p{p}", "port": p, "targetPort": 8080} for p in ports],
            **spec,
        },
    }
    return json.loads(stack.core().create_namespaced_service("default", body, _preload_content=False).data)


def read_service(stack: Stack, name: str) -> dict[str, Any] | None:
    try:
        return json.loads(stack.core().read_namespaced_service(name, "default", _preload_content=False).data)
    except client.ApiException as err:
        if err.status == 404:
            return None
        raise


def hostname(stack: Stack, name: str) -> str | None:
    svc = read_service(stack, name)
    ingress = ((svc or {}).get("status") or {}).get("loadBalancer", {}).get("ingress") or []
    return ingress[0].get("hostname") if ingress else None


def lb_name(svc: dict[str, Any]) -> str:
    return ("a" + svc["metadata"]["uid"].replace("-", ""))[:32]


def aws_state(stack: Stack, svc: dict[str, Any]) -> dict[str, Any] | None:
    """The NLB of a Service as AWS reports it: {dns, listeners: {port: (protocol, tg port, [targets])}}."""
    elbv2 = stack.aws("elbv2")
    try:
        lb = elbv2.describe_load_balancers(Names=[lb_name(svc)])["LoadBalancers"][0]
    except elbv2.exceptions.LoadBalancerNotFoundException:
        return None
    listeners: dict[int, Any] = {}
    try:
        for listener in elbv2.describe_listeners(LoadBalancerArn=lb["LoadBalancerArn"])["Listeners"]:
            tg_arn = listener["DefaultActions"][0]["TargetGroupArn"]
            tg = elbv2.describe_target_groups(TargetGroupArns=[tg_arn])["TargetGroups"][0]
            health = elbv2.describe_target_health(TargetGroupArn=tg_arn)["TargetHealthDescriptions"]
            listeners[listener["Port"]] = (listener["Protocol"], tg["Port"], sorted(h["Target"]["Id"] for h in health))
    except ClientError:
        return {"dns": lb["DNSName"], "listeners": "changing"}  # read while the reconciler was mid-way
    return {"dns": lb["DNSName"], "listeners": listeners}


def cluster_resources(stack: Stack) -> dict[str, list[str]]:
    """Every LB and target group tagged for the cluster (what a leak check looks at)."""
    tagging = stack.aws("resourcegroupstaggingapi")
    key = f"kubernetes.io/cluster/{stack.config.cluster_name}"
    found: dict[str, list[str]] = {"loadbalancer": [], "targetgroup": []}
    for kind in found:
        pages = tagging.get_paginator("get_resources").paginate(
            TagFilters=[{"Key": key}], ResourceTypeFilters=[f"elasticloadbalancing:{kind}"]
        )
        for page in pages:
            found[kind] += [r["ResourceARN"] for r in page["ResourceTagMappingList"]]
    return found


def node_ports(svc: dict[str, Any]) -> dict[int, int]:
    return {p["port"]: p["nodePort"] for p in svc["spec"]["ports"]}


def dlq_depth(stack: Stack) -> int:
    attrs = stack.sqs().get_queue_attributes(
        QueueUrl=stack.queue_urls["ServicesDLQ"], AttributeNames=["ApproximateNumberOfMessages"]
    )["Attributes"]
    return int(attrs["ApproximateNumberOfMessages"])
