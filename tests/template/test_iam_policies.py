"""Least privilege, checked on every policy the template deploys (inline, customer managed, queue policies, trust
policies and whatever SAM expands), for every combination of features."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest

from tests.template.cfn import PARAMS, SCENARIOS, Stack

CLUSTER_TAG = f"kubernetes.io/cluster/{PARAMS['ClusterName']}"
TAG_CONDITION_KEYS = {
    f"{prefix}/{CLUSTER_TAG}".lower() for prefix in ("aws:ResourceTag", "aws:RequestTag", "ec2:ResourceTag")
}
MUTATING = re.compile(
    r"^(elasticloadbalancing|ec2):(Create|Delete|Modify|Register|Deregister|Authorize|Revoke|Add|Remove|Set|Apply"
    r"|Attach|Detach|Configure|Replace|Update)"
)
READ_ONLY = re.compile(r"^[a-z0-9-]+:(Describe|Get|List)[A-Za-z]*\*?$")

# Mutating ELB/EC2 actions allowed without a cluster-tag condition, each with why and what scopes it instead.
# Matching is on (action, resource): the exemption holds only for that exact resource.
UNTAGGABLE: dict[tuple[str, str], str] = {
    (
        "ec2:CreateSecurityGroup",
        f"arn:aws:ec2:us-east-1:123456789012:vpc/{PARAMS['VpcId']}",
    ): "CreateSecurityGroup is authorised against the new group (request-tag condition, CreateTaggedSecurityGroups) "
    "AND against the VPC, an existing resource that carries no request tag; it is scoped by ARN to the one VPC.",
}
# AWS managed policies SAM attaches on its own; their content is fixed by AWS (no ELB/EC2 writes).
AWS_MANAGED = {
    "arn:aws:iam::aws:policy/service-role/AWSLambdaBasicExecutionRole": "logs:CreateLogGroup/Stream, PutLogEvents",
    "arn:aws:iam::aws:policy/service-role/AWSLambdaSQSQueueExecutionRole": (
        "sqs:ReceiveMessage/DeleteMessage/GetQueueAttributes for the SQS event source mapping (on any queue: SAM "
        "adds it for every SQS event; narrowed to the function's own queue by its OnlyOwnQueue Deny)"
    ),
}


def as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


def policies(stack: Stack) -> Iterator[tuple[str, str, dict[str, Any]]]:
    """(where, kind, document) for every policy document the deployment creates."""
    for logical_id, res in stack.resources.items():
        props = res.get("Properties", {})
        rtype = res["Type"]
        if rtype == "AWS::IAM::Role":
            yield logical_id, "trust", stack.policy_document(props["AssumeRolePolicyDocument"])
            for policy in stack.value(props.get("Policies", [])):
                yield (
                    f"{logical_id}/{policy['PolicyName']}",
                    "identity",
                    stack.policy_document(policy["PolicyDocument"]),
                )
        elif rtype in ("AWS::IAM::ManagedPolicy", "AWS::IAM::Policy"):
            yield logical_id, "identity", stack.policy_document(props["PolicyDocument"])
        elif rtype in ("AWS::SQS::QueuePolicy", "AWS::SNS::TopicPolicy") and "PolicyDocument" in props:
            yield logical_id, "resource", stack.policy_document(props["PolicyDocument"])


def statements(stack: Stack) -> Iterator[tuple[str, str, dict[str, Any]]]:
    for where, kind, doc in policies(stack):
        assert doc.get("Version") == "2012-10-17", where
        for st in as_list(doc["Statement"]):
            yield f"{where}/{st.get('Sid', '?')}", kind, st


def has_cluster_tag_condition(st: dict[str, Any]) -> bool:
    for operator, pairs in st.get("Condition", {}).items():
        for key, value in pairs.items():
            if key.lower() not in TAG_CONDITION_KEYS:
                continue
            if operator == "Null" and value == "false":
                return True
            if operator in ("StringEquals", "StringLike") and value:
                return True
    return False


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_no_wildcard_actions_and_wildcard_resources_only_for_reads(scenario: str) -> None:
    stack = Stack(SCENARIOS[scenario])
    seen = 0
    for where, kind, st in statements(stack):
        seen += 1
        if st.get("Sid") == "OnlyOwnQueue":
            # The one Deny: it narrows the AWS managed AWSLambdaSQSQueueExecutionRole (every queue of the account)
            # to the function's own queue; NotResource names exactly that queue.
            assert st["Effect"] == "Deny" and set(st) == {"Sid", "Effect", "Action", "NotResource"}, where
            assert all(a.startswith("sqs:") for a in as_list(st["Action"])), where
            assert isinstance(st["NotResource"], str) and st["NotResource"].endswith("Queue.Arn>"), where
            continue
        if st.get("Sid") == "OnlyOurSenders":
            # The queue policies' Deny: sqs:SendMessage on its own queue for every IAM principal but the listed
            # senders (tests/template/test_queue_policies.py evaluates it).
            assert st["Effect"] == "Deny" and st["Action"] == "sqs:SendMessage" and st["Principal"] == "*", where
            assert set(st["Condition"]) == {"Null", "ArnNotEquals"}, where
            continue
        assert st["Effect"] == "Allow", where  # no other Deny juggling: keep it simple to review
        assert "NotAction" not in st and "NotResource" not in st and "NotPrincipal" not in st, where
        for action in as_list(st["Action"]):
            assert action != "*" and not action.endswith(":*"), (where, action)
            if "*" in action:
                assert READ_ONLY.match(action), f"{where}: wildcard {action} is not a read-only prefix"
        if kind == "identity" and "*" in as_list(st.get("Resource")):
            writes = [a for a in as_list(st["Action"]) if not READ_ONLY.match(a)]
            assert not writes, f"{where}: {writes} on Resource '*'"
    assert seen > 10


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_every_mutating_elb_and_ec2_action_needs_the_cluster_tag(scenario: str) -> None:
    stack = Stack(SCENARIOS[scenario])
    exempted: set[tuple[str, str]] = set()
    mutating = 0
    for where, kind, st in statements(stack):
        if kind != "identity":
            continue
        for action in as_list(st["Action"]):
            if not MUTATING.match(action):
                continue
            mutating += 1
            if has_cluster_tag_condition(st):
                continue
            resources = as_list(st["Resource"])
            assert all((action, r) in UNTAGGABLE for r in resources), (
                f"{where}: {action} on {resources} has no {CLUSTER_TAG} condition and is not on the allow-list"
            )
            exempted.update((action, r) for r in resources)
    assert mutating > 20
    assert exempted == set(UNTAGGABLE), "stale allow-list entry"


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_only_known_aws_managed_policies(scenario: str) -> None:
    stack = Stack(SCENARIOS[scenario])
    for logical_id, role in stack.of_type("AWS::IAM::Role").items():
        for arn in stack.value(role["Properties"].get("ManagedPolicyArns", [])):
            own = arn.startswith("<") and stack.resources[arn.strip("<>")]["Type"] == "AWS::IAM::ManagedPolicy"
            assert own or arn in AWS_MANAGED, (logical_id, arn)


@pytest.mark.parametrize("scenario", ["defaults", "irsa-alarm-mail"])
def test_watcher_role_can_only_send_to_its_two_queues(scenario: str) -> None:
    stack = Stack(SCENARIOS[scenario])
    role = stack.resources["WatcherRole"]["Properties"]
    assert "ManagedPolicyArns" not in role
    [(name, _, doc)] = [p for p in policies(stack) if p[0].startswith("WatcherRole/")]
    (st,) = doc["Statement"]
    # sqs:SendMessage also authorises SendMessageBatch (SQS has no separate permission for batch actions).
    assert (st["Action"], st["Resource"]) == ("sqs:SendMessage", ["<ServicesQueue.Arn>", "<NodesQueue.Arn>"]), name
    trust = stack.policy_document(role["AssumeRolePolicyDocument"])
    (assume,) = trust["Statement"]
    if scenario == "irsa-alarm-mail":
        issuer = SCENARIOS[scenario]["WatcherOidcIssuer"]
        assert assume["Principal"] == {"Federated": f"arn:aws:iam::123456789012:oidc-provider/{issuer}"}
        assert assume["Action"] == "sts:AssumeRoleWithWebIdentity"
        assert assume["Condition"]["StringEquals"] == {
            f"{issuer}:sub": "system:serviceaccount:serverless-ccm:serverless-ccm-watcher",
            f"{issuer}:aud": "sts.amazonaws.com",
        }
        assert "WatcherPodIdentityAssociation" not in stack.resources
    else:
        assert assume["Principal"] == {"Service": "pods.eks.amazonaws.com"}
        assert sorted(assume["Action"]) == ["sts:AssumeRole", "sts:TagSession"]
        assert assume["Condition"]["StringEquals"] == {
            "aws:RequestTag/eks-cluster-name": PARAMS["ClusterName"],
            "aws:RequestTag/kubernetes-namespace": "serverless-ccm",
            "aws:RequestTag/kubernetes-service-account": "serverless-ccm-watcher",
            "aws:SourceAccount": "123456789012",  # only this account's EKS may assume it (confused deputy)
        }
        assert assume["Condition"]["ArnEquals"] == {
            "aws:SourceArn": f"arn:aws:eks:us-east-1:123456789012:cluster/{PARAMS['ClusterName']}"
        }
        association = stack.value(stack.resources["WatcherPodIdentityAssociation"]["Properties"])
        assert association == {
            "ClusterName": PARAMS["ClusterName"],
            "Namespace": "serverless-ccm",
            "ServiceAccount": "serverless-ccm-watcher",
            "RoleArn": "<WatcherRole.Arn>",
            "DisableSessionTags": False,
        }


def test_no_watcher_role_when_credentials_are_brought() -> None:
    stack = Stack(SCENARIOS["kubeconfig-no-watcher-role"])
    assert "WatcherRole" not in stack.resources and "WatcherPodIdentityAssociation" not in stack.resources


def test_the_allow_list_check_catches_an_untagged_write() -> None:
    untagged = {"Effect": "Allow", "Action": "ec2:DeleteSecurityGroup", "Resource": "*"}
    tagged = {**untagged, "Condition": {"Null": {f"aws:ResourceTag/{CLUSTER_TAG}": "false"}}}
    other_cluster = {**untagged, "Condition": {"Null": {"aws:ResourceTag/kubernetes.io/cluster/other": "false"}}}
    assert not has_cluster_tag_condition(untagged) and not has_cluster_tag_condition(other_cluster)
    assert has_cluster_tag_condition(tagged)
    assert MUTATING.match("ec2:ReplaceRoute") and MUTATING.match("elasticloadbalancing:SetSubnets")
    assert not MUTATING.match("ec2:DescribeInstances")


KMS_KEY = "arn:aws:kms:us-east-1:123456789012:key/1234abcd-12ab-34cd-56ef-1234567890ab"
SECRET = "arn:aws:secretsmanager:us-east-1:123456789012:secret:kc"


@pytest.mark.parametrize("key", ["", KMS_KEY])
def test_kms_decrypt_only_with_a_customer_managed_key_on_that_key_through_secrets_manager(key: str) -> None:
    """A kubeconfig secret under a customer managed key needs kms:Decrypt; granted only when the key parameter is
    set, on that one key, and only when Secrets Manager makes the call (kms:ViaService), for every function role."""
    params = {"KubeAuthMode": "kubeconfig-secret", "KubeconfigSecretArn": SECRET, "EnableRoutes": "true"}
    stack = Stack({**params, "ClusterCidrs": "10.244.0.0/16", **({"KubeconfigSecretKmsKeyArn": key} if key else {})})
    decrypting: dict[str, dict[str, Any]] = {}
    for where, _, st in statements(stack):
        if any(a.lower().startswith("kms:") for a in as_list(st.get("Action", []))):
            decrypting[where] = st
    if not key:
        assert decrypting == {}
        return
    roles = {where.split("/", 1)[0] for where in decrypting}
    assert roles == {
        "ServiceReconcilerFunctionRole",
        "NodeReconcilerFunctionRole",
        "RouteReconcilerFunctionRole",
        "SweeperFunctionRole",
    }
    for where, st in decrypting.items():
        assert st["Effect"] == "Allow" and as_list(st["Action"]) == ["kms:Decrypt"], where
        assert as_list(st["Resource"]) == [KMS_KEY], where
        assert st["Condition"] == {"StringEquals": {"kms:ViaService": "secretsmanager.us-east-1.amazonaws.com"}}, where
