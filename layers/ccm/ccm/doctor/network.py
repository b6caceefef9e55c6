"""Pure checks of the VPC: subnets and their tags, route tables, the node security group, the node instances.

Subnet choice is the drivers' own (`ccm.aws.subnets.choose_subnets`), so the doctor predicts exactly which subnets a
new load balancer gets, and the node group choice is `ccm.aws.security_groups_model.choose_node_groups`.
"""

from __future__ import annotations

from typing import Any

from ccm.aws.names import cluster_tag_key
from ccm.aws.security_groups_model import NodeSecurityGroupError, choose_node_groups, is_lb_group
from ccm.aws.subnets import ROLE_ELB, ROLE_INTERNAL_ELB, choose_subnets, public_subnet_ids
from ccm.doctor.facts import NetworkFacts
from ccm.doctor.findings import Finding, fail, ok, warn

CLUSTER_TAG_VALUES = ("owned", "shared")


def _tags(resource: dict[str, Any]) -> dict[str, str]:
    return {t["Key"]: t.get("Value", "") for t in resource.get("Tags") or []}


def _tag_command(ids: list[str], key: str, value: str) -> str:
    return f"aws ec2 create-tags --resources {' '.join(sorted(ids))} --tags Key={key},Value={value}"


def _zone_of(subnets: list[dict[str, Any]]) -> dict[str, str]:
    return {s["SubnetId"]: s["AvailabilityZone"] for s in subnets}


def check_subnets(cluster: str, net: NetworkFacts) -> list[Finding]:
    if not net.subnets:
        return [fail("subnets", f"{net.vpc_id} has no subnets", "create subnets (public and private) in the VPC")]
    own = cluster_tag_key(cluster)
    findings: list[Finding] = []
    bad_values = sorted(s["SubnetId"] for s in net.subnets if _tags(s).get(own, "owned") not in CLUSTER_TAG_VALUES)
    if bad_values:
        findings.append(
            warn(
                "subnets.cluster-tag",
                f"{own} on {', '.join(bad_values)} is neither owned nor shared",
                _tag_command(bad_values, own, "shared"),
            )
        )
    zone = _zone_of(net.subnets)
    public = public_subnet_ids(net.subnets, net.route_tables)
    chosen_public = choose_subnets(net.subnets, net.route_tables, cluster, internal=False)
    findings += _role_findings("subnets.public", chosen_public, net.subnets, own, public, internal=False)
    if not chosen_public:
        findings.append(
            fail(
                "subnets.public",
                f"no usable public subnet (route table with an igw- route, not tagged for another cluster) in "
                f"{net.vpc_id}: internet-facing load balancers cannot be created",
                "add an internet gateway route to the public subnets' route table, then "
                + _tag_command(["<public-subnet-ids>"], ROLE_ELB, "1"),
            )
        )
    chosen_internal = choose_subnets(net.subnets, net.route_tables, cluster, internal=True)
    findings += _role_findings("subnets.private", chosen_internal, net.subnets, own, public, internal=True)
    if len({zone[s] for s in chosen_public}) == 1:
        findings.append(
            warn(
                "subnets.zones",
                f"internet-facing load balancers get one zone only ({zone[chosen_public[0]]}): no zone redundancy",
                "add a public subnet tagged " + ROLE_ELB + " in a second availability zone",
            )
        )
    node_zones = {str(i.get("Placement", {}).get("AvailabilityZone", "")) for i in net.instances} - {""}
    uncovered = sorted(node_zones - {zone[s] for s in chosen_public})
    if chosen_public and uncovered:
        findings.append(
            warn(
                "subnets.zones",
                f"nodes run in {', '.join(uncovered)} where no public load balancer subnet is chosen: NLB targets "
                "there stay unused without cross-zone load balancing",
                f"add a public subnet tagged {ROLE_ELB}=1 in {', '.join(uncovered)}",
            )
        )
    return findings


def _role_findings(
    check: str, chosen: list[str], subnets: list[dict[str, Any]], own: str, public: set[str], *, internal: bool
) -> list[Finding]:
    if not chosen:
        return []
    scheme, role = ("internal", ROLE_INTERNAL_ELB) if internal else ("internet-facing", ROLE_ELB)
    by_id = {s["SubnetId"]: s for s in subnets}
    zone = _zone_of(subnets)
    listing = ", ".join(f"{s} ({zone[s]})" for s in chosen)
    findings: list[Finding] = []
    untagged = [s for s in chosen if role not in _tags(by_id[s])]
    if untagged:
        # Tag the subnets of the right kind in those zones (private ones for internal LBs), not just what was chosen.
        zones = {zone[s] for s in untagged}
        right_kind = [
            s["SubnetId"] for s in subnets if s["AvailabilityZone"] in zones and (s["SubnetId"] in public) != internal
        ]
        findings.append(
            warn(
                check,
                f"{scheme} load balancers would use {', '.join(untagged)} by the lowest-ID fallback: no subnet of "
                f"that zone carries {role}",
                _tag_command(right_kind or untagged, role, "1") + f"   (on the subnets you want; also {own}=shared)",
            )
        )
    if internal and (exposed := [s for s in chosen if s in public]):
        findings.append(
            warn(
                check,
                f"{scheme} load balancers would be placed in public subnets {', '.join(exposed)}: their zones have "
                "no private subnet usable by the cluster",
                f"create private subnets and tag them {role}=1",
            )
        )
    if not findings:
        findings.append(ok(check, f"{scheme} load balancers get {listing}"))
    return findings


