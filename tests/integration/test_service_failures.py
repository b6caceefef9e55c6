"""How a failed reconcile is said, through the real handler (emulator over HTTP + in-process
moto): every reference a Service names is read before the first write; what AWS-side changes can cure is a
Warning on every attempt and a retry with backoff, what only the author can cure is a Warning without retry;
every failure is logged with the Service key; the reason is always upstream's `SyncLoadBalancerFailed`."""

from __future__ import annotations

import json
import logging
from typing import Any

import boto3
import pytest

from ccm.aws import lbconfig as a
from ccm.contracts.messages import delta_for
from devstack.k8s_emulator import Emulator
from tests.factories import service
from tests.integration.conftest import CLUSTER, REGION, World
from tests.integration.test_service_reconciler import (  # noqa: F401  (emulator, stack: fixtures)
    Ctx,
    create_service,
    emulator,
    read,
    receive_event,
    sqs_event,
    stack,
)

IAM_CERT = "arn:aws:iam::123456789012:server-certificate/web-tls"
MISSING_SG = "sg-0123456789abcdef0"
MISSING_SUBNET = "subnet-0123456789abcdef0"
MISSING_EIP = "eipalloc-0123456789abcdef0"
CERT_PEM = "-----BEGIN CERTIFICATE-----\nMIIB (moto keeps IAM server certificates as given)\n-----END CERTIFICATE-----"
KEY_PEM = "-----BEGIN PRIVATE KEY-----\nMIIE\n-----END PRIVATE KEY-----"


def aws_changes(world: World) -> dict[str, int]:
    """Calls that change load balancers or security groups (the handler's own SQS bookkeeping is no AWS change)."""
    calls = world.clients.counter.thread_calls()
    return {
        op: n
        for op, n in calls.items()
        if op.split(":")[0] in ("elb", "elbv2", "ec2") and not op.split(":")[1].startswith(("Describe", "Get"))
    }


def warnings_of(world_: dict[str, Any], svc: dict[str, Any]) -> list[dict[str, Any]]:
    """Warnings about this Service, matched by UID: Events outlive their object (a predecessor of the same name)."""
    events = json.loads(world_["core"].list_namespaced_event("default", _preload_content=False).data)["items"]
    uid = svc["metadata"]["uid"]
    return [e for e in events if e["involvedObject"].get("uid") == uid and e["type"] == "Warning"]


def lb_service(world_: dict[str, Any], name: str, lb_type: str, annotations: dict[str, str]) -> dict[str, Any]:
    svc = create_service(world_["core"], name, ports=[{"name": "https", "port": 443}])
    return (
        json.loads(
            world_["core"]
            .patch_namespaced_service(
                name,
                "default",
                {"metadata": {"annotations": {a.TYPE_ANNOTATION: lb_type, **annotations}}},
                _preload_content=False,
                _content_type="application/merge-patch+json",
            )
            .data
        )
        or svc
    )


def deliver(world_: dict[str, Any], bodies: list[str]) -> tuple[dict[str, Any], list[str]]:
    """Like the ESM: invoke with what is visible, delete what succeeded; returns the failed records' receipts."""
    event = sqs_event(world_, bodies) if bodies else receive_event(world_)
    assert event["Records"], "nothing to deliver"
    response: dict[str, Any] = world_["runtime"].handle_batch(event, Ctx())
    failed = {f["itemIdentifier"] for f in response["batchItemFailures"]}
    for record in event["Records"]:
        if record["messageId"] not in failed:
            world_["sqs"].delete_message(QueueUrl=world_["queue_url"], ReceiptHandle=record["receiptHandle"])
    return response, [r["receiptHandle"] for r in event["Records"] if r["messageId"] in failed]


def backoff_over(world_: dict[str, Any], receipts: list[str]) -> None:
    """The failed records were NOT visible again at once (a backoff was set); end it now instead of sleeping."""
    assert receive_event(world_)["Records"] == []
    for receipt in receipts:
        world_["sqs"].change_message_visibility(
            QueueUrl=world_["queue_url"], ReceiptHandle=receipt, VisibilityTimeout=0
        )


