"""template.yaml: lints clean, translates with aws-sam-translator offline, and has the settings we rely on."""

from __future__ import annotations

import copy
import hashlib
import json
import re
from pathlib import Path
from typing import Any

import pytest
from cfnlint.api import ManualArgs, lint_file
from samtranslator.translator.transform import transform
from samtranslator.yaml_helper import yaml_parse

from ccm.messages import InvalidDelta, parse_delta

ROOT = Path(__file__).resolve().parents[2]
TEMPLATE = ROOT / "template.yaml"
EVENTS = ROOT / "events"
PARAMS = {"ClusterName": "unit", "VpcId": "vpc-0123456789abcdef0"}
PSEUDO = {"AWS::Partition": "aws", "AWS::Region": "us-east-1", "AWS::AccountId": "123456789012"}


class _NoManagedPolicies:
    """samtranslator asks the loader only for managed policies given by NAME; we use none, so never called."""

    def load(self) -> dict[str, str]:
        raise AssertionError("template references a managed policy by name; use an ARN or !Ref")


@pytest.fixture(scope="module")
def raw() -> dict[str, Any]:
    doc: dict[str, Any] = yaml_parse(TEMPLATE.read_text())
    return doc


@pytest.fixture(scope="module")
def translated(raw: dict[str, Any]) -> dict[str, Any]:
    tpl = copy.deepcopy(raw)
    # `sam package` replaces local code paths with S3 URIs before the transform runs; do the same.
    for res in tpl["Resources"].values():
        props = res.get("Properties", {})
        for key in ("CodeUri", "ContentUri"):
            if isinstance(props.get(key), str):
                props[key] = f"s3://artifacts/{props[key].strip('/')}.zip"
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("AWS_DEFAULT_REGION", "us-east-1")  # the translator resolves AWS::Region from the environment
        out: dict[str, Any] = transform(tpl, dict(PARAMS), _NoManagedPolicies())  # type: ignore[arg-type]
    return out


def _of_type(tpl: dict[str, Any], rtype: str) -> dict[str, dict[str, Any]]:
    return {k: v for k, v in tpl["Resources"].items() if v["Type"] == rtype}


def _sub(text: str) -> str:
    values = {**PSEUDO, **PARAMS}
    return re.sub(r"\$\{([^}]+)\}", lambda m: values[m.group(1)], text)


def _statements(translated: dict[str, Any]) -> list[dict[str, Any]]:
    """Every policy statement attached to our roles (inline ones and our customer-managed policies)."""
    statements: list[dict[str, Any]] = []
    for role in _of_type(translated, "AWS::IAM::Role").values():
        for policy in role["Properties"].get("Policies", []):
            for st in policy["PolicyDocument"]["Statement"]:
                statements.append(st["Fn::If"][1] if "Fn::If" in st else st)
    for mp in _of_type(translated, "AWS::IAM::ManagedPolicy").values():
        doc = mp["Properties"]["PolicyDocument"]
        doc = json.loads(_sub(doc["Fn::Sub"])) if isinstance(doc, dict) and "Fn::Sub" in doc else doc
        statements.extend(doc["Statement"])
    return statements


def _actions(st: dict[str, Any]) -> list[str]:
    actions = st["Action"]
    return [actions] if isinstance(actions, str) else list(actions)


def test_cfn_lint_reports_nothing() -> None:
    matches = lint_file(TEMPLATE, config=ManualArgs(regions=["us-east-1"]))
    assert [str(m) for m in matches] == []


def test_translates_to_the_expected_resources(translated: dict[str, Any]) -> None:
    assert len(_of_type(translated, "AWS::Lambda::Function")) == 1
    assert len(_of_type(translated, "AWS::Lambda::LayerVersion")) == 1
    fn = _of_type(translated, "AWS::Lambda::Function")["ServiceReconcilerFunction"]["Properties"]
    assert fn["Runtime"] == "python3.13"
    assert fn["Architectures"] == ["arm64"]
    assert fn["Handler"] == "app.lambda_handler"
    assert fn["LoggingConfig"]["LogFormat"] == "JSON"
    assert len(fn["Layers"]) == 1
    env = fn["Environment"]["Variables"]
    assert set(env) >= {
        "CLUSTER_NAME",
        "VPC_ID",
        "KUBE_AUTH_MODE",
        "KUBECONFIG_SECRET_ARN",
        "LOAD_BALANCER_CLASS",
        "POWERTOOLS_SERVICE_NAME",
        "POWERTOOLS_METRICS_NAMESPACE",
        "POWERTOOLS_LOG_LEVEL",
        "SERVICES_QUEUE_URL",
    }
    assert env["POWERTOOLS_METRICS_NAMESPACE"] == "ServerlessCCM"

    (esm,) = _of_type(translated, "AWS::Lambda::EventSourceMapping").values()
    props = esm["Properties"]
    assert props["EventSourceArn"] == {"Fn::GetAtt": ["ServicesQueue", "Arn"]}
    assert props["BatchSize"] <= 10
    assert props["FunctionResponseTypes"] == ["ReportBatchItemFailures"]
    assert props["ScalingConfig"] == {"MaximumConcurrency": {"Ref": "ServiceReconcilerConcurrency"}}
    assert "MaximumBatchingWindowInSeconds" not in props  # unsupported on FIFO queues


