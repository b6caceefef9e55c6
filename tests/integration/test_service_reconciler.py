"""The service reconcile end to end in one process: the Kubernetes API emulator over HTTP (real client) and
in-process moto, driven through the real Lambda handler with Lambda-shaped SQS records."""

from __future__ import annotations

import hashlib
import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
from kubernetes import client, config

from ccm.aws import faults
from ccm.aws.clients import AwsClients, CallCounter
from ccm.config import Settings
from ccm.contracts import kube as p
from ccm.contracts.messages import delta_for
from ccm.k8s.kube import Kube
from ccm.k8s.kubeconfig import from_kubeconfig
from ccm.wiring.services import build_service_runtime
from devstack.k8s_emulator import Emulator
from tests.integration.conftest import CLUSTER, World


class Ctx:
    function_name = "svc"
    function_version = "$LATEST"
    invoked_function_arn = "arn:aws:lambda:us-east-1:123456789012:function:svc"
    memory_limit_in_mb = 512
    aws_request_id = "req"
    log_group_name = "g"
    log_stream_name = "s"

    def get_remaining_time_in_millis(self) -> int:
        return 60_000


@pytest.fixture
def emulator(tmp_path: Path) -> Iterator[Emulator]:
    emu = Emulator().start()
    emu.write_kubeconfig(str(tmp_path / "kubeconfig"))
    yield emu
    emu.stop()


@pytest.fixture
def stack(world: World, emulator: Emulator, tmp_path: Path) -> Iterator[dict[str, Any]]:
    for n in world.nodes():
        emulator.create(n)
    # The nodes' (default) security group is the cluster's node group, as the deploy guide asks: tagged.
    ec2 = world.clients.session.client("ec2")
    node_group = ec2.describe_security_groups(
        Filters=[{"Name": "vpc-id", "Values": [world.vpc_id]}, {"Name": "group-name", "Values": ["default"]}]
    )["SecurityGroups"][0]["GroupId"]
    ec2.create_tags(Resources=[node_group], Tags=[{"Key": f"kubernetes.io/cluster/{CLUSTER}", "Value": "owned"}])
    api_client = config.new_client_from_config(config_file=str(tmp_path / "kubeconfig"))
    sqs = boto3.client("sqs", region_name="us-east-1")
    queue_url = sqs.create_queue(QueueName="svc.fifo", Attributes={"FifoQueue": "true", "VisibilityTimeout": "360"})[
        "QueueUrl"
    ]
    runtime = build_service_runtime(
        Settings(CLUSTER, world.vpc_id, default_lb_type="nlb"),
        Kube(from_kubeconfig(str(tmp_path / "kubeconfig"))),
        world.clients,
    )
    yield {
        "core": client.CoreV1Api(api_client),
        "runtime": runtime,
        "sqs": sqs,
        "queue_url": queue_url,
        "kubeconfig": str(tmp_path / "kubeconfig"),
        "world": world,
    }


def create_service(core: client.CoreV1Api, name: str = "web", **spec: Any) -> dict[str, Any]:
    body = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "type": "LoadBalancer",
            "ports": [{"name": "http", "port": 80}, {"name": "https", "port": 443}],
            **spec,
        },
    }
    return json.loads(core.create_namespaced_service("default", body, _preload_content=False).data)


def read(core: client.CoreV1Api, name: str = "web") -> dict[str, Any] | None:
    try:
        return json.loads(core.read_namespaced_service(name, "default", _preload_content=False).data)
    except client.ApiException as err:
        if err.status == 404:
            return None
        raise


def sqs_event(stack: dict[str, Any], bodies: list[str], group: str = "default/web") -> dict[str, Any]:
    """Send the bodies to the FIFO queue, receive them, and shape them exactly as Lambda does."""
    sqs, url = stack["sqs"], stack["queue_url"]
    for body in bodies:
        sqs.send_message(QueueUrl=url, MessageBody=body, MessageGroupId=group, MessageDeduplicationId=str(uuid.uuid4()))
    return receive_event(stack)


