"""All checks over gathered facts (pure): which run depends on the phase (before or after `sam deploy`)."""

from __future__ import annotations

from ccm.doctor.access import check_access_entries, check_queues, check_rbac
from ccm.doctor.facts import Facts
from ccm.doctor.findings import Finding, fail, ok
from ccm.doctor.network import check_network
from ccm.doctor.permissions import Arns, evaluate, missing_role_findings
from ccm.doctor.watcher import check_watcher, install_fix


def run_checks(facts: Facts, arns: Arns | None = None) -> list[Finding]:
    findings: list[Finding] = []
    if facts.stack is not None:
        findings.append(ok("stack", f"{facts.stack.name}: {len(facts.stack.resources)} resources"))
    elif facts.after_deploy:
        findings.append(
            fail(
                "stack",
                f"stack not readable: {facts.stack_error or 'no --stack given'}",
                "pass --stack <name> (sam deploy's stack_name) and the region it was deployed to",
            )
        )
    if facts.network is not None:
        findings += check_network(facts.cluster, facts.network, facts.routes_enabled)
    else:
        findings.append(
            fail(
                "network",
                f"the VPC could not be examined: {facts.network_error}",
                "pass --vpc-id, or make eks:DescribeCluster / ec2:Describe* available to the caller",
            )
        )
    if not facts.after_deploy:
        return findings
    findings += missing_role_findings(facts.missing_roles)
    for role in facts.roles:
        findings += evaluate(role, arns or Arns("aws", facts.region, "", facts.cluster))
    if facts.stack is not None:
        findings += check_queues(facts.queues)
        findings += check_access_entries(
            facts.access_entries, facts.kube_auth_mode, facts.cluster_auth_mode, facts.cluster
        )
    fix = facts.watcher.install_fix if facts.watcher is not None else install_fix(None, None)
    findings += check_rbac(facts.rbac, facts.rbac_error, fix)
    if facts.watcher is not None:
        findings += check_watcher(facts.watcher, facts.stack)
    return findings
