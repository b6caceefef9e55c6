"""Least privilege that works, proven on what the code really calls: every AWS call the functions make in an
end-to-end run is evaluated against the policy of the role that made it (template.yaml after the SAM transform),
with the tags the resource really carried when the call was answered. The run: NLB and Classic ELB Services
created, changed and deleted; routes (CreateRoute, ReplaceRoute, ModifyInstanceAttribute) from node
initialisation; a sweeper run; the adoption of a Classic ELB (with its `k8s-elb-` group) and of an NLB (with its
target group) that cloud-provider-aws made, created beforehand with the tags upstream gives them. Each write is also
DENIED on foreign resources: another cluster's, the EKS built-in service controller's load balancer and the EKS
cluster security group (cluster-tagged, never UID-tagged).

How calls are captured: server-side, in the local AWS (devstack.call_log patches moto's dispatch), with the query
parameters and the named resources' tags read from moto's state before the call is answered. Each function signs
with its own access key (devstack.sqs_sender.FUNCTION_ROLES), so the key says which role made the call. The
evaluator is the small one of tests/template/test_doctor_probes.py (Allow/Deny, wildcards, the operators used).
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from devstack import call_log
from devstack.sqs_sender import FUNCTION_OF_KEY
from devstack.stack import Stack, StackConfig
from tests.cfn_response import CloudFormation
from tests.e2e.helpers import A, annotate, create_lb_service, gone, hostname, read_service
from tests.e2e.test_adoption import made_by_cloud_provider_aws
from tests.template.test_doctor_probes import ROLES, allowed, role_statements
from tests.template.test_template import PARAMS, PSEUDO
from tests.template.test_template import raw as raw
from tests.template.test_template import translated as translated

IAM_PREFIX = {"elbv2": "elasticloadbalancing", "elb": "elasticloadbalancing", "resourcegroupstaggingapi": "tag"}
REGION, ACCOUNT = PSEUDO["AWS::Region"], PSEUDO["AWS::AccountId"]
ELB, EC2 = f"arn:aws:elasticloadbalancing:{REGION}:{ACCOUNT}", f"arn:aws:ec2:{REGION}:{ACCOUNT}"
UID_TAG = "serverless-ccm/service-uid"
ROLE_OF = {
    "ServiceReconcilerFunction": "services",
    "NodeReconcilerFunction": "nodes",
    "RouteReconcilerFunction": "routes",
    "SweeperFunction": "sweeper",
    "TeardownFunction": "teardown",  # the stack's custom resource; not a doctor role (it runs only at deletion)
}
# The template is translated with ClusterName "unit"; the devstack's cluster tag is renamed to it.
TEMPLATE_CLUSTER_TAG = f"kubernetes.io/cluster/{PARAMS['ClusterName']}"
# Rules on the node group are authorised by the cluster tag alone (docs/security.md: not until rules are tagged).
NODE_GROUP_RULES = {"AuthorizeSecurityGroupIngress", "RevokeSecurityGroupIngress"}
Check = tuple[str, str, dict[str, str]]  # IAM action, resource ARN, request context


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    call_log.start()  # before the stack: node initialisation and the first routes are recorded too
    config = StackConfig(
        state_dir=tmp_path_factory.mktemp("devstack-iam"),
        default_lb_type="clb",
        routes=True,
        concurrency=3,
        resync_seconds=3600,
    )
    with Stack(config) as running:
        yield running
    call_log.stop()


def _cluster(stack: Stack) -> str:
    return f"kubernetes.io/cluster/{stack.config.cluster_name}"


def _context(prefix: str, tags: dict[str, str], cluster_tag: str) -> dict[str, str]:
    """Condition keys for tags, the devstack's cluster tag renamed to the template's."""
    renamed = {(TEMPLATE_CLUSTER_TAG if k == cluster_tag else k): v for k, v in tags.items()}
    return {f"{p}/{k}": v for k, v in renamed.items() for p in (f"aws:{prefix}", f"ec2:{prefix}")}


def _request(tags: dict[str, str], cluster_tag: str) -> dict[str, str]:
    keys = [TEMPLATE_CLUSTER_TAG if k == cluster_tag else k for k in tags]
    return {**_context("RequestTag", tags, cluster_tag), **({"aws:TagKeys": ",".join(keys)} if keys else {})}


def _listed_tags(call: call_log.AwsCall, prefix: str) -> dict[str, str]:
    """Tags.member.N.Key/Value (ELB) or TagSpecification.1.Tag.N.Key/Value, Tag.N.Key/Value (EC2)."""
    found: dict[str, dict[str, str]] = {}
    for key, value in call.params_starting(prefix):
        index, _, field = key[len(prefix) :].partition(".")
        found.setdefault(index, {})[field] = value
    return {t["Key"]: t.get("Value", "") for t in found.values() if "Key" in t}


def _checks(call: call_log.AwsCall, cluster_tag: str) -> list[Check]:
    """Every (action, resource, context) IAM authorises for this call, with the resources' real tags."""
    service, action = IAM_PREFIX.get(call.service, call.service), call.action
    iam = f"{service}:{action}"

    def ours(resource_id: str) -> dict[str, str]:
        return _context("ResourceTag", call.tags_of(resource_id), cluster_tag)

    if action.startswith(("Describe", "Get", "List")) and service in ("elasticloadbalancing", "ec2", "tag"):
        return [(iam, "*", {})]
    if call.service == "elbv2":
        tags = _listed_tags(call, "Tags.member.")
        if action in ("CreateLoadBalancer", "CreateTargetGroup"):
            kind = "loadbalancer/net" if action == "CreateLoadBalancer" else "targetgroup"
            arn = f"{ELB}:{kind}/{call.param('Name')}/0123456789abcdef"
            tagging = {**_request(tags, cluster_tag), "elasticloadbalancing:CreateAction": action}
            return [(iam, arn, _request(tags, cluster_tag)), ("elasticloadbalancing:AddTags", arn, tagging)]
        if action == "CreateListener":
            lb = call.param("LoadBalancerArn")
            listener = lb.replace(":loadbalancer/", ":listener/") + "/0123456789abcdef"
            tagging = {**_request(tags, cluster_tag), "elasticloadbalancing:CreateAction": action}
            return [(iam, lb, ours(lb))] + ([("elasticloadbalancing:AddTags", listener, tagging)] if tags else [])
        if action in ("AddTags", "RemoveTags"):
            arns = [v for _, v in call.params_starting("ResourceArns.member.")]
            return [(iam, a, {**ours(a), **_request(tags, cluster_tag)}) for a in arns]
        arn = call.param("ListenerArn") or call.param("TargetGroupArn") or call.param("LoadBalancerArn")
        return [(iam, arn, ours(arn))]
    if call.service == "elb":
        name = call.param("LoadBalancerName") or call.param("LoadBalancerNames.member.1")
        arn, tags = f"{ELB}:loadbalancer/{name}", _listed_tags(call, "Tags.member.")
        if action == "CreateLoadBalancer":
            tagging = {**_request(tags, cluster_tag), "elasticloadbalancing:CreateAction": action}
            return [(iam, arn, _request(tags, cluster_tag)), ("elasticloadbalancing:AddTags", arn, tagging)]
        if action == "AddTags":
            return [(iam, arn, {**ours(name), **_request(tags, cluster_tag)})]
        return [(iam, arn, ours(name))]
    if call.service == "ec2":
        spec = _listed_tags(call, "TagSpecification.1.Tag.")
        if action == "CreateSecurityGroup":
            group = f"{EC2}:security-group/*"
            tagging = {**_request(spec, cluster_tag), "ec2:CreateAction": action}
            return [
                (iam, group, _request(spec, cluster_tag)),
                (iam, f"{EC2}:vpc/{PARAMS['VpcId']}", {}),
                ("ec2:CreateTags", group, tagging),
            ]
        if action == "CreateTags":
            tags = _listed_tags(call, "Tag.")
            ids = [v for _, v in call.params_starting("ResourceId.") + call.params_starting("Resource.")]
            kinds = {"sg-": "security-group", "sgr-": "security-group-rule", "i-": "instance", "rtb-": "route-table"}
            arns = [(f"{EC2}:{next(v for k, v in kinds.items() if i.startswith(k))}/{i}", i) for i in ids]
            return [(iam, a, {**ours(i), **_request(tags, cluster_tag)}) for a, i in arns]
        if action in ("AuthorizeSecurityGroupIngress", "RevokeSecurityGroupIngress"):
            group = call.param("GroupId")
            found: list[Check] = [(iam, f"{EC2}:security-group/{group}", ours(group))]
            if spec:
                rule = f"{EC2}:security-group-rule/*"
                found.append((iam, rule, _request(spec, cluster_tag)))
                tagging = {**_request(spec, cluster_tag), "ec2:CreateAction": action}
                found.append(("ec2:CreateTags", rule, tagging))
            for _, rule_id in call.params_starting("SecurityGroupRuleId."):
                found.append((iam, f"{EC2}:security-group-rule/{rule_id}", ours(rule_id)))
            return found
        if "SecurityGroup" in action:
            group = call.param("GroupId")
            return [(iam, f"{EC2}:security-group/{group}", ours(group))]
        if "Route" in action:
            table = call.param("RouteTableId")
            return [(iam, f"{EC2}:route-table/{table}", ours(table))]
        if action == "ModifyInstanceAttribute":
            instance = call.param("InstanceId")
            attribute = call.param("Attribute") or next(
                (k.split(".")[0] for k, _ in call.params if k.endswith(".Value")), ""
            )
            return [(iam, f"{EC2}:instance/{instance}", {**ours(instance), "ec2:Attribute": attribute})]
        return [(iam, f"{EC2}:{action}/unknown", {})]  # a new kind of EC2 write: fails until handled here
    if call.service == "sqs":
        iam = f"sqs:{action.removesuffix('Batch')}"  # a batch call is authorised as its single twin
        queue = call.resource.rsplit("/", 1)[-1].split("-ccm-")[-1].split(".")[0]  # <cluster>-ccm-services.fifo
        return [(iam, f"arn:test:getatt:{queue.capitalize()}Queue", {})]
    if call.service == "dynamodb":
        return [(iam, "arn:test:getatt:MembershipTable", {})]
    if call.service == "eks":
        return [(iam, f"arn:aws:eks:{REGION}:{ACCOUNT}:cluster/{PARAMS['ClusterName']}", {})]
    return [(iam, "*", {})]