def receive_event(stack: dict[str, Any]) -> dict[str, Any]:
    """Receive what is visible and shape it exactly as Lambda does."""
    sqs, url = stack["sqs"], stack["queue_url"]
    received = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, MessageSystemAttributeNames=["All"])
    arn = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    return {
        "Records": [
            {
                "messageId": m["MessageId"],
                "receiptHandle": m["ReceiptHandle"],
                "body": m["Body"],
                "attributes": m["Attributes"],
                "messageAttributes": {},
                "md5OfBody": hashlib.md5(m["Body"].encode()).hexdigest(),
                "eventSource": "aws:sqs",
                "eventSourceARN": arn,
                "awsRegion": "us-east-1",
            }
            for m in received.get("Messages", [])
        ]
    }


def invoke(stack: dict[str, Any], bodies: list[str]) -> dict[str, Any]:
    """Like the ESM: invoke, then delete the records that did not fail."""
    event = sqs_event(stack, bodies)
    response: dict[str, Any] = stack["runtime"].handle_batch(event, Ctx())
    failed = {f["itemIdentifier"] for f in response["batchItemFailures"]}
    for record in event["Records"]:
        if record["messageId"] not in failed:
            stack["sqs"].delete_message(QueueUrl=stack["queue_url"], ReceiptHandle=record["receiptHandle"])
    return response


def test_create_update_delete_round_trip(stack: dict[str, Any], world: World, emulator: Emulator):
    core = stack["core"]
    svc = create_service(core)
    assert invoke(stack, [delta_for("Service", "ADDED", svc).to_body()]) == {"batchItemFailures": []}

    live = read(core)
    assert p.FINALIZER in live["metadata"]["finalizers"]
    hostname = live["status"]["loadBalancer"]["ingress"][0]["hostname"]
    elbv2 = world.clients.session.client("elbv2")
    lb = elbv2.describe_load_balancers(Names=[("a" + live["metadata"]["uid"].replace("-", ""))[:32]])
    assert lb["LoadBalancers"][0]["DNSName"] == hostname
    events = json.loads(core.list_namespaced_event("default", _preload_content=False).data)["items"]
    assert sorted(e["reason"] for e in events) == ["EnsuredLoadBalancer", "EnsuringLoadBalancer"]

    # A duplicate delivery: no status write, no mutating AWS call.
    emulator.clear_log()
    world.clients.counter.reset_thread()
    invoke(stack, [delta_for("Service", "MODIFIED", live).to_body()])
    assert not [r for r in emulator.request_log if r["method"] == "PATCH" and "/services/" in r["path"]]

    # Update ports
    core.patch_namespaced_service(
        "web",
        "default",
        {"spec": {"ports": [{"name": "http", "port": 8080}]}},
        _content_type="application/merge-patch+json",
    )
    live = read(core)
    invoke(stack, [delta_for("Service", "MODIFIED", live).to_body()])
    listeners = elbv2.describe_listeners(LoadBalancerArn=lb["LoadBalancers"][0]["LoadBalancerArn"])["Listeners"]
    assert [ls["Port"] for ls in listeners] == [8080]
    assert len(elbv2.describe_target_groups()["TargetGroups"]) == 1

    # Delete: finalizer keeps the object until the LB is gone.
    core.delete_namespaced_service("web", "default")
    deleting = read(core)
    assert deleting is not None and deleting["metadata"].get("deletionTimestamp")
    emulator.clear_log()
    invoke(stack, [delta_for("Service", "MODIFIED", deleting).to_body()])
    assert read(core) is None
    assert elbv2.describe_load_balancers()["LoadBalancers"] == []
    assert elbv2.describe_target_groups()["TargetGroups"] == []
    # As a real server needs it: the status is cleared while the Service still exists, then the finalizer goes
    # (the other way round, the status PATCH of a Service that is gone gets a 404).
    writes = [(r["path"].rsplit("/", 1)[-1], r["status"]) for r in emulator.request_log if r["method"] == "PATCH"]
    assert writes == [("status", 200), ("web", 200)]


