"""template.yaml: lints clean, translates with aws-sam-translator offline, and has the settings we rely on.
observability.yaml (its nested application: alarms and dashboard) is linted here too;
tests/template/test_observability.py translates it and checks how the two fit."""

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

from ccm.aws.security_groups import DELETE_RETRY_SECONDS
from ccm.contracts.messages import InvalidDelta, parse_delta
from ccm.retry import FAILURE_BUDGET_SECONDS, MAX_RECEIVES, budget_seconds, wait_delay

ROOT = Path(__file__).resolve().parents[2]
TEMPLATE = ROOT / "template.yaml"
OBSERVABILITY = ROOT / "observability.yaml"
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


@pytest.mark.parametrize("path", [TEMPLATE, OBSERVABILITY], ids=lambda p: p.name)
def test_cfn_lint_reports_nothing(path: Path) -> None:
    # On template.yaml cfn-lint also checks the parameters given to the nested application against
    # observability.yaml (E3043: none unknown, none missing).
    matches = lint_file(path, config=ManualArgs(regions=["us-east-1"]))
    assert [str(m) for m in matches] == []


def test_translates_to_the_expected_resources(translated: dict[str, Any]) -> None:
    functions = _of_type(translated, "AWS::Lambda::Function")
    # services always; nodes (EnableNodes) and routes (EnableRoutes) are conditional: see test_node_*, test_routes_*
    assert [k for k, f in functions.items() if "Condition" not in f] == [
        "ServiceReconcilerFunction",
        "TeardownFunction",
    ]
    assert functions["NodeReconcilerFunction"]["Condition"] == "NodesEnabled"
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

    services = {"Fn::GetAtt": ["ServicesQueue", "Arn"]}
    (esm,) = [e for e in _of_type(translated, "AWS::Lambda::EventSourceMapping").values()
              if e["Properties"]["EventSourceArn"] == services]  # fmt: skip
    props = esm["Properties"]
    assert props["EventSourceArn"] == {"Fn::GetAtt": ["ServicesQueue", "Arn"]}
    assert props["BatchSize"] <= 10
    assert props["FunctionResponseTypes"] == ["ReportBatchItemFailures"]
    assert props["ScalingConfig"] == {"MaximumConcurrency": {"Ref": "ServiceReconcilerConcurrency"}}
    assert "MaximumBatchingWindowInSeconds" not in props  # unsupported on FIFO queues


def test_queues_are_fifo_encrypted_and_redriven(translated: dict[str, Any]) -> None:
    queues = _of_type(translated, "AWS::SQS::Queue")
    assert set(queues) == {"ServicesQueue", "ServicesDLQ", "NodesQueue", "NodesDLQ", "RoutesQueue", "RoutesDLQ"}
    timeout = _of_type(translated, "AWS::Lambda::Function")["ServiceReconcilerFunction"]["Properties"]["Timeout"]
    for name, queue in queues.items():
        props = queue["Properties"]
        assert props["FifoQueue"] is True, name
        assert props["SqsManagedSseEnabled"] is True, name
        # The watcher sends explicit ids; EventBridge (safety passes, EC2 events) requires content-based ones.
        assert props["ContentBasedDeduplication"] is (name in ("RoutesQueue", "NodesQueue")), name
        if name.endswith("DLQ"):
            assert "RedrivePolicy" not in props
            continue
        assert props["VisibilityTimeout"] >= 6 * timeout
        # The retry policy's receive budget (ccm.retry: waits outlast 15 minutes within it) is the template's.
        assert props["RedrivePolicy"]["maxReceiveCount"] == MAX_RECEIVES, name
        assert props["RedrivePolicy"]["deadLetterTargetArn"] == {"Fn::GetAtt": [f"{name[:-5]}DLQ", "Arn"]}
        assert props["DeduplicationScope"] == "messageGroup"
        assert props["FifoThroughputLimit"] == "perMessageGroupId"


def test_a_wait_on_aws_never_raises_the_queue_age_alarm(raw: dict[str, Any]) -> None:
    """Waiting is not failing: the longest wait schedule (a held security group) fits below the alarm's default,
    and a persistent failure reaches the DLQ (its own alarm) first."""
    default = raw["Parameters"]["QueueAgeAlarmSeconds"]["Default"]
    longest_wait = budget_seconds([wait_delay(n, DELETE_RETRY_SECONDS) for n in range(1, MAX_RECEIVES + 1)])
    assert longest_wait < default and default > FAILURE_BUDGET_SECONDS


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
        tag_keys = {f"aws:RequestTag/{cluster_tag}", f"aws:ResourceTag/{cluster_tag}", f"ec2:ResourceTag/{cluster_tag}"}
        equals = st.get("Condition", {}).get("StringEquals", {})  # a value (the sweeper's "owned") implies presence
        assert any(null.get(k) == "false" or k in equals for k in tag_keys), (st.get("Sid"), elb_writes or ec2_writes)
        if "elasticloadbalancing:AddTags" in elb_writes:
            # Tags go on at creation, or on what already carries the cluster tag (adopting a cloud-provider-aws
            # LB): never the cluster tag onto someone else's resource.
            on_create = st["Condition"].get("StringEquals", {}).get("elasticloadbalancing:CreateAction")
            assert on_create or null.get(f"aws:ResourceTag/{cluster_tag}") == "false", st.get("Sid")
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


