"""The doctor's IAM probe table (ccm.doctor.permissions) against the policies template.yaml really attaches to each
role: every permission the doctor expects is granted under the probe's tag context, and every one it expects to be
denied (the untagged twin of a tag-scoped write, the watcher's non-send actions) is not. Without this the doctor and
the template could drift apart, and the doctor would report false failures (or miss real gaps) in a real account.

The evaluation is deliberately small: Allow and Deny statements (an applicable Deny wins: the template's one Deny,
OnlyOwnQueue, narrows the AWS managed SQS poller policy), Action/Resource/NotResource wildcards, and the condition
operators the template uses (Null, StringEquals, ArnEquals, ForAllValues:StringEquals); any other operator fails the
test loudly."""

from __future__ import annotations

import fnmatch
import json
from typing import Any

import pytest

from ccm.doctor.facts import RoleKind
from ccm.doctor.permissions import (
    NODES_QUEUE,
    PROBES,
    ROUTES_QUEUE,
    SERVICES_QUEUE,
    Arns,
    context_entries,
    probes_for,
)
from tests.template.test_template import PARAMS, PSEUDO, _of_type, _sub
from tests.template.test_template import raw as raw
from tests.template.test_template import translated as translated

ROLES: dict[RoleKind, str] = {
    "services": "ServiceReconcilerFunctionRole",
    "nodes": "NodeReconcilerFunctionRole",
    "routes": "RouteReconcilerFunctionRole",
    "sweeper": "SweeperFunctionRole",
    "watcher": "WatcherRole",
}


def getatt_arn(logical_id: str) -> str:
    return f"arn:test:getatt:{logical_id}"


ARNS = Arns(
    PSEUDO["AWS::Partition"],
    PSEUDO["AWS::Region"],
    PSEUDO["AWS::AccountId"],
    PARAMS["ClusterName"],
    PARAMS["VpcId"],
    (
        (SERVICES_QUEUE, getatt_arn("ServicesQueue")),
        (NODES_QUEUE, getatt_arn("NodesQueue")),
        (ROUTES_QUEUE, getatt_arn("RoutesQueue")),
    ),
    getatt_arn("MembershipTable"),
)


def _resolve(value: Any) -> list[str]:
    """Resource values as plain strings: Fn::Sub substituted, Fn::GetAtt X.Arn as a stable fake ARN."""
    if isinstance(value, list):
        return [r for v in value for r in _resolve(v)]
    if isinstance(value, str):
        return [value]
    if "Fn::Sub" in value:
        return [_sub(value["Fn::Sub"])]
    if "Fn::GetAtt" in value:
        return [getatt_arn(value["Fn::GetAtt"][0])]
    return []  # Ref of a parameter (the kubeconfig secret): matches no probe


def _document(doc: Any) -> list[dict[str, Any]]:
    if isinstance(doc, dict) and "Fn::Sub" in doc:
        doc = json.loads(_sub(doc["Fn::Sub"]))
    if isinstance(doc, dict) and "Fn::If" in doc:
        doc = doc["Fn::If"][1]
    out = []
    for st in doc["Statement"]:
        st = st["Fn::If"][1] if "Fn::If" in st else st
        if isinstance(st, dict) and "Effect" in st:
            out.append(st)
    return out


# What the AWS managed policy SAM attaches for an SQS event grants (its published content): receive and delete on
# every queue of the account. Included so that our narrowing of it (OnlyOwnQueue) is evaluated too.
SQS_POLLER = "arn:aws:iam::aws:policy/service-role/AWSLambdaSQSQueueExecutionRole"
SQS_POLLER_STATEMENT = {
    "Effect": "Allow",
    "Action": ["sqs:ReceiveMessage", "sqs:DeleteMessage", "sqs:GetQueueAttributes"],
    "Resource": "*",
}


def role_statements(tpl: dict[str, Any], role_id: str) -> list[dict[str, Any]]:
    props = tpl["Resources"][role_id]["Properties"]
    statements = [st for policy in props.get("Policies", []) for st in _document(policy["PolicyDocument"])]
    for arn in props.get("ManagedPolicyArns", []):
        if isinstance(arn, dict) and "Ref" in arn:  # ours; of the AWS managed ones only the SQS poller matters
            statements += _document(tpl["Resources"][arn["Ref"]]["Properties"]["PolicyDocument"])
        elif (_sub(arn["Fn::Sub"]) if isinstance(arn, dict) and "Fn::Sub" in arn else arn) == SQS_POLLER:
            statements.append(SQS_POLLER_STATEMENT)
    for policy in _of_type(tpl, "AWS::IAM::Policy").values():
        if {"Ref": role_id} in policy["Properties"]["Roles"]:
            statements += _document(policy["Properties"]["PolicyDocument"])
    return statements


def _listed(value: Any) -> list[str]:
    return [value] if isinstance(value, str) else list(value)


def _condition_holds(condition: dict[str, Any], context: dict[str, str]) -> bool:
    for operator, entries in condition.items():
        for key, expected in entries.items():
            if operator == "Null":
                if (expected == "false") != (key in context):
                    return False
            elif operator in ("StringEquals", "ArnEquals"):
                if context.get(key) not in _listed(expected):
                    return False
            elif operator == "ForAllValues:StringEquals":
                # AWS: true when the key is absent (hence the Null guard next to it in the template).
                if key in context and not set(context[key].split(",")) <= set(_listed(expected)):
                    return False
            else:
                raise AssertionError(f"condition operator {operator} is not evaluated here: extend this test")
    return True