def test_malformed_message_fails_alone_and_becomes_visible_at_once(stack: dict[str, Any]):
    core = stack["core"]
    svc = create_service(core, "good")
    event = sqs_event(stack, ["{not json"], group="bad")
    event["Records"] += sqs_event(stack, [delta_for("Service", "ADDED", svc).to_body()], group="default/good")[
        "Records"
    ]
    response = stack["runtime"].handle_batch(event, Ctx())
    assert response["batchItemFailures"] == [{"itemIdentifier": event["Records"][0]["messageId"]}]
    assert read(core, "good")["status"]["loadBalancer"]["ingress"]
    # Visible again immediately (visibility 0), so redrive to the DLQ does not wait 6 minutes per attempt.
    again = stack["sqs"].receive_message(QueueUrl=stack["queue_url"], MaxNumberOfMessages=10)
    assert [m["Body"] for m in again.get("Messages", [])] == ["{not json"]


def test_invalid_service_gets_a_warning_and_no_aws_change(stack: dict[str, Any], world: World):
    core = stack["core"]
    svc = create_service(core, "sctp", ports=[{"name": "s", "port": 7777, "protocol": "SCTP"}])
    world.clients.counter.reset_thread()
    response = invoke(stack, [delta_for("Service", "ADDED", svc).to_body()])
    assert response == {"batchItemFailures": []}  # not retried: the Service must change first
    assert CallCounter.mutating(world.clients.counter.thread_calls()) == 0
    events = json.loads(core.list_namespaced_event("default", _preload_content=False).data)["items"]
    warnings = [e for e in events if e["type"] == "Warning"]
    assert warnings and warnings[0]["reason"] == "SyncLoadBalancerFailed"  # upstream's reason for every failure
    assert "SCTP" in warnings[0]["message"]


def test_recreated_service_deletes_the_old_uids_lb_first(stack: dict[str, Any], world: World):
    core = stack["core"]
    old = create_service(core)
    invoke(stack, [delta_for("Service", "ADDED", old).to_body()])
    # Deleted and re-created under the same name while we were not looking (finalizer removed by force).
    core.patch_namespaced_service(
        "web", "default", {"metadata": {"finalizers": None}}, _content_type="application/merge-patch+json"
    )
    core.delete_namespaced_service("web", "default")
    new = create_service(core)
    invoke(stack, [delta_for("Service", "DELETED", old).to_body()])
    elbv2 = world.clients.session.client("elbv2")
    names = [lb["LoadBalancerName"] for lb in elbv2.describe_load_balancers()["LoadBalancers"]]
    assert names == [("a" + new["metadata"]["uid"].replace("-", ""))[:32]]


