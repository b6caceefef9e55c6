"""Only the expected senders (messages are hints: docs/security.md#messages-hints-never-orders): each queue policy
denies sqs:SendMessage to every IAM principal of the account but the queue's own senders and the operators' redrive
roles; EventBridge (a service principal, no aws:PrincipalArn) keeps its Allow. Evaluated as IAM does: an applicable
explicit Deny wins."""

from __future__ import annotations

from typing import Any

import pytest

from tests.template.cfn import Stack
from tests.template.test_doctor_probes import _condition_holds

REDRIVE = "arn:aws:iam::123456789012:role/ops-redrive"
FOREIGN = "arn:aws:iam::123456789012:role/someone-else"


def role(logical_id: str) -> str:
    return f"<{logical_id}.Arn>"  # what cfn.Stack gives for !GetAtt <Role>.Arn


def denied(stack: Stack, policy: str, principal_arn: str | None) -> bool:
    """Whether the queue policy's explicit Deny applies to sqs:SendMessage by this principal (None: a service)."""
    document = stack.value(stack.resources[policy]["Properties"]["PolicyDocument"])
    context = {} if principal_arn is None else {"aws:PrincipalArn": principal_arn}
    for st in document["Statement"]:
        if st["Effect"] != "Deny" or st["Action"] != "sqs:SendMessage":
            continue
        condition = {op: entries for op, entries in st["Condition"].items() if op != "ArnNotEquals"}
        (listed,) = st["Condition"]["ArnNotEquals"].values()
        if _condition_holds(condition, context) and context.get("aws:PrincipalArn") not in listed:
            return True
    return False


SENDERS: dict[str, list[str]] = {
    "ServicesQueuePolicy": ["WatcherRole", "NodeReconcilerFunctionRole", "SweeperFunctionRole"],
    "NodesQueuePolicy": ["WatcherRole"],
    "RoutesQueuePolicy": ["NodeReconcilerFunctionRole"],
}


@pytest.mark.parametrize("policy", list(SENDERS))
def test_only_the_queues_own_senders_and_the_redrive_role_may_send(policy: str) -> None:
    params: dict[str, Any] = {"EnableRoutes": "true", "ClusterCidrs": "10.244.0.0/16", "QueueRedriveRoleArns": REDRIVE}
    stack = Stack(params)
    for sender in SENDERS[policy]:
        assert not denied(stack, policy, role(sender)), sender
    assert not denied(stack, policy, REDRIVE)
    assert not denied(stack, policy, None)  # EventBridge's rules: a service principal
    assert denied(stack, policy, FOREIGN)
    for other in {"ServiceReconcilerFunctionRole", "RouteReconcilerFunctionRole"} | (
        {"SweeperFunctionRole", "NodeReconcilerFunctionRole"} - set(SENDERS[policy])
    ):
        if f"{other.removesuffix('Role')}" in stack.resources:
            assert denied(stack, policy, role(other)), f"{other} may send to {policy}"


def test_without_our_watcher_role_the_services_queue_is_not_restricted() -> None:
    """WatcherAuth=none: the watcher brings its own identity, which the template cannot name."""
    stack = Stack({"WatcherAuth": "none"})
    assert "ServicesQueuePolicy" not in stack.resources