def _applies(st: dict[str, Any], action: str, resource: str, context: dict[str, str]) -> bool:
    if not any(fnmatch.fnmatchcase(action.lower(), a.lower()) for a in _listed(st["Action"])):
        return False
    if "NotResource" in st:
        if any(fnmatch.fnmatchcase(resource, r) for r in _resolve(st["NotResource"])):
            return False
    elif not any(fnmatch.fnmatchcase(resource, r) for r in _resolve(st["Resource"])):
        return False
    return _condition_holds(st.get("Condition", {}), context)


def allowed(statements: list[dict[str, Any]], action: str, resource: str, context: dict[str, str]) -> bool:
    """IAM's evaluation: an applicable explicit Deny wins, else any applicable Allow, else the implicit deny."""
    for st in statements:
        if st["Effect"] not in ("Allow", "Deny"):
            raise AssertionError(f"unknown Effect {st['Effect']}")
    if any(st["Effect"] == "Deny" and _applies(st, action, resource, context) for st in statements):
        return False
    return any(st["Effect"] == "Allow" and _applies(st, action, resource, context) for st in statements)


@pytest.mark.parametrize("kind", list(ROLES))
def test_the_template_grants_what_the_doctor_expects_and_nothing_it_must_not(
    translated: dict[str, Any],
    kind: RoleKind,
) -> None:
    statements = role_statements(translated, ROLES[kind])
    assert statements, ROLES[kind]
    wrong = []
    for probe, arn in probes_for(kind, ARNS):
        context = {e["ContextKeyName"]: e["ContextKeyValues"][0] for e in context_entries(probe.context, ARNS.cluster)}
        if allowed(statements, probe.action, arn, context) != probe.allowed:
            wrong.append(f"{probe.action} on {arn} ({probe.context}): expected allowed={probe.allowed}")
    assert not wrong, wrong


def test_every_probe_belongs_to_a_template_role() -> None:
    assert {p.role for p in PROBES} == set(ROLES)


def test_node_rules_are_tagged_on_create_and_only_rules_we_tagged_are_revoked(translated: dict[str, Any]) -> None:
    """AuthorizeSecurityGroupIngress with TagSpecifications (security-group-rule) also needs ec2:CreateTags, which
    only the creating call may use (ec2:CreateAction); RevokeSecurityGroupIngress by SecurityGroupRuleIds is
    authorised on the rule (resource type security-group-rule), only on one carrying our cluster tag."""
    tag = "kubernetes.io/cluster/unit"
    rule = "arn:aws:ec2:us-east-1:123456789012:security-group-rule/sgr-0123456789abcdef0"
    ours = {f"aws:ResourceTag/{tag}": "owned"}
    services, sweeper = (role_statements(translated, ROLES[k]) for k in ("services", "sweeper"))
    on_create = {"ec2:CreateAction": "AuthorizeSecurityGroupIngress", f"aws:RequestTag/{tag}": "owned"}
    assert allowed(services, "ec2:CreateTags", rule, on_create)
    assert allowed(services, "ec2:AuthorizeSecurityGroupIngress", rule, {f"aws:RequestTag/{tag}": "owned"})
    assert not allowed(services, "ec2:CreateTags", rule, {f"aws:RequestTag/{tag}": "owned"})  # tag an existing rule
    assert not allowed(services, "ec2:CreateTags", rule, {**on_create, "ec2:CreateAction": "CreateSecurityGroup"})
    for statements in (services, sweeper):
        assert allowed(statements, "ec2:RevokeSecurityGroupIngress", rule, ours)
        assert not allowed(statements, "ec2:RevokeSecurityGroupIngress", rule, {})  # untagged: upstream's, by hand
        assert not allowed(
            statements, "ec2:RevokeSecurityGroupIngress", rule, {"aws:ResourceTag/kubernetes.io/cluster/other": "owned"}
        )


def test_the_shared_groups_are_created_tagged_and_deleted_by_no_function(translated: dict[str, Any]) -> None:
    """The backend and default frontend groups (ccm.aws.shared_groups): the services function creates them with the
    cluster and role tags in the create call and manages their rules; no function can delete one (they carry no
    Service UID tag: cluster infrastructure, removed by the documented uninstall) nor give an existing group the
    role tag (adoption grants only the UID and service-name keys), so no foreign group can pose as the backend."""
    tag = "kubernetes.io/cluster/unit"
    group = "arn:aws:ec2:us-east-1:123456789012:security-group/sg-0123456789abcdef0"
    shared = {
        f"{prefix}/{key}": value
        for prefix in ("aws:ResourceTag", "ec2:ResourceTag")
        for key, value in ((tag, "owned"), ("serverless-ccm/role", "backend"))
    }
    services, sweeper = (role_statements(translated, ROLES[k]) for k in ("services", "sweeper"))
    create = {f"aws:RequestTag/{tag}": "owned", "aws:RequestTag/serverless-ccm/role": "backend"}
    assert allowed(services, "ec2:CreateSecurityGroup", group, create)
    assert allowed(services, "ec2:CreateTags", group, {**create, "ec2:CreateAction": "CreateSecurityGroup"})
    assert not allowed(services, "ec2:CreateSecurityGroup", group, {"aws:RequestTag/serverless-ccm/role": "backend"})
    for action in ("ec2:AuthorizeSecurityGroupIngress", "ec2:RevokeSecurityGroupIngress"):
        assert allowed(services, action, group, shared)
    for statements in (services, sweeper):
        assert not allowed(statements, "ec2:DeleteSecurityGroup", group, shared)
    eks_group = {f"aws:ResourceTag/{tag}": "owned", "aws:ResourceTag/aws:eks:cluster-name": "unit"}
    role_tag = {"aws:TagKeys": "serverless-ccm/role", "aws:RequestTag/serverless-ccm/role": "backend"}
    for existing in ({f"aws:ResourceTag/{tag}": "owned"}, eks_group):
        assert not allowed(services, "ec2:CreateTags", group, {**existing, **role_tag})