def _foreign(iam: str, arn: str) -> list[dict[str, str]]:
    """Resource-tag contexts of what a write must never reach: another cluster's resource (always); the EKS
    built-in controller's load balancer (cluster tag, no UID tag) but for AddTags, which IS adoption: a load
    balancer cloud-provider-aws made looks the same (docs/security.md, "Adoption"); the EKS cluster security
    group (never, not even tagging it), but for the node-group rules the cluster tag alone authorises."""
    other = {"kubernetes.io/cluster/other": "owned", UID_TAG: "6f1e3c2a-0000-4000-8000-00000000abcd"}
    built_in = {TEMPLATE_CLUSTER_TAG: "owned", "kubernetes.io/service-name": "default/web"}
    eks_sg = {TEMPLATE_CLUSTER_TAG: "owned", "aws:eks:cluster-name": PARAMS["ClusterName"]}
    contexts, action = [other], iam.split(":")[1]
    if iam.startswith("elasticloadbalancing") and action != "AddTags":
        contexts.append(built_in)
    if ":security-group/" in arn and action not in NODE_GROUP_RULES:
        contexts.append(eks_sg)
    return [_context("ResourceTag", c, "") for c in contexts]


def _adopt_nlb(stack: Stack, svc: dict[str, Any]) -> str:
    """What cloud-provider-aws leaves for a one-port NLB Service; the operator tags its listener (migration.md)."""
    assert stack.world is not None
    elbv2, uid = stack.aws("elbv2"), svc["metadata"]["uid"]
    upstream = [
        {"Key": _cluster(stack), "Value": "owned"},
        {"Key": "kubernetes.io/service-name", "Value": f"default/{svc['metadata']['name']}"},
    ]
    node_port = svc["spec"]["ports"][0]["nodePort"]
    lb = elbv2.create_load_balancer(
        Name=("a" + uid.replace("-", ""))[:32],
        Type="network",
        Scheme="internet-facing",
        Subnets=sorted(stack.world.public_subnets.values()),
        Tags=upstream,
    )["LoadBalancers"][0]
    theirs = elbv2.create_target_group(
        Name="k8s-default-iamnlb-0123456789", Protocol="TCP", Port=node_port, VpcId=stack.world.vpc_id, Tags=upstream
    )["TargetGroups"][0]["TargetGroupArn"]
    elbv2.register_targets(
        TargetGroupArn=theirs, Targets=[{"Id": i, "Port": node_port} for i in stack.state()["instances"]]
    )
    listener = elbv2.create_listener(
        LoadBalancerArn=lb["LoadBalancerArn"],
        Port=80,
        Protocol="TCP",
        DefaultActions=[{"Type": "forward", "TargetGroupArn": theirs}],
    )["Listeners"][0]["ListenerArn"]
    elbv2.add_tags(ResourceArns=[listener], Tags=upstream[:1])
    return theirs


