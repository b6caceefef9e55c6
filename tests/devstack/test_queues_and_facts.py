"""devstack.template reads the real template.yaml; create_queues stands its queues up in moto."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from devstack.queues import create_queues
from devstack.sqs_sender import ROLE_IDS
from devstack.template import TemplateError, load_template

ROOT = Path(__file__).resolve().parents[2]
TEMPLATE = ROOT / "template.yaml"


def test_facts_of_the_real_template() -> None:
    facts = load_template(TEMPLATE, {"ClusterName": "facts", "VpcId": "vpc-1"})
    fn = facts.functions["ServiceReconcilerFunction"]
    assert fn.code_dir == ROOT / "functions" / "services"
    assert (fn.handler_module, fn.handler_function) == ("app", "lambda_handler")
    assert fn.handler_path == ROOT / "functions" / "services" / "app.py"
    assert fn.timeout == 60 and fn.memory_size == 512 and fn.runtime == "python3.13"
    assert fn.layer_dirs == (ROOT / "layers" / "ccm",)
    (event,) = fn.sqs_events
    assert event.queue_logical_id == "ServicesQueue"
    assert event.batch_size == 10 and event.report_batch_item_failures
    assert event.maximum_concurrency == 10
    # Globals and function environment merged, parameters and defaults resolved; the queue URL is not known yet.
    assert fn.environment["CLUSTER_NAME"] == "facts"
    assert fn.environment["VPC_ID"] == "vpc-1"
    assert fn.environment["KUBE_AUTH_MODE"] == "eks"
    assert fn.environment["POWERTOOLS_SERVICE_NAME"] == "service-reconciler"  # function overrides Globals
    assert fn.environment["POWERTOOLS_METRICS_NAMESPACE"] == "ServerlessCCM"
    # The senders' role ids (SENDERS_*, ccm/senders.py) are CloudFormation's: the devstack names them (ROLE_IDS).
    assert fn.unresolved == (
        "MEMBERSHIP_TABLE",
        "SERVICES_QUEUE_URL",
        "SENDERS_WATCHER",
        "SENDERS_NODES",
        "SENDERS_SWEEPER",
    )
    resolved = facts.with_resources(
        {"ServicesQueue": "http://q/services", "MembershipTable": "members", **ROLE_IDS}
    ).functions["ServiceReconcilerFunction"]
    assert resolved.environment["SERVICES_QUEUE_URL"] == "http://q/services"
    assert resolved.environment["MEMBERSHIP_TABLE"] == "members"
    assert resolved.unresolved == ()
    assert (
        facts.with_parameters({"ServiceReconcilerConcurrency": 3})
        .functions["ServiceReconcilerFunction"]
        .sqs_events[0]
        .maximum_concurrency
        == 3
    )

    q = facts.queues["ServicesQueue"]
    assert q.name == "facts-ccm-services.fifo" and q.fifo
    assert (q.redrive_target, q.max_receive_count, q.visibility_timeout) == ("ServicesDLQ", 10, 360)
    order = facts.queue_creation_order()
    assert order.index("ServicesDLQ") < order.index("ServicesQueue")
    assert order.index("NodesDLQ") < order.index("NodesQueue")


def test_the_nested_observability_template_gets_the_parents_names() -> None:
    """The alarms and the dashboard are in observability.yaml, nested in template.yaml: read with the parameters the
    parent passes, the names the parent knows arrive resolved and the others as ${Name.Attr} placeholders."""
    facts = load_template(TEMPLATE, {"ClusterName": "facts", "VpcId": "vpc-1", "EnableSweeper": "false"})
    obs = facts.with_resources({"ServiceReconcilerFunction": "facts-svc"}).nested("Observability")
    assert obs.path == ROOT / "observability.yaml" and obs.stack_name == "devstack-Observability"
    assert obs.parameters["ClusterName"] == "facts" and obs.parameters["AlarmEmail"] == ""
    assert obs.parameters["ServiceReconcilerFunctionName"] == "facts-svc"
    assert obs.parameters["ServicesQueueName"] == "${ServicesQueue.QueueName}"
    # Features that are off are passed as "": the nested template leaves their alarms and widgets out.
    assert obs.parameters["SweeperFunctionName"] == "" and obs.parameters["RoutesQueueName"] == ""
    assert obs.resource_property("Dashboard", "DashboardName") == "serverless-ccm-facts-overview"
    body = obs.resource_property("Dashboard", "DashboardBody")
    assert '"FunctionName","facts-svc"' in body and "sweep done" not in body
    assert "SOURCE '${ServiceReconcilerLogGroup}'" in body  # the log widgets' group: a name not given yet
    with pytest.raises(TemplateError):
        facts.nested("ServicesQueue")


def test_unsupported_intrinsics_are_reported(tmp_path: Path) -> None:
    path = tmp_path / "template.yaml"
    path.write_text(
        "Resources:\n  F:\n    Type: AWS::Serverless::Function\n    Properties:\n"
        "      Handler: app.h\n      Timeout: !FindInMap [M, a, b]\n"
    )
    with pytest.raises(TemplateError):
        load_template(path)


def test_create_queues_mirrors_the_template(sqs: Any) -> None:
    facts = load_template(TEMPLATE)
    urls = create_queues(sqs, facts, "queues")
    assert set(urls) == {"ServicesQueue", "ServicesDLQ", "NodesQueue", "NodesDLQ"}
    attrs = {lid: sqs.get_queue_attributes(QueueUrl=u, AttributeNames=["All"])["Attributes"] for lid, u in urls.items()}
    assert urls["ServicesQueue"].endswith("/queues-ccm-services.fifo")
    for lid, a in attrs.items():
        assert a["FifoQueue"] == "true", lid
        assert a["SqsManagedSseEnabled"] == "true", lid
        # EventBridge rules deliver to the nodes queue and cannot set a deduplication id (see template.yaml).
        assert a["ContentBasedDeduplication"] == ("true" if lid == "NodesQueue" else "false"), lid
    for src, dlq in (("ServicesQueue", "ServicesDLQ"), ("NodesQueue", "NodesDLQ")):
        redrive = json.loads(attrs[src]["RedrivePolicy"])
        assert redrive == {"deadLetterTargetArn": attrs[dlq]["QueueArn"], "maxReceiveCount": 10}
        assert attrs[src]["VisibilityTimeout"] == "360"
        assert attrs[src]["MessageRetentionPeriod"] == "345600"
        assert attrs[src]["DeduplicationScope"] == "messageGroup"
        assert attrs[src]["FifoThroughputLimit"] == "perMessageGroupId"
        assert attrs[dlq]["MessageRetentionPeriod"] == "1209600"
    assert create_queues(sqs, facts, "queues") == urls  # idempotent


def test_moto_fifo_redelivers_a_timed_out_group_oldest_first(sqs: Any) -> None:
    """devstack.queues.harden_moto_sqs (applied by start_moto_server): plain moto 5.2 would deliver a2 first."""
    url = sqs.create_queue(QueueName="order.fifo", Attributes={"FifoQueue": "true", "VisibilityTimeout": "1"})[
        "QueueUrl"
    ]
    for i in range(3):
        sqs.send_message(QueueUrl=url, MessageBody=f"a{i}", MessageGroupId="a", MessageDeduplicationId=f"a{i}")
    first = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10)["Messages"]
    assert [m["Body"] for m in first] == ["a0", "a1", "a2"]
    assert sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10).get("Messages", []) == []  # group in flight
    time.sleep(1.1)
    again = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, WaitTimeSeconds=1)["Messages"]
    assert [m["Body"] for m in again] == ["a0", "a1", "a2"]


def test_services_without_class_are_ignored_on_eks_by_default_and_claimed_elsewhere():
    def claim(**params: str) -> set[str]:
        facts = load_template(TEMPLATE, {"ClusterName": "c", "VpcId": "vpc-1", **params})
        return {fn.environment["SERVICES_WITHOUT_CLASS"] for fn in facts.functions.values()}

    secret = {"KubeAuthMode": "kubeconfig-secret", "KubeconfigSecretArn": "arn:aws:secretsmanager:r:1:secret:k"}
    assert claim() == {"ignore"}  # EKS: its control plane serves class-less Services itself
    assert claim(**secret) == {"claim"}  # a self-managed cluster migrating from cloud-provider-aws
    assert claim(ServicesWithoutClass="claim") == {"claim"}
    assert claim(ServicesWithoutClass="ignore", **secret) == {"ignore"}


def test_queues_refuse_messages_over_sqs_default_size(sqs: Any) -> None:
    # SQS's default MaximumMessageSize is 262,144 bytes (CreateQueue API reference); moto's is 1 MiB until patched.
    url = sqs.create_queue(QueueName="size-check")["QueueUrl"]
    assert sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["MaximumMessageSize"])["Attributes"] == {
        "MaximumMessageSize": "262144"
    }
    sqs.send_message(QueueUrl=url, MessageBody="x" * 262_144)
    with pytest.raises(sqs.exceptions.ClientError) as err:
        sqs.send_message(QueueUrl=url, MessageBody="x" * 262_145)
    assert "Message must be shorter than 262144 bytes" in str(err.value)
    raised = sqs.create_queue(QueueName="size-raised", Attributes={"MaximumMessageSize": "1048576"})["QueueUrl"]
    sqs.send_message(QueueUrl=raised, MessageBody="x" * 262_145)
