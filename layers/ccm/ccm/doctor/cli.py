"""`python -m ccm.doctor`: gather (boto3, the caller's kubeconfig), check, print, exit 1 on any fail."""

from __future__ import annotations

import argparse
import datetime
import os
import sys
from collections.abc import Sequence
from pathlib import Path

import boto3

from ccm.doctor import gather as g
from ccm.doctor.access import LAMBDA_GROUPS, LAMBDA_RULES, WATCHER_RULES
from ccm.doctor.checks import run_checks
from ccm.doctor.facts import Facts, RoleFacts, RoleKind, WatcherFacts
from ccm.doctor.findings import Finding, exit_code, fail, to_json, to_table, unknown
from ccm.doctor.permissions import Arns
from ccm.doctor.profile import check_profile, profile_parameters
from ccm.doctor.watcher import install_fix

WATCHER_NAMESPACE, WATCHER_SERVICE_ACCOUNT = "serverless-ccm", "serverless-ccm-watcher"  # deploy/base
WATCHER_DEPLOYMENT = "serverless-ccm-watcher"  # deploy/base/deployment.yaml, in the service account's namespace


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m ccm.doctor",
        description="Checks an environment for serverless-ccm before/after sam deploy (read-only) and prints what "
        "to fix. Exit code 1 on any FAIL; WARN and UNKNOWN do not fail.",
    )
    p.add_argument("--cluster", required=True, help="cluster name (the kubernetes.io/cluster/<name> tag)")
    # The doctor is an operator's CLI, not a function: its flags default to the operator's own environment.
    p.add_argument("--region", default=os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION"))
    p.add_argument("--stack", help="the CloudFormation stack name (sam deploy's stack_name)")
    phase = p.add_mutually_exclusive_group()
    phase.add_argument("--before-deploy", action="store_true", help="network checks only; no stack needed")
    phase.add_argument("--after-deploy", action="store_true", help="everything (the default)")
    p.add_argument("--vpc-id", help="default: the stack's VpcId parameter, else the EKS cluster's VPC")
    p.add_argument("--routes", action="store_true", help="before deploy: you will deploy with EnableRoutes=true")
    p.add_argument("--watcher-role-arn", help="the watcher's IAM role when it is not part of the stack")
    p.add_argument("--kubeconfig", default=os.environ.get("KUBECONFIG"), help="for the RBAC checks")
    p.add_argument("--no-kube", action="store_true", help="skip the Kubernetes RBAC checks")
    p.add_argument(
        "--watcher-service-account",
        default=f"{WATCHER_NAMESPACE}/{WATCHER_SERVICE_ACCOUNT}",
        help="namespace/name of the watcher's ServiceAccount",
    )
    p.add_argument(
        "--config-env",
        help="with --stack: the samconfig.toml profile it was deployed with; every parameter the profile sets must "
        "be what the stack has (--parameter-overrides on the command line replaces a profile's list)",
    )
    p.add_argument("--samconfig", default="samconfig.toml", help="where the profiles are (with --config-env)")
    p.add_argument(
        "--overlay",
        help="the kustomize directory the watcher was applied from (scripts/install-watcher passes its generated "
        "one): the fixes name it",
    )
    p.add_argument("--json", action="store_true", help="machine-readable output")
    return p.parse_args(argv)


def collect(
    args: argparse.Namespace, session: boto3.session.Session, checker: g.AccessChecker | None = None
) -> tuple[Facts, Arns | None]:
    after = not args.before_deploy
    facts = Facts(args.cluster, session.region_name or "", after_deploy=after, routes_enabled=args.routes)
    if args.stack:
        try:
            facts.stack = g.gather_stack(session.client("cloudformation"), args.stack)
            facts.routes_enabled = facts.stack.routes_enabled
            facts.kube_auth_mode = facts.stack.parameters.get("KubeAuthMode", "eks")
        except g.ERRORS as err:
            facts.stack_error = g._describe(err)
    eks = session.client("eks")
    vpc_id = args.vpc_id or (facts.stack.parameters.get("VpcId") if facts.stack else None) or _eks_vpc(eks, facts)
    if vpc_id:
        try:
            facts.network = g.gather_network(session.client("ec2"), args.cluster, vpc_id)
        except g.ERRORS as err:
            facts.network_error = g._describe(err)
    else:
        facts.network_error = facts.network_error or "no --vpc-id, no stack VpcId parameter, no EKS cluster VPC"
    if not after:
        return facts, None
    arns, roles = _gather_iam(args, session, facts, vpc_id or "")
    if facts.stack:
        facts.queues = g.gather_queues(session.client("sqs"), facts.stack)
        facts.access_entries = g.gather_access_entries(eks, args.cluster, roles)
        facts.cluster_auth_mode = g.cluster_auth_mode(eks, args.cluster)
    if facts.stack:
        facts.watcher = _gather_watcher(args, session, facts.stack.outputs.get("ServicesQueueUrl"))
    if args.no_kube:
        facts.rbac_error = "skipped (--no-kube)"
    else:
        try:
            check = checker or g.kube_access_checker(args.kubeconfig)
            namespace, _, name = args.watcher_service_account.partition("/")
            groups = {LAMBDA_GROUPS[kind]: LAMBDA_RULES[kind] for kind in _function_kinds(facts)}
            facts.rbac = g.gather_rbac(check, groups, (namespace, name), WATCHER_RULES)
        except Exception as err:  # no kubeconfig, unreachable cluster: the RBAC check says unknown
            facts.rbac_error = g._describe(err)
    return facts, arns


def _function_kinds(facts: Facts) -> list[RoleKind]:
    """The functions the stack deploys (all four without a stack to read)."""
    if facts.stack is None:
        return ["services", "nodes", "routes", "sweeper"]
    kinds: list[RoleKind] = ["services"]
    if facts.stack.nodes_enabled:
        kinds.append("nodes")
    if facts.routes_enabled:
        kinds.append("routes")
    if facts.stack.sweeper_enabled:
        kinds.append("sweeper")
    return kinds


def _gather_watcher(
    args: argparse.Namespace, session: boto3.session.Session, services_queue_url: str | None
) -> WatcherFacts:
    namespace = args.watcher_service_account.partition("/")[0]
    read: g.KubeReader | None = None
    error = "skipped (--no-kube)" if args.no_kube else None
    if not args.no_kube:
        try:
            read = g.kube_reader(args.kubeconfig)
        except Exception as err:  # no kubeconfig: the watcher's pods are unknown, its heartbeats still checked
            error = g._describe(err)
    facts = g.gather_watcher(read, namespace, WATCHER_DEPLOYMENT, error)
    facts.install_fix = install_fix(args.overlay, args.stack)
    if services_queue_url is None:
        facts.heartbeat_error = "the stack has no ServicesQueueUrl output"
    else:
        now = datetime.datetime.now(datetime.UTC)
        g.gather_heartbeats(session.client("cloudwatch"), facts, now, services_queue_url)
    return facts


def _gather_iam(
    args: argparse.Namespace, session: boto3.session.Session, facts: Facts, vpc_id: str
) -> tuple[Arns | None, dict[RoleKind, str]]:
    """The roles (from the stack, or --watcher-role-arn) and their simulated decisions; errors end up on the facts."""
    roles: dict[RoleKind, str] = {"watcher": args.watcher_role_arn} if args.watcher_role_arn else {}
    if facts.stack is not None:
        wanted: list[RoleKind] = [*_function_kinds(facts), "watcher"]
        try:
            roles = g.role_arns(facts.stack, session.client("iam"), args.watcher_role_arn)
        except g.ERRORS as err:
            facts.stack_error = f"roles of the stack: {g._describe(err)}"
        facts.missing_roles = [kind for kind in wanted if kind not in roles]
    try:
        arns = g.arns_for(session, facts, vpc_id)
    except g.ERRORS as err:
        facts.roles = [
            RoleFacts(kind, arn, error=f"sts:GetCallerIdentity: {g._describe(err)}") for kind, arn in roles.items()
        ]
        return None, roles
    facts.roles = [g.simulate(session.client("iam"), kind, arn, arns) for kind, arn in roles.items()]
    return arns, roles


def _eks_vpc(eks: object, facts: Facts) -> str | None:
    try:
        cluster = eks.describe_cluster(name=facts.cluster)["cluster"]  # type: ignore[attr-defined]
    except g.ERRORS as err:
        facts.network_error = f"eks:DescribeCluster {facts.cluster}: {g._describe(err)}"
        return None
    vpc = (cluster.get("resourcesVpcConfig") or {}).get("vpcId")
    return str(vpc) if vpc else None


def run(argv: Sequence[str] | None = None, checker: g.AccessChecker | None = None) -> tuple[list[Finding], str]:
    args = parse_args(argv)
    session = boto3.session.Session(region_name=args.region)
    facts, arns = collect(args, session, checker)
    findings = run_checks(facts, arns)
    if args.config_env:
        findings += _profile_findings(args, facts)
    return findings, (to_json(findings) if args.json else to_table(findings))


def _profile_findings(args: argparse.Namespace, facts: Facts) -> list[Finding]:
    if facts.stack is None:
        return [unknown("samconfig.profile", "no stack read (give --stack)")]
    try:
        wanted = profile_parameters(Path(args.samconfig), args.config_env)
    except (OSError, KeyError, ValueError) as err:
        return [fail("samconfig.profile", f"{args.samconfig} [{args.config_env}]: {err!r}", "check --samconfig")]
    return check_profile(args.config_env, wanted, facts.stack.parameters)


def main(argv: Sequence[str] | None = None) -> int:
    findings, text = run(argv)
    sys.stdout.write(text + "\n")
    return exit_code(findings)
