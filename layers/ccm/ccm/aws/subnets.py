"""Subnet discovery as cloud-provider-aws does it: one subnet per AZ, public/private by an IGW route."""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final

from ccm.aws.clients import AwsClients
from ccm.aws.lbconfig import SUBNETS_ANNOTATION, LoadBalancerConfig
from ccm.aws.names import CLUSTER_TAG_PREFIX, cluster_tag_key
from ccm.aws.parallel import in_parallel
from ccm.contracts.cloud import CloudStateError

ROLE_ELB = "kubernetes.io/role/elb"
ROLE_INTERNAL_ELB = "kubernetes.io/role/internal-elb"
UNAVAILABLE_SUBNETS = "UnavailableSubnets"  # Warning reason: nodes run in zones the LB has no subnet in
DISCOVERY_TTL_SECONDS: Final = 300.0

# vpc id -> (when, subnets, route tables): what discovery read, kept per execution environment for creations only
# (a burst of new Services shares one read). Only a clean answer is kept (every node zone covered): a retry after
# tagging a subnet, and every pass over an existing load balancer, read again.
_discovered: dict[str, tuple[float, list[dict[str, Any]], list[dict[str, Any]]]] = {}
_discovered_lock = threading.Lock()


def forget_discovery(vpc_id: str) -> None:
    """After AWS refused a subnet we chose (deleted meanwhile): the next creation reads again."""
    with _discovered_lock:
        _discovered.pop(vpc_id, None)


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


ZONE_LABELS = ("topology.kubernetes.io/zone", "failure-domain.beta.kubernetes.io/zone")


def node_zones(nodes: Sequence[dict[str, Any]]) -> set[str]:
    labels = ((n.get("metadata") or {}).get("labels") or {} for n in nodes)
    return {zone for lbl in labels for zone in [next((lbl[k] for k in ZONE_LABELS if lbl.get(k)), "")] if zone}


def missing_zones_message(
    subnets: list[dict[str, Any]], chosen: list[str], zones_needed: set[str], cluster_name: str, internal: bool
) -> str | None:
    """Pure: when nodes run in zones no chosen subnet covers, say which tags would fix it (traffic entering the LB
    in a zone it has no subnet in cannot reach those nodes without cross-zone hops, and the zone is not served)."""
    covered = {s["AvailabilityZone"] for s in subnets if s["SubnetId"] in chosen}
    missing = sorted(zones_needed - covered)
    if not missing:
        return None
    kind, role = ("private", ROLE_INTERNAL_ELB) if internal else ("public", ROLE_ELB)
    return (
        f"no usable {kind} subnet in {', '.join(missing)} where nodes run (subnets chosen: {', '.join(chosen)}): "
        f"tag one {kind} subnet in each of those zones with {role}=1 and {cluster_tag_key(cluster_name)}=shared"
    )


@dataclass(frozen=True, slots=True)
class SubnetChoice:
    ids: list[str]
    warning: str | None = None  # the load balancer is created anyway; the Service gets a Warning event
    cidrs: dict[str, str] | None = None  # subnet ID -> IPv4 CIDR, when the reads that chose them returned it


def cidrs_of(subnets: list[dict[str, Any]], chosen: list[str]) -> dict[str, str]:
    return {s["SubnetId"]: s["CidrBlock"] for s in subnets if s["SubnetId"] in chosen and s.get("CidrBlock")}


def resolve_subnets(
    clients: AwsClients,
    vpc_id: str,
    config: LoadBalancerConfig,
    cluster_name: str,
    zones_needed: set[str],
    kind: str,
    creating: bool = False,
) -> SubnetChoice:
    """The `subnets` annotation (IDs as given, Name tags resolved in our VPC with one filtered call), else
    discovery as cloud-provider-aws does it (two VPC-filtered calls, made at once; `creating`: a clean answer of
    the last 5 minutes is reused)."""
    ec2 = clients.ec2
    vpc_filter = {"Name": "vpc-id", "Values": [vpc_id]}
    if config.subnets:
        chosen = list(config.subnet_ids)
        if config.subnet_names:
            wanted = {"Name": "tag:Name", "Values": list(config.subnet_names)}
            found = ec2.describe_subnets(Filters=[vpc_filter, wanted])["Subnets"]
            named = {t["Value"]: s["SubnetId"] for s in found for t in s.get("Tags", []) if t["Key"] == "Name"}
            missing = [n for n in config.subnet_names if n not in named]
            if missing:
                raise CloudStateError(f"{SUBNETS_ANNOTATION}: no subnet named {', '.join(missing)} in {vpc_id}")
            chosen += [named[n] for n in config.subnet_names]
            return SubnetChoice(chosen, cidrs=cidrs_of(found, chosen) if not config.subnet_ids else None)
        return SubnetChoice(chosen)
    with _discovered_lock:
        cached = _discovered.get(vpc_id) if creating else None
    if cached is not None and time.monotonic() - cached[0] < DISCOVERY_TTL_SECONDS:
        subnets, tables = cached[1], cached[2]
    else:
        subnets, tables = in_parallel(
            clients.counter,
            lambda: ec2.describe_subnets(Filters=[vpc_filter])["Subnets"],
            lambda: ec2.describe_route_tables(Filters=[vpc_filter])["RouteTables"],
        )
        cached = None
    chosen = choose_subnets(subnets, tables, cluster_name, internal=config.internal)
    if not chosen:
        role = ROLE_INTERNAL_ELB if config.internal else ROLE_ELB
        raise CloudStateError(  # cured by tagging subnets, not by the Service: retried
            f"no usable subnets in {vpc_id} for a {config.scheme} {kind}: tag one subnet per AZ with "
            f"{role}=1 and {cluster_tag_key(cluster_name)}=shared"
        )
    warning = missing_zones_message(subnets, chosen, zones_needed, cluster_name, config.internal)
    if cached is None and creating:
        with _discovered_lock:
            if warning is None:
                _discovered[vpc_id] = (time.monotonic(), subnets, tables)
            else:
                _discovered.pop(vpc_id, None)
    return SubnetChoice(chosen, warning, cidrs_of(subnets, chosen))