@pytest.mark.parametrize("lb_type", ["nlb", "clb"])
def test_a_missing_certificate_changes_nothing_warns_logs_and_is_cured_by_importing_it(
    stack: dict[str, Any],  # noqa: F811
    world: World,
    lb_type: str,
    caplog: pytest.LogCaptureFixture,
):
    name = f"tls-{lb_type}"
    svc = lb_service(stack, name, lb_type, {a.SSL_CERT_ANNOTATION: IAM_CERT})
    world.clients.counter.reset_thread()
    with caplog.at_level(logging.INFO):
        response, receipts = deliver(stack, [delta_for("Service", "ADDED", svc).to_body()])
    assert len(response["batchItemFailures"]) == 1  # retried: importing the certificate cures it
    assert aws_changes(world) == {}  # no security group made first
    [warning] = warnings_of(stack, svc)
    assert warning["reason"] == "SyncLoadBalancerFailed"
    assert warning["message"].startswith("Error syncing load balancer: ")
    assert a.SSL_CERT_ANNOTATION in warning["message"] and IAM_CERT in warning["message"]
    assert any(f"default/{name}" in r.getMessage() and IAM_CERT in r.getMessage() for r in caplog.records)

    boto3.client("iam", region_name=REGION).upload_server_certificate(
        ServerCertificateName="web-tls", CertificateBody=CERT_PEM, PrivateKey=KEY_PEM
    )
    backoff_over(stack, receipts)
    assert deliver(stack, [])[0] == {"batchItemFailures": []}
    assert (read(stack["core"], name) or {})["status"]["loadBalancer"]["ingress"]


def test_a_mistyped_security_group_is_retried_with_a_warning_each_time_and_nothing_is_created(
    stack: dict[str, Any],  # noqa: F811
    world: World,
):
    """A mistyped security group once went five times into the DLQ without an event or a log line."""
    svc = lb_service(stack, "byo", "nlb", {a.SECURITY_GROUPS_ANNOTATION: MISSING_SG})
    world.clients.counter.reset_thread()
    response, receipts = deliver(stack, [delta_for("Service", "ADDED", svc).to_body()])
    assert len(response["batchItemFailures"]) == 1
    backoff_over(stack, receipts)
    response, _ = deliver(stack, [])
    assert len(response["batchItemFailures"]) == 1
    assert aws_changes(world) == {}
    reasons = [
        (w["reason"], a.SECURITY_GROUPS_ANNOTATION in w["message"] and MISSING_SG in w["message"], w["count"])
        for w in warnings_of(stack, svc)
    ]
    # One per attempt, before any could reach the DLQ: the same Warning, counted (as upstream's recorder does).
    assert reasons == [("SyncLoadBalancerFailed", True, 2)]


def test_a_group_of_another_vpc_is_invalid_not_retried_and_changes_nothing(
    stack: dict[str, Any],  # noqa: F811
    world: World,
):
    ec2 = boto3.client("ec2", region_name=REGION)
    other_vpc = ec2.create_vpc(CidrBlock="10.9.0.0/16")["Vpc"]["VpcId"]
    foreign = ec2.create_security_group(GroupName="elsewhere", Description="x", VpcId=other_vpc)["GroupId"]
    svc = lb_service(stack, "foreign", "clb", {a.EXTRA_SECURITY_GROUPS_ANNOTATION: foreign})
    world.clients.counter.reset_thread()
    response, _ = deliver(stack, [delta_for("Service", "ADDED", svc).to_body()])
    assert response == {"batchItemFailures": []}  # only the author can cure it: not retried until it changes
    assert aws_changes(world) == {}
    [warning] = warnings_of(stack, svc)
    assert warning["reason"] == "SyncLoadBalancerFailed"
    assert f"{a.EXTRA_SECURITY_GROUPS_ANNOTATION}: security group {foreign} is in {other_vpc}" in warning["message"]


@pytest.mark.parametrize("lb_type", ["nlb", "clb"])
def test_an_untagged_node_group_is_a_warning_naming_it_and_the_tag(
    stack: dict[str, Any],  # noqa: F811
    world: World,
    lb_type: str,
):
    """The LB was once reported Ensured while no rule let it reach the nodes, and nothing said so."""
    ec2 = boto3.client("ec2", region_name=REGION)
    tag = f"kubernetes.io/cluster/{CLUSTER}"
    tagged = ec2.describe_security_groups(Filters=[{"Name": "tag-key", "Values": [tag]}])["SecurityGroups"]
    ec2.delete_tags(Resources=[g["GroupId"] for g in tagged], Tags=[{"Key": tag}])
    node_group = ec2.create_security_group(GroupName="nodes", Description="nodes", VpcId=world.vpc_id)["GroupId"]
    for instance in world.instances:  # the nodes' group, created without the cluster tag
        ec2.modify_instance_attribute(InstanceId=instance, Groups=[node_group])
    svc = create_service(stack["core"], f"untagged-{lb_type}", ports=[{"name": "http", "port": 80}])
    svc["metadata"]["annotations"] = {a.TYPE_ANNOTATION: lb_type}
    stack["core"].patch_namespaced_service(
        svc["metadata"]["name"], "default", {"metadata": {"annotations": svc["metadata"]["annotations"]}}
    )
    response, _ = deliver(stack, [delta_for("Service", "ADDED", svc).to_body()])
    assert response == {"batchItemFailures": []}  # the LB is made; what is missing is said
    [warning] = warnings_of(stack, svc)
    assert warning["reason"] == "NodeSecurityGroupNotTagged"
    assert node_group in warning["message"] and f"{tag}=owned" in warning["message"]


