"""template.yaml: the sweeper function, its schedule, its settings and its least-privilege role."""

from __future__ import annotations

import json
import os
from typing import Any

import pytest

from ccm.wiring.settings import settings_from_env
from ccm.wiring.sweeper import sweeper_settings
from tests.template.cfn import ROOT, Stack

READ_PREFIXES = ("Describe", "Get", "Query")
CLUSTER_TAG = "kubernetes.io/cluster/unit"


def _statements(stack: Stack) -> list[dict[str, Any]]:
    role = stack.resources["SweeperFunctionRole"]["Properties"]
    statements: list[dict[str, Any]] = []
    for policy in role.get("Policies", []):
        statements += stack.value(policy["PolicyDocument"])["Statement"]
    for arn in stack.value(role["ManagedPolicyArns"]):
        name = arn.strip("<>")
        if name in stack.resources:  # ours; the rest are AWS managed (basic execution)
            statements += stack.policy_document(stack.resources[name]["Properties"]["PolicyDocument"])["Statement"]
    return statements


def _actions(st: dict[str, Any]) -> list[str]:
    return [st["Action"]] if isinstance(st["Action"], str) else list(st["Action"])


def test_the_sweeper_is_a_scheduled_arm64_function_with_the_settings_the_code_reads(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    stack = Stack({"SweeperDryRun": "true", "SweeperGraceMinutes": "45"})
    fn = stack.resources["SweeperFunction"]["Properties"]
    assert fn["Architectures"] == ["arm64"] and fn["Handler"] == "app.lambda_handler"
    assert fn["Code"]["S3Key"] == "functions/sweeper.zip" and (ROOT / "functions" / "sweeper" / "app.py").is_file()
    (rule,) = [r for r in stack.of_type("AWS::Events::Rule").values()
               if stack.value(r["Properties"]["Targets"][0]["Arn"]) == "<SweeperFunction.Arn>"]  # fmt: skip
    assert rule["Properties"]["ScheduleExpression"] == "rate(15 minutes)"
    assert rule["Properties"]["State"] == "ENABLED"
    assert fn["Timeout"] < 15 * 60  # a run ends before the next tick
    env = stack.value(fn["Environment"]["Variables"])
    assert env["SERVICES_QUEUE_URL"] == "<ServicesQueue>"
    assert env["SWEEPER_TABLE"] == "<MembershipTable>"
    assert env["POWERTOOLS_SERVICE_NAME"] == "sweeper" and env["POWERTOOLS_METRICS_NAMESPACE"] == "ServerlessCCM"
    # The same Kubernetes authentication as the reconcilers (and an access entry for its role).
    service_env = stack.value(stack.resources["ServiceReconcilerFunction"]["Properties"]["Environment"]["Variables"])
    for key in ("CLUSTER_NAME", "KUBE_AUTH_MODE", "KUBECONFIG_SECRET_ARN", "VPC_ID", "LOAD_BALANCER_CLASS"):
        assert env[key] == service_env[key], key
    entry = stack.resources["SweeperAccessEntry"]["Properties"]
    assert stack.value(entry["PrincipalArn"]) == "<SweeperFunctionRole.Arn>"
    assert entry["KubernetesGroups"] == ["serverless-ccm:sweeper"]  # its own group (deploy/lambda-rbac)
    # What the code makes of it.
    for key, value in env.items():
        monkeypatch.setenv(key, str(value))
    settings = sweeper_settings(settings_from_env())
    assert settings.dry_run is True and settings.grace_seconds == 45 * 60
    assert settings.table == "<MembershipTable>" and settings.services_queue_url == "<ServicesQueue>"


def test_defaults_delete_after_thirty_minutes_and_the_switch_removes_everything(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    on = Stack({})
    env = on.value(on.resources["SweeperFunction"]["Properties"]["Environment"]["Variables"])
    assert (env["SWEEPER_DRY_RUN"], env["SWEEPER_GRACE_MINUTES"]) == ("false", 30)
    for key, value in env.items():
        monkeypatch.setenv(key, str(value))
    assert sweeper_settings(settings_from_env()).dry_run is False
    # Without the nodes Lambda MEMBERSHIP_TABLE is empty; the sweeper still has its table.
    no_nodes = Stack({"EnableNodes": "false"})
    for key, value in no_nodes.value(
        no_nodes.resources["SweeperFunction"]["Properties"]["Environment"]["Variables"]
    ).items():
        monkeypatch.setenv(key, str(value))
    assert os.environ["MEMBERSHIP_TABLE"] == "" and sweeper_settings(settings_from_env()).table == "<MembershipTable>"
    off = Stack({"EnableSweeper": "false"})
    assert not [k for k in off.resources if k.startswith("Sweeper")]
    assert [k for k in on.resources if k.startswith("Sweeper")]
    # The alarms and the dashboard: observability.yaml (the nested stack), told by an empty function name.
    off_obs, on_obs = off.nested["Observability"], on.nested["Observability"]
    assert off_obs.params["SweeperFunctionName"] == "" and on_obs.params["SweeperFunctionName"] == "<SweeperFunction>"
    assert not [k for k in off_obs.resources if k.startswith("Sweeper")]
    assert "SweeperErrorsAlarm" in on_obs.resources and "SweeperThrottlesAlarm" not in on_obs.resources
    assert "sweep done" not in off_obs.value(off_obs.resources["Dashboard"]["Properties"]["DashboardBody"])
    body = on_obs.value(on_obs.resources["Dashboard"]["Properties"]["DashboardBody"])
    (sweeper,) = [w["properties"]["query"] for w in json.loads(body)["widgets"] if "SweeperLogGroup" in str(w)]
    assert sweeper.startswith("SOURCE '<SweeperLogGroup>' | filter message = \"sweep done\"")  # Logs Insights
    assert all(f"sum({f})" in sweeper for f in ("orphans", "deleted", "requeued", "mutating_calls"))


def test_the_sweeper_role_deletes_only_cluster_owned_resources_and_writes_nothing_else() -> None:
    stack = Stack({})
    statements = _statements(stack)
    writes = {a for st in statements for a in _actions(st) if not a.split(":")[1].startswith(READ_PREFIXES)}
    assert writes == {
        "elasticloadbalancing:DeleteLoadBalancer",
        "elasticloadbalancing:DeleteTargetGroup",
        "ec2:DeleteSecurityGroup",
        "ec2:RevokeSecurityGroupIngress",
        "ec2:UpdateSecurityGroupRuleDescriptionsIngress",
        "dynamodb:PutItem",
        "dynamodb:DeleteItem",
        "sqs:SendMessage",
    }
    assert "tag:GetResources" in {a for st in statements for a in _actions(st)}
    for st in statements:
        actions = _actions(st)
        if any(a.endswith(("DeleteLoadBalancer", "DeleteTargetGroup", "DeleteSecurityGroup")) for a in actions):
            prefix = "ec2" if actions[0].startswith("ec2:") else "aws"
            equals = dict(st["Condition"]["StringEquals"])
            assert equals.pop(f"{prefix}:ResourceTag/{CLUSTER_TAG}") == "owned", st
            # Besides: only the cluster's collected shared groups (listener groups, the all-ports group of 0.2).
            assert equals in (
                {},
                {f"{prefix}:ResourceTag/serverless-ccm/role": ["frontend-listeners", "frontend-default"]},
            )
        elif ":security-group-rule/" in str(st["Resource"]):  # a rule by id: only those we tagged
            assert actions == ["ec2:RevokeSecurityGroupIngress"], st
            assert st["Condition"] == {"StringEquals": {f"aws:ResourceTag/{CLUSTER_TAG}": "owned"}}, st
        elif any(a.startswith("ec2:") and not a.split(":")[1].startswith(READ_PREFIXES) for a in actions):
            assert st["Condition"]["Null"] == {f"ec2:ResourceTag/{CLUSTER_TAG}": "false"}, st
        if "sqs:SendMessage" in actions:
            assert st["Resource"] == "<ServicesQueue.Arn>"
        if "dynamodb:PutItem" in actions:
            assert st["Resource"] == "<MembershipTable.Arn>"
            assert st["Condition"] == {"ForAllValues:StringEquals": {"dynamodb:LeadingKeys": ["sweeper"]}}
        assert all(a != "*" and not a.endswith(":*") for a in actions)