def test_a_failing_delete_of_an_earlier_uid_is_retried_with_backoff(
    stack: dict[str, Any], world: World, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    core = stack["core"]
    old = create_service(core)
    invoke(stack, [delta_for("Service", "ADDED", old).to_body()])
    core.patch_namespaced_service(
        "web", "default", {"metadata": {"finalizers": None}}, _content_type="application/merge-patch+json"
    )
    core.delete_namespaced_service("web", "default")
    create_service(core)
    # The Lambda dies right after deleting the old UID's LB (before its target groups and security group).
    faults_file = tmp_path / "faults.json"
    faults.arm(faults_file, {"elasticloadbalancing:DeleteLoadBalancer": 1})
    monkeypatch.setenv(faults.ENV_VAR, str(faults_file))
    kube = stack["runtime"].reconciler.kube
    stack["runtime"] = build_service_runtime(
        Settings(CLUSTER, world.vpc_id, default_lb_type="nlb"), kube, AwsClients(region="us-east-1")
    )
    response = invoke(stack, [delta_for("Service", "DELETED", old).to_body()])
    assert len(response["batchItemFailures"]) == 1
    # Retried after the backoff (5 s), not at once: an immediate retry loop would reach the DLQ in seconds.
    assert "Messages" not in stack["sqs"].receive_message(QueueUrl=stack["queue_url"])


def test_failure_sets_backoff_visibility(stack: dict[str, Any], world: World, emulator: Emulator):
    core = stack["core"]
    svc = create_service(core)
    emulator.faults.fail_next(5, status=500, method="GET", path_regex=r"/api/v1/nodes")
    response = invoke(stack, [delta_for("Service", "ADDED", svc).to_body()])
    assert len(response["batchItemFailures"]) == 1
    # Backoff of the first attempt is 5 s: not visible now.
    assert "Messages" not in stack["sqs"].receive_message(QueueUrl=stack["queue_url"])
    events = json.loads(core.list_namespaced_event("default", _preload_content=False).data)["items"]
    assert any(e["reason"] == "SyncLoadBalancerFailed" for e in events)


def test_node_without_members_warns(stack: dict[str, Any], emulator: Emulator):
    core = stack["core"]
    for n in json.loads(core.list_node(_preload_content=False).data)["items"]:
        core.patch_node(n["metadata"]["name"], {"metadata": {"labels": {p.EXCLUDE_LABEL: "true"}}})
    svc = create_service(core)
    invoke(stack, [delta_for("Service", "ADDED", svc).to_body()])
    events = json.loads(core.list_namespaced_event("default", _preload_content=False).data)["items"]
    assert "UnAvailableLoadBalancer" in [e["reason"] for e in events]


def _warnings(core: client.CoreV1Api) -> list[dict[str, Any]]:
    events = json.loads(core.list_namespaced_event("default", _preload_content=False).data)["items"]
    return [e for e in events if e["type"] == "Warning"]


def test_settings_fixed_at_creation_warn_and_keep_the_live_nlb(stack: dict[str, Any], world: World):
    core = stack["core"]
    ec2 = world.clients.session.client("ec2")
    subnets = sorted(
        s["SubnetId"] for s in ec2.describe_subnets(Filters=[{"Name": "vpc-id", "Values": [world.vpc_id]}])["Subnets"]
    )
    prefix = "service.beta.kubernetes.io/aws-load-balancer-"
    body = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "web", "namespace": "default", "annotations": {prefix + "subnets": subnets[0]}},
        "spec": {"type": "LoadBalancer", "ports": [{"name": "http", "port": 80}]},
    }
    svc = json.loads(core.create_namespaced_service("default", body, _preload_content=False).data)
    invoke(stack, [delta_for("Service", "ADDED", svc).to_body()])
    elbv2 = world.clients.session.client("elbv2")
    name = ("a" + svc["metadata"]["uid"].replace("-", ""))[:32]
    before = elbv2.describe_load_balancers(Names=[name])["LoadBalancers"][0]
    assert [z["SubnetId"] for z in before["AvailabilityZones"]] == [subnets[0]]

    annotations = {prefix + "subnets": subnets[1], prefix + "scheme": "internal", prefix + "healthcheck-interval": "30"}
    core.patch_namespaced_service("web", "default", {"metadata": {"annotations": annotations}})
    live = read(core)
    assert invoke(stack, [delta_for("Service", "MODIFIED", live).to_body()]) == {"batchItemFailures": []}

    after = elbv2.describe_load_balancers(Names=[name])["LoadBalancers"][0]
    assert after["LoadBalancerArn"] == before["LoadBalancerArn"]  # never a silent re-create
    assert [z["SubnetId"] for z in after["AvailabilityZones"]] == [subnets[0]] and after["Scheme"] == "internet-facing"
    (group,) = elbv2.describe_target_groups(LoadBalancerArn=after["LoadBalancerArn"])["TargetGroups"]
    assert group["HealthCheckIntervalSeconds"] == 30  # what can change was changed in place
    fixed = sorted(w["message"] for w in _warnings(core) if w["reason"] == "LoadBalancerSettingFixed")
    assert len(fixed) == 2
    assert f"aws-load-balancer-subnets asks for {subnets[1]}" in fixed[0]
    assert "cannot change to internal" in fixed[1]


