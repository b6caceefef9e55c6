"""Subnet discovery as cloud-provider-aws does it: one subnet per AZ, public/private by an IGW route."""

from __future__ import annotations

from typing import Any

from ccm.aws.names import CLUSTER_TAG_PREFIX, cluster_tag_key

ROLE_ELB = "kubernetes.io/role/elb"
ROLE_INTERNAL_ELB = "kubernetes.io/role/internal-elb"


def _tags(resource: dict[str, Any]) -> dict[str, str]:
    return {t["Key"]: t.get("Value", "") for t in resource.get("Tags") or []}


def public_subnet_ids(subnets: list[dict[str, Any]], route_tables: list[dict[str, Any]]) -> set[str]:
    """A subnet is public if its route table (explicit, else the VPC main table) routes to an igw-."""

    def has_igw(table: dict[str, Any]) -> bool:
        return any(str(r.get("GatewayId", "")).startswith("igw-") for r in table.get("Routes") or [])

    main_public = any(has_igw(t) for t in route_tables if any(a.get("Main") for a in t.get("Associations") or []))
    explicit: dict[str, bool] = {}
    for table in route_tables:
        for assoc in table.get("Associations") or []:
            if assoc.get("SubnetId"):
                explicit[assoc["SubnetId"]] = has_igw(table)
    return {s["SubnetId"] for s in subnets if explicit.get(s["SubnetId"], main_public)}


def choose_subnets(
    subnets: list[dict[str, Any]], route_tables: list[dict[str, Any]], cluster_name: str, internal: bool
) -> list[str]:
    """One subnet per AZ; prefer the role tag, then our cluster tag, then the lowest ID (as upstream)."""
    public = public_subnet_ids(subnets, route_tables)
    own_key, role = cluster_tag_key(cluster_name), ROLE_INTERNAL_ELB if internal else ROLE_ELB
    best: dict[str, tuple[tuple[int, int, str], str]] = {}
    for subnet in subnets:
        tags, subnet_id = _tags(subnet), subnet["SubnetId"]
        foreign = any(k.startswith(CLUSTER_TAG_PREFIX) and k != own_key for k in tags)
        if foreign and own_key not in tags:
            continue  # tagged for another cluster only
        if not internal and subnet_id not in public:
            continue  # internet-facing LBs skip private subnets
        rank = (0 if role in tags else 1, 0 if own_key in tags else 1, subnet_id)
        zone = subnet["AvailabilityZone"]
        if zone not in best or rank < best[zone][0]:
            best[zone] = (rank, subnet_id)
    return sorted(subnet_id for _, subnet_id in best.values())
