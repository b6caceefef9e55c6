# ruff: noqa: F811  (the emulator fixture imported from test_service_reconciler is a parameter here)
"""Issue 23: one desired state per pass. The Service is parsed once per reconcile (ccm.aws.model.build), whatever
the pass does: a creation, a duplicate answered by the checkpoint, a change the checkpoint misses, a host update.
Driven through the real Lambda handler against the emulator and in-process moto, with the checkpoint table."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import replace
from pathlib import Path
from typing import Any
from unittest import mock

import boto3
import pytest
from kubernetes import client, config

from ccm.aws.lbconfig import parse_load_balancer_config
from ccm.aws.table import ClusterTable
from ccm.config import Settings
from ccm.contracts.messages import Delta, delta_for
from ccm.k8s.kube import Kube
from ccm.k8s.kubeconfig import from_kubeconfig
from ccm.wiring.services import build_service_runtime
from devstack.k8s_emulator import Emulator
from tests.integration.conftest import CLUSTER, REGION, World
from tests.integration.test_service_reconciler import create_service, emulator, invoke, read  # noqa: F401

HEALTH_INTERVAL = "service.beta.kubernetes.io/aws-load-balancer-healthcheck-interval"


@pytest.fixture
def stack(world: World, emulator: Emulator, tmp_path: Path) -> Iterator[dict[str, Any]]:
    for n in world.nodes():
        emulator.create(n)
    ec2 = world.clients.session.client("ec2")
    node_group = ec2.describe_security_groups(
        Filters=[{"Name": "vpc-id", "Values": [world.vpc_id]}, {"Name": "group-name", "Values": ["default"]}]
    )["SecurityGroups"][0]["GroupId"]
    ec2.create_tags(Resources=[node_group], Tags=[{"Key": f"kubernetes.io/cluster/{CLUSTER}", "Value": "owned"}])
    boto3.client("dynamodb", region_name=REGION).create_table(
        TableName="members",
        KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}, {"AttributeName": "sk", "KeyType": "RANGE"}],
        AttributeDefinitions=[
            {"AttributeName": "pk", "AttributeType": "S"},
            {"AttributeName": "sk", "AttributeType": "S"},
        ],
        BillingMode="PAY_PER_REQUEST",
    )
    sqs = boto3.client("sqs", region_name=REGION)
    queue_url = sqs.create_queue(QueueName="svc.fifo", Attributes={"FifoQueue": "true", "VisibilityTimeout": "360"})[
        "QueueUrl"
    ]
    runtime = build_service_runtime(
        Settings(CLUSTER, world.vpc_id, default_lb_type="nlb", membership_table="members"),
        Kube(from_kubeconfig(str(tmp_path / "kubeconfig"))),
        world.clients,
        ClusterTable("members", world.clients),
    )
    api_client = config.new_client_from_config(config_file=str(tmp_path / "kubeconfig"))
    yield {"core": client.CoreV1Api(api_client), "runtime": runtime, "sqs": sqs, "queue_url": queue_url}


def parses_in(stack: dict[str, Any], delta: Delta) -> int:
    """How many times one reconcile of `delta` parsed the Service's configuration, wherever it was imported."""
    spy = mock.Mock(wraps=parse_load_balancer_config)
    with ExitStack() as patches:
        for module in list(sys.modules.values()):
            if getattr(module, "parse_load_balancer_config", None) is parse_load_balancer_config:
                patches.enter_context(mock.patch.object(module, "parse_load_balancer_config", spy))
        assert invoke(stack, [delta.to_body()]) == {"batchItemFailures": []}
    return spy.call_count


@pytest.mark.parametrize("lb_type", ["nlb", "clb"])
def test_the_service_is_parsed_once_per_pass(stack: dict[str, Any], lb_type: str) -> None:
    core = stack["core"]
    create_service(core)
    lb_type_annotation = {"service.beta.kubernetes.io/aws-load-balancer-type": lb_type}
    core.patch_namespaced_service("web", "default", {"metadata": {"annotations": lb_type_annotation}})
    svc = read(core)
    assert svc is not None

    assert parses_in(stack, delta_for("Service", "ADDED", svc)) == 1  # creation
    live = read(core)
    assert live is not None and live["status"]["loadBalancer"]["ingress"]
    assert parses_in(stack, delta_for("Service", "MODIFIED", live)) == 1  # a duplicate: the checkpoint answers

    core.patch_namespaced_service("web", "default", {"metadata": {"annotations": {HEALTH_INTERVAL: "20"}}})
    changed = read(core)
    assert changed is not None
    assert parses_in(stack, delta_for("Service", "MODIFIED", changed)) == 1  # the checkpoint misses: a full pass

    hosts = replace(delta_for("Service", "MODIFIED", changed), type="HOSTS", object={"notBefore": 0})
    assert parses_in(stack, hosts) == 1  # a host update (member nodes changed)
