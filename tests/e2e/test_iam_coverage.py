"""Least privilege that works, proven on what the code really calls: every AWS call the functions make in an end-to-end
run (NLB and Classic ELB Services created, changed and deleted; node initialisation) is evaluated against the
statements template.yaml gives the function roles (after the SAM transform): each call is ALLOWED on our resources,
and each write is DENIED on foreign ones: another cluster's load balancer / security group, the EKS built-in
service controller's load balancer and the EKS cluster security group (cluster-tagged, never UID-tagged).

How calls are captured: server-side, in the local AWS (devstack.call_log patches moto's dispatch), keyed by the
signing access key. That survives wherever the functions run (threads of the runner today, one process per
execution environment later); botocore hooks in the test process would not. The evaluator is the small one of
tests/template/test_doctor_probes.py (Allow statements, Action/Resource wildcards, the condition operators used).
"""

from __future__ import annotations

import json
from typing import Any

from devstack import call_log
from devstack.sqs_sender import FUNCTIONS_KEY
from devstack.stack import Stack
from tests.e2e.helpers import A, annotate, create_lb_service, gone, hostname, read_service
from tests.template.test_doctor_probes import ROLES, allowed, role_statements
from tests.template.test_template import PARAMS, PSEUDO
from tests.template.test_template import raw as raw
from tests.template.test_template import translated as translated

IAM_PREFIX = {"elbv2": "elasticloadbalancing", "elb": "elasticloadbalancing", "resourcegroupstaggingapi": "tag"}
REGION, ACCOUNT, CLUSTER = PSEUDO["AWS::Region"], PSEUDO["AWS::AccountId"], PARAMS["ClusterName"]
ELB, EC2 = f"arn:aws:elasticloadbalancing:{REGION}:{ACCOUNT}", f"arn:aws:ec2:{REGION}:{ACCOUNT}"
CLUSTER_TAG, UID_TAG = f"kubernetes.io/cluster/{CLUSTER}", "serverless-ccm/service-uid"
UID = "6f1e3c2a-0000-4000-8000-00000000abcd"


def _tags(prefix: str, tags: dict[str, str]) -> dict[str, str]:
    return {f"{p}/{k}": v for k, v in tags.items() for p in (f"aws:{prefix}", f"ec2:{prefix}")}


OURS = _tags("ResourceTag", {CLUSTER_TAG: "owned", UID_TAG: UID})
CREATE = {**_tags("RequestTag", {CLUSTER_TAG: "owned", UID_TAG: UID}), "aws:TagKeys": CLUSTER_TAG}
# Foreign: what each write must never reach.
OTHER_CLUSTER = _tags("ResourceTag", {"kubernetes.io/cluster/other": "owned", UID_TAG: UID})
BUILT_IN_LB = _tags("ResourceTag", {CLUSTER_TAG: "owned", "kubernetes.io/service-name": "default/web"})
EKS_CLUSTER_SG = _tags("ResourceTag", {CLUSTER_TAG: "owned", "aws:eks:cluster-name": CLUSTER})
# Rules on the node group are authorised by the cluster tag alone (docs/security.md: not until rules are tagged).
NODE_GROUP_RULES = {"AuthorizeSecurityGroupIngress", "RevokeSecurityGroupIngress"}


def _target(call: call_log.AwsCall) -> tuple[str, str, dict[str, str]] | None:
    """(IAM action, resource ARN, context on our resource) of a recorded call; None for the unscoped reads."""
    action, service = call.action, IAM_PREFIX.get(call.service, call.service)
    iam = f"{service}:{action}"
    if action.startswith(("Describe", "Get", "List")) and service in ("elasticloadbalancing", "ec2", "tag"):
        return iam, "*", {}
    if service == "elasticloadbalancing":
        context = CREATE if action in ("CreateLoadBalancer", "CreateTargetGroup") else OURS
        if "TargetGroup" in action or action.endswith("Targets"):
            return iam, f"{ELB}:targetgroup/k8s-default-web-0123456789/0123456789abcdef", context
        if action in ("ModifyListener", "DeleteListener"):
            return iam, f"{ELB}:listener/net/a{UID[:31]}/0123456789abcdef/0123456789ab", context
        return iam, f"{ELB}:loadbalancer/net/a{UID[:31]}/0123456789abcdef", context
    if service == "ec2":
        if action == "CreateSecurityGroup":
            return iam, f"{EC2}:security-group/*", CREATE
        if action == "CreateTags":
            return iam, f"{EC2}:security-group/sg-0ours", {**CREATE, "ec2:CreateAction": "CreateSecurityGroup"}
        if "SecurityGroup" in action:
            return iam, f"{EC2}:security-group/sg-0ours", OURS
        if "Route" in action:
            return iam, f"{EC2}:route-table/rtb-0ours", OURS
        return iam, f"{EC2}:instance/i-0ours", {**OURS, "ec2:Attribute": "SourceDestCheck"}
    if service == "sqs":
        iam = f"sqs:{action.removesuffix('Batch')}"  # a batch call is authorised as its single twin
        queue = call.resource.rsplit("/", 1)[-1].split("-ccm-")[-1].split(".")[0]  # <cluster>-ccm-services.fifo
        return iam, f"arn:test:getatt:{queue.capitalize()}Queue", {}
    if service == "dynamodb":
        return iam, "arn:test:getatt:MembershipTable", {}
    if service == "eks":
        return iam, f"arn:aws:eks:{REGION}:{ACCOUNT}:cluster/{CLUSTER}", {}
    return iam, "*", {}