def _scenario(stack: Stack) -> None:
    runner = stack.runner
    assert runner is not None
    for name, lb_type in (("iam-nlb", "nlb"), ("iam-clb", "clb")):
        create_lb_service(stack, name, [80, 443], {A + "type": lb_type})
        stack.wait_for(lambda n=name: hostname(stack, n), timeout=60, what=f"{name} hostname")
        annotate(stack, name, {A + "healthcheck-interval": "20"})
    # Adoption: the Services exist, with their load balancers, before our reconciler sees them.
    runner.pause()
    try:
        create_lb_service(stack, "legacy", [80, 443])
        made_by_cloud_provider_aws(stack, read_service(stack, "legacy"))  # type: ignore[arg-type]
        create_lb_service(stack, "iam-adopted", [80], {A + "type": "nlb"})
        theirs = _adopt_nlb(stack, read_service(stack, "iam-adopted"))  # type: ignore[arg-type]
    finally:
        runner.resume()
    elbv2 = stack.aws("elbv2")

    def their_group_gone() -> bool:
        return theirs not in {tg["TargetGroupArn"] for tg in elbv2.describe_target_groups()["TargetGroups"]}

    stack.wait_for(their_group_gone, timeout=120, what="the adopted NLB's upstream target group replaced")
    runner.drain(60)
    names = ("iam-nlb", "iam-clb", "legacy", "iam-adopted")
    gone(stack, *[read_service(stack, n) for n in names])  # type: ignore[misc]
    runner.drain(60)
    scheduled = {"version": "0", "id": str(uuid.uuid4()), "detail-type": "Scheduled Event", "source": "aws.events"}
    swept = runner.invoke("SweeperFunction", {**scheduled, "time": time.strftime("%Y-%m-%dT%H:%M:%SZ")})
    assert swept is not None and "error" not in swept, swept
    # Then `sam delete`: CloudFormation deletes the teardown custom resource (issue 22), as it would.
    cloudformation = CloudFormation()
    try:
        event = {**cloudformation.event("Delete"), "ResourceProperties": {"ClusterName": stack.config.cluster_name}}
        torn = runner.invoke("TeardownFunction", event)
    finally:
        cloudformation.server.shutdown()
    assert torn is not None and torn.get("response", {}).get("Status") == "SUCCESS", torn
    assert [r["Status"] for r in cloudformation.responses] == ["SUCCESS"]
    ours = [
        {"Name": f"tag:{_cluster(stack)}", "Values": ["owned"]},
        {"Name": "tag-key", "Values": ["serverless-ccm/role"]},
    ]
    assert stack.aws("ec2").describe_security_groups(Filters=ours)["SecurityGroups"] == []  # nothing left behind