def test_nodes_in_a_zone_without_a_usable_subnet_get_a_warning_naming_the_tags(
    stack: dict[str, Any], world: World, emulator: Emulator
):
    ec2 = world.clients.session.client("ec2")
    vpc = world.vpc_id
    lonely = ec2.create_subnet(VpcId=vpc, CidrBlock="10.0.9.0/24", AvailabilityZone="us-east-1c")["Subnet"]
    instance = ec2.run_instances(ImageId="ami-12c6146b", MinCount=1, MaxCount=1, SubnetId=lonely["SubnetId"])
    iid = instance["Instances"][0]["InstanceId"]
    emulator.create(
        {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": "far", "labels": {"topology.kubernetes.io/zone": "us-east-1c"}},
            "spec": {"providerID": f"aws:///us-east-1c/{iid}"},
            "status": {"conditions": [{"type": "Ready", "status": "True"}]},
        }
    )
    core = stack["core"]
    svc = create_service(core)
    assert invoke(stack, [delta_for("Service", "ADDED", svc).to_body()]) == {"batchItemFailures": []}
    assert read(core)["status"]["loadBalancer"]["ingress"]  # created anyway, in the zones it can use
    (warning,) = [w for w in _warnings(core) if w["reason"] == "UnavailableSubnets"]
    assert "no usable public subnet in us-east-1c where nodes run" in warning["message"]
    assert "kubernetes.io/role/elb=1 and kubernetes.io/cluster/" in warning["message"]


def _notices(core: client.CoreV1Api) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for w in _warnings(core):
        if w["reason"] in ("AnnotationIgnored", "AnnotationDiffers"):
            out.setdefault(w["reason"], []).append(w["message"])
    return out


def test_annotations_read_differently_upstream_are_named_in_warnings_once_per_change(
    stack: dict[str, Any], world: World
):
    core, prefix = stack["core"], "service.beta.kubernetes.io/aws-load-balancer-"
    annotations = {
        prefix + "alpn-policy": "HTTP2Preferred",  # the Load Balancer Controller's
        prefix + "name": "my-nlb",
        prefix + "listener-attributes.TCP-80": "tcp.idle_timeout.seconds=400",
        prefix + "healthcheck-intervall": "10",  # a typo
        prefix + "connection-idle-timeout": "120",  # Classic ELBs only
        prefix + "proxy-protocol": "*",  # cloud-provider-aws reads it for Classic ELBs only
    }
    body = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "web", "namespace": "default", "annotations": annotations},
        "spec": {"type": "LoadBalancer", "ports": [{"name": "http", "port": 80}]},
    }
    svc = json.loads(core.create_namespaced_service("default", body, _preload_content=False).data)
    assert invoke(stack, [delta_for("Service", "ADDED", svc).to_body()]) == {"batchItemFailures": []}

    live = read(core)
    assert live["status"]["loadBalancer"]["ingress"]  # a warning, never a failure
    notices = _notices(core)
    (ignored,) = notices["AnnotationIgnored"]
    assert f"{prefix}alpn-policy: only the AWS Load Balancer Controller understands it; ignored" in ignored
    assert "TLS listeners get no ALPN policy" in ignored
    assert f"{prefix}name: only the AWS Load Balancer Controller" in ignored
    assert f"{prefix}listener-attributes.TCP-80: only the AWS Load Balancer Controller" in ignored
    assert f"{prefix}healthcheck-intervall: unknown" in ignored
    assert f"{prefix}connection-idle-timeout: applies to Classic ELBs only, ignored on this NLB" in ignored
    (differs,) = notices["AnnotationDiffers"]
    assert differs.startswith(
        f"{prefix}scheme not set: internet-facing (the cloud-provider-aws default; the AWS Load Balancer "
        "Controller would make it internal)"
    )
    assert f"{prefix}proxy-protocol: applied to this NLB as target-group attribute proxy_protocol_v2.enabled" in differs

    # The periodic resync says nothing new: the Service did not change.
    invoke(stack, [delta_for("Service", "SYNC", live).to_body()])
    assert _notices(core) == notices

    # Said again when the Service changes, now without what was fixed.
    fixed = {prefix + "scheme": "internet-facing", prefix + "alpn-policy": None, prefix + "name": None}
    core.patch_namespaced_service("web", "default", {"metadata": {"annotations": fixed}})
    invoke(stack, [delta_for("Service", "MODIFIED", read(core)).to_body()])
    after = _notices(core)
    assert len(after["AnnotationIgnored"]) == 2 and len(after["AnnotationDiffers"]) == 2
    latest_ignored = next(m for m in after["AnnotationIgnored"] if m != ignored)
    latest_differs = next(m for m in after["AnnotationDiffers"] if m != differs)
    assert "alpn-policy" not in latest_ignored and "listener-attributes.TCP-80" in latest_ignored
    assert "scheme not set" not in latest_differs and "proxy-protocol" in latest_differs