@pytest.mark.parametrize("lb_type", ["nlb", "clb"])
def test_a_missing_subnet_changes_nothing_warns_and_is_retried(
    stack: dict[str, Any],  # noqa: F811
    world: World,
    lb_type: str,
):
    ec2 = boto3.client("ec2", region_name=REGION)
    real = ec2.describe_subnets(Filters=[{"Name": "vpc-id", "Values": [world.vpc_id]}])["Subnets"][0]["SubnetId"]
    svc = lb_service(stack, f"subnet-{lb_type}", lb_type, {a.SUBNETS_ANNOTATION: f"{real},{MISSING_SUBNET}"})
    world.clients.counter.reset_thread()
    response, _ = deliver(stack, [delta_for("Service", "ADDED", svc).to_body()])
    assert len(response["batchItemFailures"]) == 1  # retried: the author's IaC may create the subnet
    assert aws_changes(world) == {}  # no security group, load balancer or target group made first
    [warning] = warnings_of(stack, svc)
    assert warning["reason"] == "SyncLoadBalancerFailed"
    assert a.SUBNETS_ANNOTATION in warning["message"] and MISSING_SUBNET in warning["message"]


def test_a_missing_elastic_ip_changes_nothing_warns_and_is_retried(
    stack: dict[str, Any],  # noqa: F811
    world: World,
):
    ec2 = boto3.client("ec2", region_name=REGION)
    subnets = sorted(
        s["SubnetId"] for s in ec2.describe_subnets(Filters=[{"Name": "vpc-id", "Values": [world.vpc_id]}])["Subnets"]
    )
    allocated = ec2.allocate_address(Domain="vpc")["AllocationId"]
    svc = lb_service(
        stack,
        "eips",
        "nlb",
        {a.SUBNETS_ANNOTATION: ",".join(subnets[:2]), a.EIP_ANNOTATION: f"{allocated},{MISSING_EIP}"},
    )
    world.clients.counter.reset_thread()
    response, _ = deliver(stack, [delta_for("Service", "ADDED", svc).to_body()])
    assert len(response["batchItemFailures"]) == 1  # retried: the address may be allocated later
    assert aws_changes(world) == {}
    [warning] = warnings_of(stack, svc)
    assert warning["reason"] == "SyncLoadBalancerFailed"
    assert a.EIP_ANNOTATION in warning["message"] and MISSING_EIP in warning["message"]
    assert allocated not in warning["message"]  # only the missing one is named


def test_an_unreadable_service_is_logged_with_its_key_and_backed_off(
    stack: dict[str, Any],  # noqa: F811
    emulator: Emulator,  # noqa: F811
    caplog: pytest.LogCaptureFixture,
):
    """A failure before the reconciler could report it (the API server unreachable) came back at once, logged by
    Powertools at DEBUG only: five quick receives into the DLQ, silently. Now: a log line with the key, a backoff."""
    svc = create_service(stack["core"], "unread")
    emulator.stop()
    with caplog.at_level(logging.WARNING):
        response, _ = deliver(stack, [delta_for("Service", "ADDED", svc).to_body()])
    assert len(response["batchItemFailures"]) == 1
    assert receive_event(stack)["Records"] == []  # not visible again at once: a backoff was set
    failed = [r for r in caplog.records if r.getMessage() == "reconcile failed"]
    assert [getattr(r, "service_key", None) for r in failed] == ["default/unread"]
    assert "Connection refused" in getattr(failed[0], "error", "")


def test_groups_named_for_an_nlb_made_without_groups_are_not_read(world: World):
    """AWS cannot add groups to an NLB created without them, so the groups a Service names there are never used:
    a missing one must not fail the Service (only references about to be used are verified)."""
    svc = service(annotations={a.TYPE_ANNOTATION: "nlb"})
    world.nlb.ensure_load_balancer(svc, world.nodes())  # no SecurityGroups driver: made without groups
    svc["metadata"]["annotations"][a.SECURITY_GROUPS_ANNOTATION] = MISSING_SG
    world.clients.counter.reset_thread()
    world.nlb.ensure_load_balancer(svc, world.nodes())
    assert not any(op.startswith("ec2:") for op in world.clients.counter.thread_calls())