@pytest.mark.timeout(480)  # four Services created, adopted and deleted, each delete waiting out AWS's group hold
def test_every_call_is_allowed_to_the_role_that_made_it_and_writes_are_denied_on_foreign_resources(
    stack: Stack,
    translated: dict[str, Any],
) -> None:
    _scenario(stack)
    recorded = call_log.calls()
    # The event source mapping's own calls (receive, delete) are Lambda's, authorised by the AWS managed
    # AWSLambdaSQSQueueExecutionRole SAM attaches; everything else is the functions' code.
    esm = {"ReceiveMessage", "DeleteMessage", "DeleteMessageBatch", "GetQueueAttributes"}
    made = [c for c in recorded if c.access_key in FUNCTION_OF_KEY and not (c.service == "sqs" and c.action in esm)]
    statements = {kind: role_statements(translated, ROLES[kind]) for kind in ROLE_OF.values() if kind in ROLES}  # type: ignore[index]
    statements["teardown"] = role_statements(translated, "TeardownFunctionRole")
    cluster_tag = _cluster(stack)
    by_role: dict[str, set[str]] = {}
    denied_ours, allowed_foreign, seen = [], [], set()
    for call in made:
        role = ROLE_OF[FUNCTION_OF_KEY[call.access_key]]
        for iam, arn, context in _checks(call, cluster_tag):
            if (role, iam, arn, json.dumps(context, sort_keys=True)) in seen:
                continue
            seen.add((role, iam, arn, json.dumps(context, sort_keys=True)))
            by_role.setdefault(role, set()).add(iam)
            if not allowed(statements[role], iam, arn, context):  # type: ignore[index]
                denied_ours.append(f"{role}: {iam} on {arn} {json.dumps(context)}")
            verb = iam.split(":")[1]
            creating = verb.startswith(("Create", "Describe", "Get", "List")) or any(
                "CreateAction" in k for k in context
            )
            if arn.endswith("*") or not context or creating:
                continue  # reads, and creates (no resource yet: their request-tag condition is what scopes them)
            extra = {k: v for k, v in context.items() if not k.startswith(("aws:ResourceTag", "ec2:ResourceTag"))}
            for other in _foreign(iam, arn):
                if allowed(statements[role], iam, arn, {**other, **extra}):  # type: ignore[index]
                    allowed_foreign.append(f"{role}: {iam} on {json.dumps(other)}")
    actions = {a for calls in by_role.values() for a in calls}
    # The scenario really covers what it claims (else the evaluation proves little).
    assert {"elasticloadbalancing:CreateLoadBalancer", "elasticloadbalancing:DeleteLoadBalancer"} <= by_role["services"]
    assert {"ec2:CreateSecurityGroup", "ec2:DeleteSecurityGroup", "ec2:AuthorizeSecurityGroupIngress"} <= actions
    assert {"elasticloadbalancing:AddTags", "ec2:CreateTags", "elasticloadbalancing:DeleteTargetGroup"} <= actions
    assert {"ec2:CreateRoute", "ec2:ModifyInstanceAttribute"} <= by_role["routes"]
    assert "sweeper" in by_role and "nodes" in by_role
    assert {"ec2:DeleteSecurityGroup", "ec2:RevokeSecurityGroupIngress"} <= by_role["teardown"]
    assert not denied_ours, "calls the role that made them may not make:\n" + "\n".join(sorted(denied_ours))
    assert not allowed_foreign, "writes allowed on resources that are not ours:\n" + "\n".join(sorted(allowed_foreign))
    print(f"{len(made)} calls evaluated: {json.dumps({r: sorted(a) for r, a in by_role.items()}, indent=1)}")