def test_queues_are_fifo_encrypted_and_redriven(translated: dict[str, Any]) -> None:
    queues = _of_type(translated, "AWS::SQS::Queue")
    assert set(queues) == {"ServicesQueue", "ServicesDLQ", "NodesQueue", "NodesDLQ"}
    timeout = _of_type(translated, "AWS::Lambda::Function")["ServiceReconcilerFunction"]["Properties"]["Timeout"]
    for name, queue in queues.items():
        props = queue["Properties"]
        assert props["FifoQueue"] is True, name
        assert props["SqsManagedSseEnabled"] is True, name
        assert props["ContentBasedDeduplication"] is False, name  # the watcher sends explicit ids
        if name.endswith("DLQ"):
            assert "RedrivePolicy" not in props
            continue
        assert props["VisibilityTimeout"] >= 6 * timeout
        assert props["RedrivePolicy"]["maxReceiveCount"] >= 5
        assert props["RedrivePolicy"]["deadLetterTargetArn"] == {"Fn::GetAtt": [f"{name[:-5]}DLQ", "Arn"]}
        assert props["DeduplicationScope"] == "messageGroup"
        assert props["FifoThroughputLimit"] == "perMessageGroupId"


def test_policies_are_least_privilege(translated: dict[str, Any]) -> None:
    statements = _statements(translated)
    assert statements, "no policy statements found"
    all_actions = [a for st in statements for a in _actions(st)]
    assert all(a != "*" and not a.endswith(":*") for a in all_actions), all_actions
    assert "sqs:ChangeMessageVisibility" in all_actions
    assert "sqs:GetQueueUrl" in all_actions  # the handler resolves eventSourceARN to a URL for the backoff
    assert "tag:GetResources" in all_actions  # orphan target groups are found by tag
    assert "eks:DescribeCluster" in all_actions
    cluster_tag = f"kubernetes.io/cluster/{PARAMS['ClusterName']}"
    for st in statements:
        elb_writes = [a for a in _actions(st) if a.startswith("elasticloadbalancing:") and ":Describe" not in a]
        ec2_writes = [a for a in _actions(st) if a.startswith("ec2:") and ":Describe" not in a]
        if not elb_writes and not ec2_writes:
            continue
        if st.get("Sid") == "CreateSecurityGroupsInClusterVpc":
            # CreateSecurityGroup also authorises against the VPC, which carries no request tag: scoped by ARN.
            assert st["Resource"].endswith(f":vpc/{PARAMS['VpcId']}")
            continue
        null = st.get("Condition", {}).get("Null", {})
        tag_keys = {f"aws:RequestTag/{cluster_tag}", f"aws:ResourceTag/{cluster_tag}"}
        assert any(null.get(k) == "false" for k in tag_keys), (st.get("Sid"), elb_writes or ec2_writes)
        if "elasticloadbalancing:AddTags" in elb_writes:
            assert st["Condition"]["StringEquals"]["elasticloadbalancing:CreateAction"]
    required = {
        "elasticloadbalancing:CreateLoadBalancer",
        "elasticloadbalancing:CreateTargetGroup",
        "elasticloadbalancing:CreateListener",
        "elasticloadbalancing:DeleteLoadBalancer",
        "elasticloadbalancing:RegisterTargets",
        "elasticloadbalancing:DeregisterTargets",
        "elasticloadbalancing:ModifyListener",
        "elasticloadbalancing:AddTags",
        "elasticloadbalancing:RemoveTags",
    }
    assert required <= set(all_actions)


def _records(name: str) -> list[dict[str, Any]]:
    records: list[dict[str, Any]] = json.loads((EVENTS / name).read_text())["Records"]
    assert records
    return records


@pytest.mark.parametrize("name", ["service-added.json", "service-deleted.json", "malformed.json"])
def test_sample_events_are_lambda_sqs_fifo_records(name: str) -> None:
    for rec in _records(name):
        assert set(rec) == {
            "messageId",
            "receiptHandle",
            "body",
            "attributes",
            "messageAttributes",
            "md5OfBody",
            "eventSource",
            "eventSourceARN",
            "awsRegion",
        }
        assert rec["md5OfBody"] == hashlib.md5(rec["body"].encode()).hexdigest()
        assert set(rec["attributes"]) == {
            "ApproximateReceiveCount",
            "SentTimestamp",
            "SequenceNumber",
            "MessageGroupId",
            "SenderId",
            "MessageDeduplicationId",
            "ApproximateFirstReceiveTimestamp",
        }
        assert rec["eventSource"] == "aws:sqs"
        assert rec["eventSourceARN"].endswith(".fifo")


@pytest.mark.parametrize(("name", "event_type"), [("service-added.json", "ADDED"), ("service-deleted.json", "DELETED")])
def test_sample_event_bodies_parse(name: str, event_type: str) -> None:
    for rec in _records(name):
        delta = parse_delta(rec["body"])
        assert delta.kind == "Service"
        assert delta.type == event_type
        assert rec["attributes"]["MessageGroupId"] == delta.group_id
        assert rec["attributes"]["MessageDeduplicationId"] == delta.deduplication_id


def test_malformed_event_bodies_do_not_parse() -> None:
    for rec in _records("malformed.json"):
        with pytest.raises(InvalidDelta):
            parse_delta(rec["body"])