# ---- routes (EnableRoutes) ----------------------------------------------------------------------------------------

ROUTES_RESOURCES = {
    "RoutesQueue",
    "RoutesDLQ",
    "RoutesQueuePolicy",
    "RoutesFeedPolicy",
    "RoutesSafetyPassRule",
    "RouteReconcilerFunction",
    "RouteReconcilerFunctionRole",
    "RouteReconcilerFunctionRouteTriggers",
    "RouteReconcilerEc2Policy",
    "RouteReconcilerLogGroup",
}


def test_routes_resources_exist_only_when_enabled(raw: dict[str, Any], translated: dict[str, Any]) -> None:
    params = raw["Parameters"]
    assert (params["EnableRoutes"]["Default"], params["ClusterCidrs"]["Type"]) == ("false", "CommaDelimitedList")
    assert params["ClusterCidrs"]["Default"] == ""
    assert raw["Rules"]["ClusterCidrsNeeded"]["RuleCondition"] == {"Fn::Equals": [{"Ref": "EnableRoutes"}, "true"]}
    conditioned = {k: v.get("Condition") for k, v in translated["Resources"].items() if k in ROUTES_RESOURCES}
    assert conditioned == dict.fromkeys(ROUTES_RESOURCES, "RoutesEnabled")
    assert translated["Resources"]["RouteReconcilerAccessEntry"]["Condition"] == "CreateRoutesAccessEntry"
    env = raw["Globals"]["Function"]["Environment"]["Variables"]
    assert env["ROUTES_QUEUE_URL"] == {"Fn::If": ["RoutesEnabled", {"Ref": "RoutesQueue"}, ""]}


def test_routes_are_serialised_by_one_fifo_group(translated: dict[str, Any]) -> None:
    from ccm.route.trigger import ROUTES_GROUP

    res = translated["Resources"]
    fn = res["RouteReconcilerFunction"]["Properties"]
    assert fn["Environment"]["Variables"]["CLUSTER_CIDRS"] == {"Fn::Join": [",", {"Ref": "ClusterCidrs"}]}
    esm = res["RouteReconcilerFunctionRouteTriggers"]["Properties"]
    assert esm["EventSourceArn"] == {"Fn::GetAtt": ["RoutesQueue", "Arn"]}
    assert esm["FunctionResponseTypes"] == ["ReportBatchItemFailures"]
    assert esm["ScalingConfig"] == {"MaximumConcurrency": 2} and esm["BatchSize"] <= 10
    queue = res["RoutesQueue"]["Properties"]
    assert queue["FifoQueue"] is True and queue["SqsManagedSseEnabled"] is True
    assert queue["VisibilityTimeout"] >= 6 * fn["Timeout"]
    assert queue["RedrivePolicy"] == {
        "deadLetterTargetArn": {"Fn::GetAtt": ["RoutesDLQ", "Arn"]},
        "maxReceiveCount": MAX_RECEIVES,
    }
    assert res["RoutesDLQ"]["Properties"]["FifoQueue"] is True
    rule = res["RoutesSafetyPassRule"]["Properties"]
    assert rule["ScheduleExpression"] == "rate(5 minutes)"
    (target,) = rule["Targets"]
    assert target["Arn"] == {"Fn::GetAtt": ["RoutesQueue", "Arn"]}
    assert target["SqsParameters"] == {"MessageGroupId": ROUTES_GROUP}
    (allow,) = [
        st for st in res["RoutesQueuePolicy"]["Properties"]["PolicyDocument"]["Statement"] if st["Effect"] == "Allow"
    ]
    assert allow["Principal"] == {"Service": "events.amazonaws.com"} and allow["Action"] == "sqs:SendMessage"
    assert allow["Condition"]["ArnEquals"]["aws:SourceArn"] == {"Fn::GetAtt": ["RoutesSafetyPassRule", "Arn"]}


