"""IAM: what each role must (and must not) be allowed, probed with iam:SimulatePrincipalPolicy.

The table mirrors the calls the code makes (`ccm/aws/*`, the handlers, the watcher's sender) and the tag conditions
of template.yaml: a mutating ELB/EC2 call is probed twice, WITH the cluster tag in the request/resource context
(must be allowed) and WITHOUT it (must be denied: least privilege). One simulation request per (resource, context)
pair; `evaluate` is pure and turns the decisions into findings.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from ccm.aws.applied import PARTITION as APPLIED
from ccm.aws.names import SERVICE_UID_TAG, cluster_tag_key
from ccm.doctor.facts import RoleFacts, RoleKind
from ccm.doctor.findings import Finding, fail, ok, unknown, warn

REQUEST_TAG, RESOURCE_TAG, CREATE_SG, NONE = "request-tag", "resource-tag", "create-sg-tagged", "untagged"
CREATE_RULE = "create-rule-tagged"  # CreateTags as part of AuthorizeSecurityGroupIngress (a tagged node rule)
# OURS: the cluster tag AND our Service UID tag (only we write it); RESOURCE_TAG alone is a cluster resource that is
# not ours (the EKS cluster security group, the built-in service controller's load balancers): deletes are denied.
OURS, ADOPT, SLR_ELB, SLR_OTHER = "ours", "adopt-uid-tag", "slr-elb", "slr-other"
SOURCE_DEST_CHECK, OTHER_ATTRIBUTE = "resource-tag-sourcedestcheck", "resource-tag-userdata"
# The cluster's shared groups (ccm/aws/shared_groups.py): cluster-owned with a role tag only CreateSecurityGroup sets.
LEGACY_FRONTEND, LISTENER_GROUP, BACKEND_GROUP = (
    "shared-frontend-default",
    "shared-frontend-listeners",
    "shared-backend",
)
# dynamodb:LeadingKeys of an item-level write: the checkpoint partition (ccm/aws/applied.py) or a membership item's
APPLIED_PARTITION, NODE_PARTITION = "leading-key-applied", "leading-key-node"

LB, TG, LISTENER, SG, SG_RULE, VPC, ROUTE_TABLE, INSTANCE = (
    "lb",
    "tg",
    "listener",
    "sg",
    "sg-rule",
    "vpc",
    "route-table",
    "instance",
)
SERVICES_QUEUE, NODES_QUEUE, ROUTES_QUEUE, TABLE, CLUSTER, ANY, SLR = (
    "services-queue",
    "nodes-queue",
    "routes-queue",
    "membership-table",
    "cluster",
    "*",
    "elb-service-linked-role",
)


@dataclass(frozen=True)
class Probe:
    role: RoleKind
    action: str
    resource: str  # a placeholder above, resolved by `Arns`
    context: str = NONE
    allowed: bool = True  # expected decision

    @property
    def key(self) -> tuple[str, str, str]:
        return (self.action, self.resource, self.context)


def _both(role: RoleKind, action: str, resource: str, context: str) -> list[Probe]:
    """A tag-conditioned write: allowed with the cluster tag, denied without it."""
    return [Probe(role, action, resource, context), Probe(role, action, resource, NONE, allowed=False)]


def _ours(role: RoleKind, action: str, resource: str) -> list[Probe]:
    """A write on what we made: allowed with our UID tag, denied on a cluster resource without it (and untagged)."""
    return [
        Probe(role, action, resource, OURS),
        Probe(role, action, resource, RESOURCE_TAG, allowed=False),
        Probe(role, action, resource, NONE, allowed=False),
    ]


ELB = "elasticloadbalancing:"
PROBES: tuple[Probe, ...] = (
    # service reconciler: ELB (NLB + Classic) and security groups, tag-scoped
    *_both("services", ELB + "CreateLoadBalancer", LB, REQUEST_TAG),
    *_both("services", ELB + "CreateTargetGroup", TG, REQUEST_TAG),
    *_ours("services", ELB + "DeleteLoadBalancer", LB),
    # adoption: our UID tag on a cluster-tagged LB that cloud-provider-aws made
    *_both("services", ELB + "AddTags", LB, ADOPT),
    Probe("services", "iam:CreateServiceLinkedRole", SLR, SLR_ELB),  # the first ELB of an account
    Probe("services", "iam:CreateServiceLinkedRole", SLR, SLR_OTHER, allowed=False),
    *(
        Probe("services", ELB + action, resource, OURS)
        for action, resource in (
            ("CreateListener", LB),
            ("ModifyListener", LISTENER),
            ("DeleteListener", LISTENER),
            ("DeleteTargetGroup", TG),
            ("ModifyTargetGroup", TG),
            ("ModifyTargetGroupAttributes", TG),
            ("ModifyLoadBalancerAttributes", LB),
            ("RegisterTargets", TG),
            ("DeregisterTargets", TG),
            ("SetSecurityGroups", LB),
            ("RegisterInstancesWithLoadBalancer", LB),
            ("DeregisterInstancesFromLoadBalancer", LB),
            ("CreateLoadBalancerListeners", LB),
            ("ConfigureHealthCheck", LB),
        )
    ),
    *_both("services", "ec2:CreateSecurityGroup", SG, REQUEST_TAG),
    Probe("services", "ec2:CreateSecurityGroup", VPC),
    Probe("services", "ec2:CreateTags", SG, CREATE_SG),
    *_both("services", "ec2:AuthorizeSecurityGroupIngress", SG, RESOURCE_TAG),
    Probe("services", "ec2:RevokeSecurityGroupIngress", SG, RESOURCE_TAG),
    # the node rule is tagged on creation (and only then); a rule is revoked by id only if it carries the tag
    *_both("services", "ec2:AuthorizeSecurityGroupIngress", SG_RULE, REQUEST_TAG),
    Probe("services", "ec2:CreateTags", SG_RULE, CREATE_RULE),
    Probe("services", "ec2:CreateTags", SG_RULE, CREATE_SG, allowed=False),  # not from another create
    Probe("services", "ec2:CreateTags", SG_RULE, NONE, allowed=False),
    *_both("services", "ec2:RevokeSecurityGroupIngress", SG_RULE, RESOURCE_TAG),
    *_ours("services", "ec2:DeleteSecurityGroup", SG),
    # the all-ports group of 0.2, once no LB carries it; never a listener group (the sweeper's) nor the backend
    Probe("services", "ec2:DeleteSecurityGroup", SG, LEGACY_FRONTEND),
    Probe("services", "ec2:DeleteSecurityGroup", SG, LISTENER_GROUP, allowed=False),
    Probe("services", "ec2:DeleteSecurityGroup", SG, BACKEND_GROUP, allowed=False),
    *(
        Probe("services", action, ANY)
        for action in (
            ELB + "DescribeLoadBalancers",
            ELB + "DescribeTargetGroups",
            "ec2:DescribeSubnets",
            "ec2:DescribeRouteTables",
            "ec2:DescribeSecurityGroups",
            "ec2:DescribeSecurityGroupRules",
            "ec2:DescribeInstances",
            "ec2:DescribeManagedPrefixLists",
            "ec2:DescribeVpcs",  # the clients of an internal NLB without security groups (ccm.aws.nlb_node_rules)
            "tag:GetResources",
        )
    ),
    Probe("services", "dynamodb:Query", TABLE),
    # the checkpoint's target set is rewritten in place; UpdateItem is granted on that partition only
    Probe("services", "dynamodb:UpdateItem", TABLE, APPLIED_PARTITION),
    Probe("services", "dynamodb:UpdateItem", TABLE, NODE_PARTITION, allowed=False),
    Probe("services", "sqs:ChangeMessageVisibility", SERVICES_QUEUE),
    # The event source mapping receives with the function's role: its own queue only (OnlyOwnQueue).
    Probe("services", "sqs:ReceiveMessage", SERVICES_QUEUE),
    Probe("services", "sqs:ReceiveMessage", NODES_QUEUE, allowed=False),
    Probe("services", "sqs:DeleteMessage", ROUTES_QUEUE, allowed=False),
    Probe("services", "eks:DescribeCluster", CLUSTER),
    # nodes Lambda: reads instances, membership table, HOSTS messages to the services queue
    Probe("nodes", "ec2:DescribeInstances", ANY),
    Probe("nodes", "dynamodb:PutItem", TABLE),
    Probe("nodes", "sqs:SendMessage", SERVICES_QUEUE),
    Probe("nodes", "sqs:ChangeMessageVisibility", NODES_QUEUE),
    Probe("nodes", "sqs:ReceiveMessage", NODES_QUEUE),
    Probe("nodes", "sqs:ReceiveMessage", SERVICES_QUEUE, allowed=False),
    Probe("nodes", "eks:DescribeCluster", CLUSTER),
    Probe("nodes", "ec2:TerminateInstances", INSTANCE, RESOURCE_TAG, allowed=False),
    # route reconciler (EnableRoutes=true)
    *_both("routes", "ec2:CreateRoute", ROUTE_TABLE, RESOURCE_TAG),
    Probe("routes", "ec2:ReplaceRoute", ROUTE_TABLE, RESOURCE_TAG),
    Probe("routes", "ec2:DeleteRoute", ROUTE_TABLE, RESOURCE_TAG),
    *_both("routes", "ec2:ModifyInstanceAttribute", INSTANCE, SOURCE_DEST_CHECK),
    Probe("routes", "ec2:ModifyInstanceAttribute", INSTANCE, OTHER_ATTRIBUTE, allowed=False),
    Probe("routes", "ec2:DescribeRouteTables", ANY),
    Probe("routes", "sqs:ChangeMessageVisibility", ROUTES_QUEUE),
    Probe("routes", "sqs:ReceiveMessage", ROUTES_QUEUE),
    Probe("routes", "sqs:DeleteMessage", SERVICES_QUEUE, allowed=False),
    # sweeper: deletes only what is cluster-owned; reads; re-enqueues drifted Services
    *_ours("sweeper", ELB + "DeleteLoadBalancer", LB),
    Probe("sweeper", ELB + "DeleteTargetGroup", TG, OURS),
    *_ours("sweeper", "ec2:DeleteSecurityGroup", SG),
    # listener groups no load balancer carries any more, the legacy all-ports group; the backend only at uninstall
    Probe("sweeper", "ec2:DeleteSecurityGroup", SG, LISTENER_GROUP),
    Probe("sweeper", "ec2:DeleteSecurityGroup", SG, LEGACY_FRONTEND),
    Probe("sweeper", "ec2:DeleteSecurityGroup", SG, BACKEND_GROUP, allowed=False),
    Probe("sweeper", "ec2:RevokeSecurityGroupIngress", SG, RESOURCE_TAG),
    *_both("sweeper", "ec2:RevokeSecurityGroupIngress", SG_RULE, RESOURCE_TAG),
    Probe("sweeper", "ec2:DescribeSecurityGroupRules", ANY),
    Probe("sweeper", ELB + "DescribeListeners", ANY),
    Probe("sweeper", "tag:GetResources", ANY),
    Probe("sweeper", "sqs:SendMessage", SERVICES_QUEUE),
    Probe("sweeper", "eks:DescribeCluster", CLUSTER),
    Probe("sweeper", ELB + "CreateLoadBalancer", LB, REQUEST_TAG, allowed=False),
    # watcher: send deltas, nothing else
    Probe("watcher", "sqs:SendMessage", SERVICES_QUEUE),
    Probe("watcher", "sqs:SendMessage", NODES_QUEUE),
    Probe("watcher", "sqs:ReceiveMessage", SERVICES_QUEUE, allowed=False),
    Probe("watcher", "sqs:DeleteQueue", SERVICES_QUEUE, allowed=False),
    Probe("watcher", ELB + "DeleteLoadBalancer", LB, RESOURCE_TAG, allowed=False),
)


@dataclass(frozen=True)
class Arns:
    """Resolves the placeholders for one account; a placeholder without a known ARN drops its probes."""

    partition: str
    region: str
    account: str
    cluster: str
    vpc_id: str = ""
    queues: tuple[tuple[str, str], ...] = ()  # (placeholder, queue ARN)
    table_arn: str = ""

    def resolve(self, placeholder: str) -> str | None:
        p, r, a = self.partition, self.region, self.account
        fixed = {
            ANY: "*",
            LB: f"arn:{p}:elasticloadbalancing:{r}:{a}:loadbalancer/net/doctor-probe/0123456789abcdef",
            TG: f"arn:{p}:elasticloadbalancing:{r}:{a}:targetgroup/doctor-probe/0123456789abcdef",
            LISTENER: f"arn:{p}:elasticloadbalancing:{r}:{a}:listener/net/doctor-probe/0123456789abcdef/0123456789ab",
            SG: f"arn:{p}:ec2:{r}:{a}:security-group/sg-0doctorprobe",
            SG_RULE: f"arn:{p}:ec2:{r}:{a}:security-group-rule/sgr-0doctorprobe",
            ROUTE_TABLE: f"arn:{p}:ec2:{r}:{a}:route-table/rtb-0doctorprobe",
            INSTANCE: f"arn:{p}:ec2:{r}:{a}:instance/i-0doctorprobe",
            CLUSTER: f"arn:{p}:eks:{r}:{a}:cluster/{self.cluster}",
            SLR: f"arn:{p}:iam::{a}:role/aws-service-role/elasticloadbalancing.amazonaws.com/"
            "AWSServiceRoleForElasticLoadBalancing",
            VPC: f"arn:{p}:ec2:{r}:{a}:vpc/{self.vpc_id}" if self.vpc_id else "",
            TABLE: self.table_arn,
        }
        fixed.update(self.queues)
        return fixed.get(placeholder) or None


def context_entries(context: str, cluster: str) -> list[dict[str, object]]:
    """ContextEntries for SimulatePrincipalPolicy: the cluster tag on the request or on the resource."""

    def entry(key: str, value: str) -> dict[str, object]:
        return {"ContextKeyName": key, "ContextKeyValues": [value], "ContextKeyType": "string"}

    tag = cluster_tag_key(cluster)
    cluster_resource = [entry(f"aws:ResourceTag/{tag}", "owned"), entry(f"ec2:ResourceTag/{tag}", "owned")]
    if context == REQUEST_TAG:
        return [entry(f"aws:RequestTag/{tag}", "owned"), entry("aws:TagKeys", tag)]
    if context == RESOURCE_TAG:
        return cluster_resource
    if context == OURS:
        uid = "00000000-0000-4000-8000-doctorprobe0"
        return [
            *cluster_resource,
            entry(f"aws:ResourceTag/{SERVICE_UID_TAG}", uid),
            entry(f"ec2:ResourceTag/{SERVICE_UID_TAG}", uid),
        ]
    if context in (LEGACY_FRONTEND, LISTENER_GROUP, BACKEND_GROUP):
        role = context.removeprefix("shared-")
        return [
            *cluster_resource,
            entry("aws:ResourceTag/serverless-ccm/role", role),
            entry("ec2:ResourceTag/serverless-ccm/role", role),
        ]
    if context == ADOPT:
        return [*cluster_resource, entry("aws:TagKeys", SERVICE_UID_TAG)]
    if context in (SLR_ELB, SLR_OTHER):
        service = "elasticloadbalancing" if context == SLR_ELB else "ec2"
        return [entry("iam:AWSServiceName", f"{service}.amazonaws.com")]
    if context in (SOURCE_DEST_CHECK, OTHER_ATTRIBUTE):
        attribute = "SourceDestCheck" if context == SOURCE_DEST_CHECK else "UserData"
        return [*cluster_resource, entry("ec2:Attribute", attribute)]
    if context in (APPLIED_PARTITION, NODE_PARTITION):
        return [entry("dynamodb:LeadingKeys", APPLIED if context == APPLIED_PARTITION else "node")]
    if context == CREATE_SG:
        return [entry(f"aws:RequestTag/{tag}", "owned"), entry("ec2:CreateAction", "CreateSecurityGroup")]
    if context == CREATE_RULE:
        return [entry(f"aws:RequestTag/{tag}", "owned"), entry("ec2:CreateAction", "AuthorizeSecurityGroupIngress")]
    return []


def probes_for(kind: RoleKind, arns: Arns) -> list[tuple[Probe, str]]:
    """The probes of a role with their resolved resource ARN (probes of unknown resources left out)."""
    return [(p, arn) for p in PROBES if p.role == kind and (arn := arns.resolve(p.resource))]


def requests(kind: RoleKind, arns: Arns) -> list[tuple[str, str, list[str]]]:
    """Simulation requests: (resource ARN, context, actions), one per distinct (resource, context)."""
    grouped: dict[tuple[str, str], list[str]] = {}
    for probe, arn in probes_for(kind, arns):
        actions = grouped.setdefault((arn, probe.context), [])
        if probe.action not in actions:
            actions.append(probe.action)
    return [(arn, context, actions) for (arn, context), actions in grouped.items()]


def evaluate(role: RoleFacts, arns: Arns) -> list[Finding]:
    """Compare the simulated decisions with the table: missing permission = fail, excess permission = warn."""
    check = f"iam.{role.kind}"
    if role.error:
        return [
            unknown(
                check,
                f"could not simulate the policies of {role.arn}: {role.error}",
                "run the doctor with a principal allowed iam:SimulatePrincipalPolicy on the stack's roles",
            )
        ]
    missing, excess, unsimulated = [], [], []
    for probe, arn in probes_for(role.kind, arns):
        decision = role.decisions.get((probe.action, arn, probe.context))
        if decision is None:
            unsimulated.append(probe.action)
        elif probe.allowed and decision != "allowed":
            missing.append(_describe(probe, decision))
        elif not probe.allowed and decision == "allowed":
            excess.append(_describe(probe, decision))
    findings: list[Finding] = []
    if missing:
        findings.append(
            fail(
                check,
                f"{role.arn} lacks: {'; '.join(missing)}",
                "deploy the stack's template unchanged (sam deploy); a permissions boundary or SCP may deny too",
            )
        )
    if excess:
        findings.append(
            warn(check, f"{role.arn} is allowed more than it needs: {'; '.join(excess)}", "remove the broader grant")
        )
    if unsimulated:
        findings.append(unknown(check, f"no decision for {', '.join(sorted(set(unsimulated)))}"))
    if not findings:
        n = len(probes_for(role.kind, arns))
        findings.append(ok(check, f"{role.arn}: {n} simulated permissions as expected (tag conditions included)"))
    return findings


def _describe(probe: Probe, decision: str) -> str:
    where = {
        NONE: " untagged",
        REQUEST_TAG: " with the cluster tag in the request",
        RESOURCE_TAG: " on a cluster-tagged resource not ours",
        OURS: " on our resource (cluster and UID tags)",
    }
    return f"{probe.action}{where.get(probe.context, ' (' + probe.context + ')')} -> {decision}"


def missing_role_findings(kinds: Iterable[RoleKind]) -> list[Finding]:
    fixes = {
        "watcher": "pass --watcher-role-arn (the IRSA / Pod Identity role of the watcher's ServiceAccount)",
    }
    # The watcher's role may live outside the stack (IRSA / Pod Identity made by the cluster's owners): unchecked,
    # not failed. A missing function role means the stack is not (fully) deployed.
    return [
        (warn if kind == "watcher" else fail)(
            f"iam.{kind}",
            f"the {kind} role was not found in the stack's outputs or resources",
            fixes.get(kind, "deploy the stack (sam deploy) and pass --stack with its name"),
        )
        for kind in kinds
    ]