def _scenario(stack: Stack) -> None:
    for name, lb_type in (("iam-nlb", "nlb"), ("iam-clb", "clb")):
        create_lb_service(stack, name, [80, 443], {A + "type": lb_type})
        stack.wait_for(lambda n=name: hostname(stack, n), timeout=60, what=f"{name} hostname")
        annotate(stack, name, {A + "healthcheck-interval": "20"})
    assert stack.runner is not None
    stack.runner.drain(60)
    gone(stack, *[read_service(stack, n) for n in ("iam-nlb", "iam-clb")])  # type: ignore[misc]
    stack.runner.drain(60)


def test_every_call_of_the_functions_is_allowed_on_ours_and_writes_are_denied_on_foreign_resources(
    stack: Stack,
    translated: dict[str, Any],
) -> None:
    call_log.start()
    try:
        _scenario(stack)
    finally:
        recorded = call_log.stop()
    # The event source mapping's own calls (receive, delete) are Lambda's, authorised by the AWS managed
    # AWSLambdaSQSQueueExecutionRole SAM attaches; everything else is the functions' code.
    esm = {"ReceiveMessage", "DeleteMessage", "DeleteMessageBatch", "GetQueueAttributes"}
    made = {c for c in recorded if c.access_key == FUNCTIONS_KEY and not (c.service == "sqs" and c.action in esm)}
    # The devstack's functions share one access key, so a call is judged against each role on its own (a role's
    # explicit Deny, e.g. OnlyOwnQueue, applies to that role only): allowed if the role that makes it may.
    roles = [role_statements(translated, ROLES[role]) for role in ("services", "nodes", "routes", "sweeper")]

    def allowed_to_some_role(action: str, arn: str, context: dict[str, str]) -> bool:
        return any(allowed(statements, action, arn, context) for statements in roles)

    actions = sorted({f"{IAM_PREFIX.get(c.service, c.service)}:{c.action}" for c in made})
    assert {"elasticloadbalancing:CreateLoadBalancer", "elasticloadbalancing:DeleteLoadBalancer"} <= set(actions)
    assert {"ec2:CreateSecurityGroup", "ec2:DeleteSecurityGroup", "ec2:AuthorizeSecurityGroupIngress"} <= set(actions)
    denied_ours, allowed_foreign = [], []
    for call in sorted(made, key=lambda c: (c.service, c.action)):
        target = _target(call)
        assert target is not None
        iam, arn, context = target
        if not allowed_to_some_role(iam, arn, context):
            denied_ours.append(f"{iam} on {arn} {json.dumps(context)}")
        if not context or iam.split(":")[1].startswith(("Create", "Describe", "Get", "List")):
            continue  # reads, and creates (no resource yet: their request-tag condition is what scopes them)
        foreign = [OTHER_CLUSTER, BUILT_IN_LB if "elasticloadbalancing" in iam else EKS_CLUSTER_SG]
        if iam.split(":")[1] in NODE_GROUP_RULES:
            foreign = [OTHER_CLUSTER]
        for other in foreign:
            extra = {k: v for k, v in context.items() if not k.startswith(("aws:ResourceTag", "ec2:ResourceTag"))}
            if allowed_to_some_role(iam, arn, {**other, **extra}):
                allowed_foreign.append(f"{iam} on {json.dumps(other)}")
    assert not denied_ours, f"calls the template does not allow: {denied_ours}"
    assert not allowed_foreign, f"writes allowed on resources that are not ours: {allowed_foreign}"
    print(f"{len(made)} distinct calls ({len(actions)} actions) evaluated: {actions}")