def test_route_writes_are_scoped_to_cluster_tagged_tables_and_instances(translated: dict[str, Any]) -> None:
    doc = translated["Resources"]["RouteReconcilerEc2Policy"]["Properties"]["PolicyDocument"]
    statements = {st["Sid"]: st for st in json.loads(_sub(doc["Fn::Sub"]))["Statement"]}
    tag = {"Null": {f"ec2:ResourceTag/kubernetes.io/cluster/{PARAMS['ClusterName']}": "false"}}
    routes = statements["RoutesInClusterTables"]
    assert sorted(routes["Action"]) == ["ec2:CreateRoute", "ec2:DeleteRoute", "ec2:ReplaceRoute"]
    assert routes["Resource"] == "arn:aws:ec2:us-east-1:123456789012:route-table/*"
    assert routes["Condition"] == tag
    sdc = statements["SourceDestCheckOnClusterInstances"]
    assert (sdc["Action"], sdc["Resource"]) == (
        "ec2:ModifyInstanceAttribute",
        "arn:aws:ec2:us-east-1:123456789012:instance/*",
    )
    # SourceDestCheck only (ec2:Attribute), not any attribute of a cluster instance (user data, instance type...).
    assert sdc["Condition"] == {**tag, "StringEquals": {"ec2:Attribute": "SourceDestCheck"}}
    role = translated["Resources"]["RouteReconcilerFunctionRole"]["Properties"]
    inline = [st for pol in role["Policies"] for st in pol["PolicyDocument"]["Statement"]]
    reads = next(st for st in inline if st.get("Sid") == "ReadRoutesAndInstances")
    assert reads["Action"] == ["ec2:DescribeRouteTables", "ec2:DescribeInstances"]
    assert {"Ref": "RouteReconcilerEc2Policy"} in role["ManagedPolicyArns"]
    feed = translated["Resources"]["RoutesFeedPolicy"]["Properties"]
    assert feed["Roles"] == [{"Ref": "NodeReconcilerFunctionRole"}]
    (send,) = feed["PolicyDocument"]["Statement"]
    assert (send["Action"], send["Resource"]) == ("sqs:SendMessage", {"Fn::GetAtt": ["RoutesQueue", "Arn"]})


def test_devstack_reads_routes_only_when_enabled() -> None:
    from devstack.template import load_template

    off = load_template(TEMPLATE, PARAMS)
    assert "RouteReconcilerFunction" not in off.functions and "RoutesQueue" not in off.queues
    assert off.functions["ServiceReconcilerFunction"].environment["ROUTES_QUEUE_URL"] == ""
    on = load_template(TEMPLATE, {**PARAMS, "EnableRoutes": "true", "ClusterCidrs": "10.244.0.0/16,fd00::/56"})
    fn = on.functions["RouteReconcilerFunction"]
    assert fn.environment["CLUSTER_CIDRS"] == "10.244.0.0/16,fd00::/56"
    assert fn.code_dir == ROOT / "functions" / "routes" and fn.handler_path.is_file()
    (event,) = fn.sqs_events
    assert (event.queue_logical_id, event.maximum_concurrency) == ("RoutesQueue", 2)
    assert on.queues["RoutesQueue"].redrive_target == "RoutesDLQ"
    resolved = on.with_resources({"RoutesQueue": "http://q/routes"})
    assert resolved.functions["ServiceReconcilerFunction"].environment["ROUTES_QUEUE_URL"] == "http://q/routes"


# ---- node controllers ---------------------------------------------------------------------------------------------


def test_every_function_consumes_a_fifo_queue_with_partial_batch_failures(translated: dict[str, Any]) -> None:
    functions = _of_type(translated, "AWS::Lambda::Function")
    mappings = _of_type(translated, "AWS::Lambda::EventSourceMapping").values()
    for name in functions:
        if name in ("SweeperFunction", "TeardownFunction"):
            continue  # scheduled / CloudFormation's custom resource: see test_sweeper_template.py, test_teardown.py
        own = [e["Properties"] for e in mappings if e["Properties"]["FunctionName"] == {"Ref": name}]
        assert own, f"{name} has no SQS event source"
        for props in own:
            assert props["FunctionResponseTypes"] == ["ReportBatchItemFailures"], name
            assert props["BatchSize"] <= 10 and "MaximumBatchingWindowInSeconds" not in props, name
            assert "MaximumConcurrency" in props["ScalingConfig"], name


def test_node_reconciler_consumes_the_nodes_queue(translated: dict[str, Any]) -> None:
    res = translated["Resources"]
    fn = res["NodeReconcilerFunction"]["Properties"]
    assert fn["Handler"] == "app.lambda_handler" and fn["Code"]["S3Key"] == "functions/nodes.zip"
    env = fn["Environment"]["Variables"]
    assert env["POWERTOOLS_SERVICE_NAME"] == "node-reconciler"
    assert env["NODES_QUEUE_URL"] == {"Ref": "NodesQueue"}
    assert {"CLUSTER_NAME", "VPC_ID", "KUBE_AUTH_MODE", "POWERTOOLS_METRICS_NAMESPACE"} <= set(env)
    assert fn["LoggingConfig"]["LogGroup"] == {"Ref": "NodeReconcilerLogGroup"}
    esm = res["NodeReconcilerFunctionNodeMessages"]["Properties"]
    assert esm["EventSourceArn"] == {"Fn::GetAtt": ["NodesQueue", "Arn"]}
    assert esm["ScalingConfig"] == {"MaximumConcurrency": {"Ref": "NodeReconcilerConcurrency"}}
    assert res["NodesQueue"]["Properties"]["VisibilityTimeout"] >= 6 * fn["Timeout"]
    assert res["NodeReconcilerAccessEntry"]["Condition"] == "CreateNodesAccessEntry"
    assert res["NodeReconcilerAccessEntry"]["Properties"]["PrincipalArn"] == {
        "Fn::GetAtt": ["NodeReconcilerFunctionRole", "Arn"]
    }