def test_a_classic_elb_with_nlb_only_annotations_is_told_they_are_ignored(stack: dict[str, Any], world: World):
    core, prefix = stack["core"], "service.beta.kubernetes.io/aws-load-balancer-"
    annotations = {prefix + "type": "clb", prefix + "ip-address-type": "dualstack"}
    body = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "web", "namespace": "default", "annotations": annotations},
        "spec": {"type": "LoadBalancer", "ports": [{"name": "http", "port": 80}]},
    }
    svc = json.loads(core.create_namespaced_service("default", body, _preload_content=False).data)
    assert invoke(stack, [delta_for("Service", "ADDED", svc).to_body()]) == {"batchItemFailures": []}
    assert _notices(core) == {
        "AnnotationIgnored": [f"{prefix}ip-address-type: applies to NLBs only, ignored on this CLB"]
    }  # no scheme notice: the Load Balancer Controller makes no Classic ELBs


def test_a_repeated_warning_is_one_event_whose_count_grows(stack: dict[str, Any]):
    """client-go's recorder aggregates repeats; a Lambda keeps no recorder, so the Event's name is its key: however
    many times (and in however many execution environments) a Service fails the same way, one Event counts them.
    It names us as its source, never EKS's built-in service-controller, and keeps upstream's reason."""
    core = stack["core"]
    svc = create_service(core, "sctp", ports=[{"name": "s", "port": 7777, "protocol": "SCTP"}])
    for _ in range(3):
        invoke(stack, [delta_for("Service", "MODIFIED", svc).to_body()])
    # A cold execution environment (no memory of the Event): the create meets it, and it counts on from there.
    cold = build_service_runtime(
        Settings(CLUSTER, stack["world"].vpc_id, default_lb_type="nlb"),
        Kube(from_kubeconfig(stack["kubeconfig"])),
        stack["world"].clients,
    )
    cold.handle_batch(sqs_event(stack, [delta_for("Service", "MODIFIED", svc).to_body()]), Ctx())
    events = json.loads(core.list_namespaced_event("default", _preload_content=False).data)["items"]
    (warning,) = [e for e in events if e["reason"] == "SyncLoadBalancerFailed"]
    assert warning["count"] == 4 and warning["type"] == "Warning" and "SCTP" in warning["message"]
    assert warning["source"]["component"] == warning["reportingComponent"] == "serverless-ccm/service-controller"
    assert warning["firstTimestamp"] <= warning["lastTimestamp"]
    assert len({(e["type"], e["reason"]) for e in events}) == len(events)  # nothing said twice
    assert sum(e["count"] for e in events) == 4 * len(events)  # each as often as it happened


def test_a_high_risk_port_open_to_the_internet_is_a_warning_and_the_lb_is_still_made(stack: dict[str, Any]):
    core = stack["core"]
    svc = create_service(core, "ssh", ports=[{"name": "ssh", "port": 22, "protocol": "TCP"}])
    assert invoke(stack, [delta_for("Service", "ADDED", svc).to_body()]) == {"batchItemFailures": []}
    assert read(core, "ssh")["status"]["loadBalancer"]["ingress"][0]["hostname"]
    events = json.loads(core.list_namespaced_event("default", _preload_content=False).data)["items"]
    (warning,) = [e for e in events if e["reason"] == "HighRiskPortOpenToInternet"]
    assert warning["type"] == "Warning" and "22/TCP is open to 0.0.0.0/0" in warning["message"]
    assert "Security Hub EC2.19" in warning["message"]
    # A resync of the unchanged Service does not repeat it.
    invoke(stack, [delta_for("Service", "SYNC", read(core, "ssh")).to_body()])
    events = json.loads(core.list_namespaced_event("default", _preload_content=False).data)["items"]
    assert [e["count"] for e in events if e["reason"] == "HighRiskPortOpenToInternet"] == [1]
