"""300 LoadBalancer Services (NLB, 2 TCP ports, default source ranges) converge with AWS quotas enforced, where
the previous design (one rule per LB on the node group, quota 60 inbound rules) stopped at about 55.

The devstack enforces the quotas AWS does (devstack.aws_faithful): 60 inbound rules per security group, and the
Elastic Load Balancing per-Region quotas. ASSUMPTION: the per-Region quota of Network Load Balancers (default 50)
is raised to the number of Services, as a real account does through a Service Quotas request; every other quota
stays at AWS's default. Services are driven in-process through ServiceRuntime.handle_record (no watcher)."""

from __future__ import annotations

import time
from typing import Any

from bench.world import BenchWorld
from ccm.aws import security_groups_model as sgm
from devstack.aws_faithful import FaithfulSettings

PREVIOUS_CEILING_RULES = 60  # the node group's inbound rules quota: one per LB before the backend group


def _security_group_calls(calls: dict[str, int]) -> dict[str, int]:
    return {op: n for op, n in sorted(calls.items()) if op.startswith("ec2:") and "SecurityGroup" in op}


def run(services: int = 300) -> dict[str, Any]:
    faithful = FaithfulSettings(sg_release_seconds=0, max_nlbs_per_region=services)
    bench = BenchWorld(nodes=3, faithful=faithful)
    try:
        start = time.monotonic()
        sg_calls: list[dict[str, int]] = []
        for i in range(services):
            svc = bench.create_service(f"scale-{i:03d}", [80, 443])
            sg_calls.append(_security_group_calls(bench.reconcile(bench.delta("Service", "ADDED", svc))))
        seconds = time.monotonic() - start
        converged = sum(
            1
            for i in range(services)
            if (bench.service(f"scale-{i:03d}").get("status") or {}).get("loadBalancer", {}).get("ingress")
        )
        ec2 = bench.clients.ec2
        vpc = [{"Name": "vpc-id", "Values": [bench.world.vpc_id]}]
        groups = ec2.describe_security_groups(Filters=vpc)["SecurityGroups"]
        node_groups = [g for g in groups if not sgm.is_lb_group(g) and g["GroupName"] != "default"]
        node_rules = max(len(sgm.rules_from_permissions(g.get("IpPermissions", []))) for g in node_groups)
        per_lb_groups = sum(1 for g in groups if g["GroupName"].startswith(sgm.MANAGED_GROUP_PREFIX))
    finally:
        bench.close()
    return {
        "services": services,
        "converged": converged,
        "node_group_inbound_rules": node_rules,
        "per_lb_security_groups": per_lb_groups,
        "seconds": round(seconds, 1),
        "previous_ceiling_rules": PREVIOUS_CEILING_RULES,
        "security_group_calls": {"first_create": sg_calls[0], "warm_create": sg_calls[-1]},
        "assumptions": [
            f"Network Load Balancers per Region raised from 50 to {services} (a Service Quotas request in a real "
            "account); every other quota at AWS's default, enforced by the devstack",
        ],
    }