def test_eventbridge_rules_target_the_nodes_queue_with_the_groups_the_code_expects(translated: dict[str, Any]) -> None:
    from ccm.node.events import EC2_EVENTS_GROUP, EC2_STATE_CHANGE, SAFETY_PASS_GROUP

    res = translated["Resources"]
    nodes_queue = {"Fn::GetAtt": ["NodesQueue", "Arn"]}
    state = res["NodeInstanceStateRule"]["Properties"]
    assert state["EventPattern"] == {
        "source": ["aws.ec2"],
        "detail-type": [EC2_STATE_CHANGE],
        "detail": {"state": ["running", "stopped", "shutting-down", "terminated"]},
    }
    (target,) = state["Targets"]
    assert target["Arn"] == nodes_queue and target["SqsParameters"] == {"MessageGroupId": EC2_EVENTS_GROUP}
    tick = res["NodeSafetyPassRule"]["Properties"]
    assert tick["ScheduleExpression"] == "rate(5 minutes)" and tick["State"] == "ENABLED"
    (target,) = tick["Targets"]
    assert target["Arn"] == nodes_queue and target["SqsParameters"] == {"MessageGroupId": SAFETY_PASS_GROUP}
    # Only these two rules may send to the queue (the watcher and the function use IAM identity policies).
    policy = res["NodesQueuePolicy"]["Properties"]
    assert policy["Queues"] == [{"Ref": "NodesQueue"}]
    (allow,) = [st for st in policy["PolicyDocument"]["Statement"] if st.get("Effect") == "Allow"]
    assert allow["Principal"] == {"Service": "events.amazonaws.com"} and allow["Action"] == "sqs:SendMessage"
    assert allow["Resource"] == nodes_queue
    assert allow["Condition"]["ArnEquals"]["aws:SourceArn"] == [
        {"Fn::GetAtt": ["NodeInstanceStateRule", "Arn"]},
        {"Fn::GetAtt": ["NodeSafetyPassRule", "Arn"]},
    ]


def test_node_reconciler_role_reads_ec2_and_touches_only_its_queue(translated: dict[str, Any]) -> None:
    role = translated["Resources"]["NodeReconcilerFunctionRole"]["Properties"]
    statements = {
        st["Sid"]: st
        for pol in role["Policies"]
        for raw in pol["PolicyDocument"]["Statement"]
        for st in [raw["Fn::If"][1] if "Fn::If" in raw else raw]
    }
    assert statements["ReadInstances"]["Action"] == ["ec2:DescribeInstances", "ec2:DescribeAvailabilityZones"]
    assert statements["BackoffOwnQueue"]["Action"] == ["sqs:ChangeMessageVisibility", "sqs:GetQueueUrl"]
    assert statements["BackoffOwnQueue"]["Resource"] == {"Fn::GetAtt": ["NodesQueue", "Arn"]}
    assert statements["FindCluster"]["Action"] == "eks:DescribeCluster"
    writes = [a for st in statements.values() for a in _actions(st) if a.startswith("ec2:")]
    assert all(a.split(":", 1)[1].startswith("Describe") for a in writes)  # no EC2 writes at all


def test_devstack_runs_the_node_reconciler() -> None:
    from devstack.template import load_template

    facts = load_template(TEMPLATE, PARAMS).with_resources(
        {
            "NodesQueue": "http://q/nodes",
            "ServicesQueue": "http://q/services",
            "MembershipTable": "members",
            "WatcherRole.RoleId": "AROAWATCHER",
        }
    )
    fn = facts.functions["NodeReconcilerFunction"]
    assert fn.handler_path == ROOT / "functions" / "nodes" / "app.py" and fn.handler_path.is_file()
    (event,) = fn.sqs_events
    assert (event.queue_logical_id, event.maximum_concurrency, event.report_batch_item_failures) == (
        "NodesQueue",
        5,
        True,
    )
    assert fn.environment["NODES_QUEUE_URL"] == "http://q/nodes" and fn.unresolved == ()
    assert facts.queues["NodesQueue"].attributes["ContentBasedDeduplication"] == "true"