def check_route_tables(cluster: str, net: NetworkFacts, routes_enabled: bool) -> list[Finding]:
    own = cluster_tag_key(cluster)
    tagged = sorted(t["RouteTableId"] for t in net.route_tables if own in _tags(t))
    if not routes_enabled:
        return [ok("route-tables", "routes are off (EnableRoutes=false): no route table tag needed")]
    if tagged:
        return [ok("route-tables", f"pod routes go into {', '.join(tagged)}")]
    candidates = sorted(t["RouteTableId"] for t in net.route_tables) or ["<route-table-ids>"]
    return [
        fail(
            "route-tables",
            f"routes are on but no route table of {net.vpc_id} carries {own}: no pod route can be written",
            _tag_command(candidates, own, "owned") + "   (the tables of the nodes' subnets)",
        )
    ]


def check_node_security_group(cluster: str, net: NetworkFacts) -> list[Finding]:
    own = cluster_tag_key(cluster)
    findings: list[Finding] = []
    if not net.instances:
        findings.append(
            warn(
                "instances",
                f"no live instance in {net.vpc_id} carries {own}: node groups cannot be chosen per instance and "
                "routes/SourceDestCheck changes are denied by IAM",
                f"tag the node instances {own}=owned (EKS managed node groups do it)",
            )
        )
    tagged = sorted(str(g["GroupId"]) for g in net.security_groups if not is_lb_group(g))
    instance_groups = [[str(g["GroupId"]) for g in i.get("SecurityGroups", [])] for i in net.instances]
    verdict = _node_group_verdict(own, net.vpc_id, tagged, instance_groups)
    if verdict.status == "ok" and (stranded := _stranded_instances(tagged, net.instances)):
        # A node group without the tag: its nodes get no rule, and their LBs report Ensured all the same.
        groups = sorted({g for _, gs in stranded for g in gs}) or ["<node-security-group-id>"]
        verdict = fail(
            "node-security-group",
            f"{len(stranded)} node instance(s) ({', '.join(i for i, _ in stranded[:5])}) are in no security group "
            f"carrying {own} ({', '.join(groups)}): load balancers cannot reach them",
            _tag_command(groups, own, "owned") + "   (the group those nodes share)",
        )
    return [*findings, verdict]


def _stranded_instances(tagged: list[str], instances: list[dict[str, Any]]) -> list[tuple[str, list[str]]]:
    """(instance id, its groups) of the cluster instances whose groups include no cluster-tagged group."""
    stranded: list[tuple[str, list[str]]] = []
    for instance in instances:
        groups = sorted(str(g["GroupId"]) for g in instance.get("SecurityGroups", []))
        if not set(groups) & set(tagged):
            stranded.append((str(instance.get("InstanceId", "?")), groups))
    return stranded


def _node_group_verdict(own: str, vpc_id: str, tagged: list[str], instance_groups: list[list[str]]) -> Finding:
    check = "node-security-group"
    if len(tagged) == 1:
        return ok(check, f"load balancers reach the nodes through {tagged[0]}")
    if not tagged:
        candidates = sorted({g for groups in instance_groups for g in groups}) or ["<node-security-group-id>"]
        return fail(
            check,
            f"no security group of {vpc_id} (other than load balancer groups) carries {own}: load balancers "
            "get no access rule on the nodes, and IAM denies changes to untagged groups",
            _tag_command(candidates, own, "owned")
            + ("   (only ONE of them: the group of the nodes)" if len(candidates) > 1 else ""),
        )
    try:
        chosen = choose_node_groups(tagged, instance_groups)
    except NodeSecurityGroupError as err:
        return fail(check, str(err), f"remove {own} from all but the node group")
    if not chosen:
        return warn(
            check,
            f"{len(tagged)} groups carry {own} ({', '.join(tagged)}) and no tagged instance says which is the "
            "node group: load balancers get no node access rule",
            f"keep {own} on the node group only",
        )
    return ok(check, f"per-instance node groups: {', '.join(chosen)}")


def check_network(cluster: str, net: NetworkFacts, routes_enabled: bool) -> list[Finding]:
    return (
        check_subnets(cluster, net)
        + check_route_tables(cluster, net, routes_enabled)
        + check_node_security_group(cluster, net)
    )
