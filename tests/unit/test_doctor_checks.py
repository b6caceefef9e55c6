"""The doctor's pure checks, table-driven over hand-built facts (the shapes EC2/IAM/SQS/EKS return)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from ccm.doctor.access import (
    LAMBDA_GROUPS,
    LAMBDA_RULES,
    WATCHER_RULES,
    check_access_entries,
    check_queues,
    check_rbac,
)
from ccm.doctor.checks import run_checks
from ccm.doctor.facts import AccessEntryFacts, Facts, NetworkFacts, QueueFacts, RbacFacts, RbacRule, RoleFacts
from ccm.doctor.findings import Finding, exit_code, to_json, to_table
from ccm.doctor.gather import gather_rbac, queue_arn
from ccm.doctor.network import check_node_security_group, check_route_tables, check_subnets
from ccm.doctor.permissions import NONE, PROBES, REQUEST_TAG, Arns, context_entries, evaluate, probes_for, requests

CLUSTER = "prod"
TAG = f"kubernetes.io/cluster/{CLUSTER}"


def subnet(sid: str, az: str, *keys: str, value: str = "shared") -> dict[str, Any]:
    """Role tags get "1", cluster tags `value`."""
    tag_list = [{"Key": k, "Value": value if k.startswith("kubernetes.io/cluster/") else "1"} for k in keys]
    return {"SubnetId": sid, "AvailabilityZone": az, "Tags": tag_list}


def table(tid: str, subnets: list[str], igw: bool, *keys: str, main: bool = False) -> dict[str, Any]:
    routes = [{"DestinationCidrBlock": "10.0.0.0/16", "GatewayId": "local"}]
    if igw:
        routes.append({"DestinationCidrBlock": "0.0.0.0/0", "GatewayId": "igw-1"})
    assoc = [{"SubnetId": s} for s in subnets] + ([{"Main": True}] if main else [])
    return {
        "RouteTableId": tid,
        "Routes": routes,
        "Associations": assoc,
        "Tags": [{"Key": k, "Value": ""} for k in keys],
    }


ELB, INTERNAL = "kubernetes.io/role/elb", "kubernetes.io/role/internal-elb"


def instance(az: str, *groups: str) -> dict[str, Any]:
    return {"Placement": {"AvailabilityZone": az}, "SecurityGroups": [{"GroupId": g} for g in groups]}


def sg(gid: str, name: str = "nodes", *extra: str) -> dict[str, Any]:
    return {"GroupId": gid, "GroupName": name, "Tags": [{"Key": k, "Value": "owned"} for k in (TAG, *extra)]}


def net(
    subnets: list[dict[str, Any]] | None = None,
    tables: list[dict[str, Any]] | None = None,
    groups: list[dict[str, Any]] | None = None,
    instances: list[dict[str, Any]] | None = None,
) -> NetworkFacts:
    good_subnets = [
        subnet("subnet-pa", "az-a", ELB, TAG),
        subnet("subnet-pb", "az-b", ELB, TAG),
        subnet("subnet-qa", "az-a", INTERNAL, TAG),
        subnet("subnet-qb", "az-b", INTERNAL, TAG),
    ]
    good_tables = [table("rtb-pub", ["subnet-pa", "subnet-pb"], True), table("rtb-priv", [], False, TAG, main=True)]
    return NetworkFacts(
        "vpc-1",
        good_subnets if subnets is None else subnets,
        good_tables if tables is None else tables,
        [sg("sg-nodes")] if groups is None else groups,
        [instance("az-a", "sg-nodes"), instance("az-b", "sg-nodes")] if instances is None else instances,
    )


def statuses(findings: list[Finding]) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for f in findings:
        out.setdefault(f.check, set()).add(f.status)
    return out


# ---------------------------------------------------------------------------------------------- network


def test_a_well_tagged_vpc_passes_every_network_check() -> None:
    findings = check_subnets(CLUSTER, net()) + check_route_tables(CLUSTER, net(), True)
    findings += check_node_security_group(CLUSTER, net())
    assert {f.status for f in findings} == {"ok"}, findings
    public = next(f for f in findings if f.check == "subnets.public")
    assert "subnet-pa (az-a), subnet-pb (az-b)" in public.message
    private = next(f for f in findings if f.check == "subnets.private")
    assert "subnet-qa" in private.message and "subnet-pa" not in private.message


@pytest.mark.parametrize(
    ("subnets", "check", "status", "in_message", "in_fix"),
    [
        # no role tags: upstream's lowest-ID fallback decides, and the fix names the subnets
        (
            [subnet("subnet-pa", "az-a"), subnet("subnet-pb", "az-b"), subnet("subnet-qa", "az-a", INTERNAL)],
            "subnets.public",
            "warn",
            "lowest-ID fallback",
            "aws ec2 create-tags --resources subnet-pa subnet-pb --tags Key=kubernetes.io/role/elb,Value=1",
        ),
        # private subnets without the internal-elb role
        (
            [subnet("subnet-pa", "az-a", ELB), subnet("subnet-pb", "az-b", ELB), subnet("subnet-qa", "az-a")],
            "subnets.private",
            "warn",
            "lowest-ID fallback",
            "--resources subnet-qa --tags Key=kubernetes.io/role/internal-elb,Value=1",
        ),
        # no private subnet in az-b: internal LBs fall back to a public subnet there
        (
            [subnet("subnet-pa", "az-a", ELB), subnet("subnet-pb", "az-b", ELB), subnet("subnet-qa", "az-a", INTERNAL)],
            "subnets.private",
            "warn",
            "public subnets subnet-pb",
            "create private subnets",
        ),
        # public subnets tagged for another cluster only: unusable
        (
            [subnet("subnet-pa", "az-a", ELB, "kubernetes.io/cluster/other"), subnet("subnet-qa", "az-a", INTERNAL)],
            "subnets.public",
            "fail",
            "no usable public subnet",
            "internet gateway route",
        ),
        # a cluster tag with a value AWS tooling does not know
        (
            [subnet("subnet-pa", "az-a", ELB, TAG, value="yes"), subnet("subnet-pb", "az-b", ELB)],
            "subnets.cluster-tag",
            "warn",
            "neither owned nor shared",
            "Key=kubernetes.io/cluster/prod,Value=shared",
        ),
        # one public zone while nodes run in two
        (
            [
                subnet("subnet-pa", "az-a", ELB),
                subnet("subnet-qa", "az-a", INTERNAL),
                subnet("subnet-qb", "az-b", INTERNAL),
            ],
            "subnets.zones",
            "warn",
            "nodes run in az-b",
            "in az-b",
        ),
        ([], "subnets", "fail", "has no subnets", "create subnets"),
    ],
)
def test_subnet_findings(subnets: list[dict[str, Any]], check: str, status: str, in_message: str, in_fix: str) -> None:
    public = [s["SubnetId"] for s in subnets if s["SubnetId"].startswith("subnet-p")]
    tables = [table("rtb-pub", public, True), table("rtb-main", [], False, main=True)]
    found = [f for f in check_subnets(CLUSTER, net(subnets, tables)) if f.check == check and f.status == status]
    assert any(in_message in f.message and in_fix in f.fix for f in found), check_subnets(CLUSTER, net(subnets, tables))


def test_public_by_main_route_table_counts_as_public() -> None:
    """Same rule as ccm.aws.subnets: a subnet without an explicit association follows the main table."""
    subnets = [subnet("subnet-xa", "az-a", ELB), subnet("subnet-xb", "az-b", ELB)]
    findings = check_subnets(CLUSTER, net(subnets, [table("rtb-main", [], True, main=True)]))
    assert statuses(findings)["subnets.public"] == {"ok"}


@pytest.mark.parametrize(
    ("enabled", "tables", "status", "text"),
    [
        (False, [table("rtb-1", [], False)], "ok", "routes are off"),
        (True, [table("rtb-1", [], False, TAG)], "ok", "rtb-1"),
        (True, [table("rtb-1", [], False), table("rtb-2", [], False)], "fail", "--resources rtb-1 rtb-2"),
    ],
)
def test_route_tables(enabled: bool, tables: list[dict[str, Any]], status: str, text: str) -> None:
    [finding] = check_route_tables(CLUSTER, net(tables=tables), enabled)
    assert finding.status == status and text in finding.message + finding.fix


@pytest.mark.parametrize(
    ("groups", "instances", "status", "text"),
    [
        ([sg("sg-nodes"), sg("sg-lb", "k8s-elb-a123")], [instance("az-a", "sg-nodes")], "ok", "sg-nodes"),
        ([], [instance("az-a", "sg-nodes")], "fail", "--resources sg-nodes --tags Key=kubernetes.io/cluster/prod"),
        # LB groups (ours or upstream's) never count as node groups
        ([sg("sg-x", "other", "kubernetes.io/service-name")], [instance("az-a", "sg-n")], "fail", "sg-n"),
        ([sg("sg-1"), sg("sg-2")], [instance("az-a", "sg-1", "sg-2")], "fail", "several security groups"),
        ([sg("sg-1"), sg("sg-2")], [instance("az-a", "sg-1"), instance("az-b", "sg-2")], "ok", "sg-1, sg-2"),
        ([sg("sg-1"), sg("sg-2")], [], "warn", "no tagged instance"),
        # A second node group without the tag: its nodes are unreachable, their LBs said Ensured.
        (
            [sg("sg-nodes")],
            [instance("az-a", "sg-nodes"), instance("az-b", "sg-spot")],
            "fail",
            "--resources sg-spot --tags Key=kubernetes.io/cluster/prod",
        ),
    ],
)
def test_node_security_group(
    groups: list[dict[str, Any]], instances: list[dict[str, Any]], status: str, text: str
) -> None:
    findings = check_node_security_group(CLUSTER, net(groups=groups, instances=instances))
    verdict = next(f for f in findings if f.check == "node-security-group")
    assert verdict.status == status and text in verdict.message + verdict.fix, verdict
    assert any(f.check == "instances" for f in findings) == (not instances)


# ---------------------------------------------------------------------------------------------- IAM

ARNS = Arns(
    "aws",
    "eu-west-1",
    "111122223333",
    CLUSTER,
    "vpc-1",
    (("services-queue", "arn:aws:sqs:eu-west-1:111122223333:prod-ccm-services.fifo"),),
    "arn:aws:dynamodb:eu-west-1:111122223333:table/t",
)


def decide_as_template(kind: str, overrides: dict[str, str] | None = None) -> RoleFacts:
    """Decisions a correct policy yields: exactly the expected ones, with `overrides` by action+context."""
    role = RoleFacts(kind, f"arn:aws:iam::111122223333:role/{kind}")  # type: ignore[arg-type]
    for probe, arn in probes_for(role.kind, ARNS):
        decision = "allowed" if probe.allowed else "implicitDeny"
        role.decisions[(probe.action, arn, probe.context)] = (overrides or {}).get(
            f"{probe.action}|{probe.context}", decision
        )
    return role


def test_every_probe_resolves_and_writes_are_probed_both_ways() -> None:
    for kind in ("services", "nodes", "watcher"):
        assert probes_for(kind, ARNS)  # type: ignore[arg-type]
    tagged_creates = {p.action for p in PROBES if p.context == REQUEST_TAG}
    denied_untagged = {p.action for p in PROBES if p.context == NONE and not p.allowed}
    assert tagged_creates <= denied_untagged  # least privilege is probed, not only sufficiency


def test_requests_group_actions_by_resource_and_context() -> None:
    reqs = requests("services", ARNS)
    keys = [(arn, ctx) for arn, ctx, _ in reqs]
    assert len(keys) == len(set(keys))
    all_actions = [a for _, _, actions in reqs for a in actions]
    assert len(reqs) < len(all_actions)  # fewer calls than actions
    lb_tagged = next(a for arn, ctx, a in reqs if ctx == REQUEST_TAG and ":loadbalancer/" in arn)
    assert "elasticloadbalancing:CreateLoadBalancer" in lb_tagged


def test_context_entries_carry_the_cluster_tag() -> None:
    names = {e["ContextKeyName"] for e in context_entries(REQUEST_TAG, CLUSTER)}
    assert f"aws:RequestTag/{TAG}" in names
    assert context_entries(NONE, CLUSTER) == []


@pytest.mark.parametrize(
    ("kind", "overrides", "status", "text"),
    [
        ("services", {}, "ok", "as expected"),
        (
            "services",
            {"elasticloadbalancing:CreateLoadBalancer|request-tag": "implicitDeny"},
            "fail",
            "CreateLoadBalancer with the cluster tag in the request -> implicitDeny",
        ),
        (
            "services",
            {"elasticloadbalancing:DeleteLoadBalancer|untagged": "allowed"},
            "warn",
            "DeleteLoadBalancer untagged -> allowed",
        ),
        ("watcher", {"sqs:SendMessage|untagged": "explicitDeny"}, "fail", "sqs:SendMessage"),
        ("watcher", {"sqs:ReceiveMessage|untagged": "allowed"}, "warn", "sqs:ReceiveMessage"),
    ],
)
def test_evaluate_simulation(kind: str, overrides: dict[str, str], status: str, text: str) -> None:
    findings = evaluate(decide_as_template(kind, overrides), ARNS)
    assert any(f.status == status and text in f.message for f in findings), findings


def test_simulation_unavailable_is_unknown_not_fail() -> None:
    role = RoleFacts("services", "arn:aws:iam::1:role/x", error="NotImplementedError: not implemented")
    [finding] = evaluate(role, ARNS)
    assert finding.status == "unknown" and "iam:SimulatePrincipalPolicy" in finding.fix
    assert exit_code([finding]) == 0


def test_missing_decisions_are_unknown() -> None:
    role = RoleFacts("nodes", "arn:aws:iam::1:role/x")
    assert [f.status for f in evaluate(role, ARNS)] == ["unknown"]


# ---------------------------------------------------------------------------------------------- access, RBAC, queues


@pytest.mark.parametrize(
    ("entry", "cluster_mode", "status", "text"),
    [
        (
            AccessEntryFacts("services", "arn:r", ["serverless-ccm:services"]),
            "API",
            "ok",
            "group serverless-ccm:services",
        ),
        (
            AccessEntryFacts("routes", "arn:r", ["serverless-ccm"]),
            "API",
            "fail",
            "--kubernetes-groups serverless-ccm:routes",
        ),
        (
            AccessEntryFacts("sweeper", "arn:r", ["serverless-ccm:sweeper", "serverless-ccm:nodes"]),
            "API",
            "warn",
            "also maps",
        ),
        (AccessEntryFacts("services", "arn:r", None), "API", "fail", "aws eks create-access-entry"),
        (AccessEntryFacts("nodes", "arn:r", ["system:masters"]), None, "fail", "aws eks update-access-entry"),
        (AccessEntryFacts("nodes", "arn:r", error="404: Not yet implemented"), None, "unknown", "could not read"),
        (AccessEntryFacts("nodes", "arn:r", ["serverless-ccm:nodes"]), "CONFIG_MAP", "fail", "authenticationMode="),
    ],
)
def test_access_entries(entry: AccessEntryFacts, cluster_mode: str | None, status: str, text: str) -> None:
    findings = check_access_entries([entry], "eks", cluster_mode, CLUSTER)
    assert any(f.status == status and text in f.message + f.fix for f in findings), findings


def test_access_entries_not_needed_with_a_kubeconfig_secret() -> None:
    [finding] = check_access_entries([], "kubeconfig-secret", None, CLUSTER)
    assert finding.status == "ok"


def test_rbac_findings_from_an_injected_checker() -> None:
    granted = {("get", "services"), ("patch", "services"), ("list", "nodes"), ("get", "secrets"), ("delete", "nodes")}

    def checker(user: str, groups: list[str], rule: RbacRule) -> bool:
        assert groups == ["serverless-ccm:services", "system:authenticated"]
        return (rule.verb, rule.resource) in granted and not rule.subresource

    facts = gather_rbac(checker, {LAMBDA_GROUPS["services"]: LAMBDA_RULES["services"]}, ("ns", "sa"))
    findings = check_rbac(facts, None)
    failed = next(f for f in findings if f.status == "fail")
    assert failed.check == "rbac.group.services"
    assert "patch services/status" in failed.message and "create events" in failed.message
    assert "kubectl apply -k deploy/lambda-rbac" in failed.fix
    excess = next(f for f in findings if f.status == "warn")
    assert "get secrets" in excess.message and "delete nodes" in excess.message  # the nodes function's verb


def test_each_function_must_not_have_what_only_another_needs() -> None:
    needs = {kind: {r for r in rules if r.allowed} for kind, rules in LAMBDA_RULES.items()}
    denied = {
        kind: {RbacRule(r.verb, r.resource, r.subresource) for r in rules if not r.allowed}
        for kind, rules in LAMBDA_RULES.items()
    }
    assert RbacRule("delete", "nodes") in denied["sweeper"] & denied["services"] & denied["routes"]
    assert RbacRule("patch", "services") in denied["routes"] & denied["nodes"] & denied["sweeper"]
    for kind in LAMBDA_RULES:
        assert not needs[kind] & denied[kind], kind


def test_rules_name_their_api_group() -> None:
    """A rule of a named API group carries it (the SubjectAccessReview's resourceAttributes.group); core is ""."""
    services = set(LAMBDA_RULES["services"])
    slices = RbacRule("list", "endpointslices", group="discovery.k8s.io")
    assert {slices, RbacRule("get", "pods"), RbacRule("list", "pods"), RbacRule("patch", "pods", "status")} <= services
    assert str(slices) == "list endpointslices.discovery.k8s.io" and str(RbacRule("patch", "pods", "status")) == (
        "patch pods/status"
    )
    assert {r.group for kind, rules in LAMBDA_RULES.items() for r in rules if kind != "services"} == {""}
    assert {
        RbacRule("list", "endpointslices", group="discovery.k8s.io"),
        RbacRule("watch", "endpointslices", group="discovery.k8s.io"),
    } <= set(WATCHER_RULES)
    for kind in ("nodes", "routes", "sweeper"):  # only the service reconciler writes a pod's readiness gate
        assert RbacRule("patch", "pods", "status", allowed=False) in LAMBDA_RULES[kind], kind


def test_a_grant_in_the_wrong_api_group_is_missing() -> None:
    """endpointslices granted in the core group (apiGroups [""]) is not endpointslices.discovery.k8s.io: the checker
    is asked with the group, and the finding names the resource as kubectl does."""

    def checker(user: str, groups: list[str], rule: RbacRule) -> bool:  # what RBAC answers for that role
        return rule.allowed and rule.group != "discovery.k8s.io"

    [facts] = gather_rbac(checker, {}, ("ns", "sa"), WATCHER_RULES)
    [failed] = check_rbac([facts], None)
    assert failed.status == "fail" and failed.message.endswith(
        "may not: list endpointslices.discovery.k8s.io, watch endpointslices.discovery.k8s.io"
    )


def test_rbac_checker_errors_are_unknown() -> None:
    def broken(user: str, groups: list[str], rule: RbacRule) -> bool:
        raise ConnectionError("refused")

    facts = gather_rbac(broken, {}, ("ns", "sa"), (RbacRule("list", "nodes"),))
    assert [f.status for f in check_rbac(facts, None)] == ["unknown"]
    assert [f.status for f in check_rbac([], "no kubeconfig")] == ["unknown"]


def attrs(**extra: str) -> dict[str, str]:
    base = {"FifoQueue": "true", "SqsManagedSseEnabled": "true", "QueueArn": "arn:aws:sqs:r:1:q-dlq.fifo"}
    return {**base, "ApproximateNumberOfMessages": "0", **extra}


@pytest.mark.parametrize(
    ("queue", "status", "text"),
    [
        (QueueFacts("ServicesQueue", "u", False, attrs(RedrivePolicy="{}")), "ok", "reachable"),
        (
            QueueFacts("ServicesDLQ", "u", True, attrs(ApproximateNumberOfMessages="3")),
            "warn",
            "start-message-move-task",
        ),
        (QueueFacts("ServicesQueue", "u", False, attrs()), "warn", "no dead-letter queue"),
        (QueueFacts("ServicesQueue", "u", False, attrs(FifoQueue="false", RedrivePolicy="{}")), "fail", "not FIFO"),
        (QueueFacts("NodesQueue", "u", False, error="AccessDenied: no"), "fail", "not reachable"),
        (QueueFacts("NodesDLQ", "u", True, attrs(SqsManagedSseEnabled="false")), "warn", "not encrypted"),
    ],
)
def test_queues(queue: QueueFacts, status: str, text: str) -> None:
    findings = check_queues([queue])
    assert any(f.status == status and text in f.message + f.fix for f in findings), findings


def test_queue_arn_from_url() -> None:
    url = "https://sqs.eu-west-1.amazonaws.com/111122223333/prod-ccm-services.fifo"
    assert queue_arn(url) == "arn:aws:sqs:eu-west-1:111122223333:prod-ccm-services.fifo"


# ---------------------------------------------------------------------------------------------- phases and output


def test_before_deploy_runs_only_the_network_checks() -> None:
    facts = Facts(CLUSTER, "eu-west-1", after_deploy=False, routes_enabled=False, network=net())
    findings = run_checks(facts)
    assert {f.check.split(".")[0] for f in findings} == {"subnets", "route-tables", "node-security-group"}
    assert exit_code(findings) == 0


def test_after_deploy_without_a_stack_fails() -> None:
    facts = Facts(CLUSTER, "eu-west-1", after_deploy=True, routes_enabled=False, network=net(), rbac_error="skip")
    findings = run_checks(facts)
    assert statuses(findings)["stack"] == {"fail"} and exit_code(findings) == 1


def test_table_and_json_output() -> None:
    findings = [
        Finding("a.ok", "ok", "fine"),
        Finding("b.fail", "fail", "broken " * 30, "do this\nthen that"),
        Finding("c.warn", "warn", "hm", "maybe"),
    ]
    text = to_table(findings)
    lines = text.splitlines()
    assert lines[1].startswith("FAIL") and "fix: do this" in text and "then that" in text
    assert text.index("WARN") < text.index("OK ")
    assert text.rstrip().endswith("-> FAILED") and all(len(line) <= 120 for line in lines)
    parsed = json.loads(to_json(findings))
    assert parsed["exitCode"] == 1 and parsed["summary"]["fail"] == 1
    assert parsed["findings"][1] == {
        "check": "b.fail",
        "status": "fail",
        "message": "broken " * 30,
        "fix": "do this\nthen that",
    }


def test_rbac_fact_shape() -> None:
    facts = RbacFacts("group g", {RbacRule("list", "nodes"): True})
    assert check_rbac([facts], None)[0].status == "ok"
