"""EC2 instances for node initialisation and lifecycle (the `Instances` contract), after cloud-provider-aws.

Reads only, and never region-wide: instances are looked up by instance ID (from `spec.providerID`) or, for a
node without one, by private DNS name (= node name) inside the cluster VPC, both as DescribeInstances filters in
batches of FILTER_CHUNK values. Filters instead of `InstanceIds=`: one unknown ID would fail the whole batch with
InvalidInstanceID.NotFound, a filter just leaves it out. Zone IDs come from one DescribeAvailabilityZones per
execution environment (zones do not change under a running Lambda).

The pure half (`node_addresses`, `metadata_from_instance`) turns plain DescribeInstances dicts into
`InstanceMetadata`; the `Ec2Instances` class does the I/O. ProviderIDs: ccm.contracts.provider_id.
"""

from __future__ import annotations

import ipaddress
import threading
from collections.abc import Iterator, Sequence
from typing import Any, Final

from ccm.aws.clients import AwsClients
from ccm.contracts.cloud import InstanceMetadata, InstanceNotFound, KubeObject
from ccm.contracts.provider_id import instance_id_from_provider_id, is_well_formed_instance_id, provider_id_for

FILTER_CHUNK: Final = 200  # EC2 accepts up to 200 values per filter
PAGE_SIZE: Final = 1000
# cloud-provider-aws looks nodes up by name among these states only: a terminated instance may still carry the
# DNS name of a newer one for a while.
ALIVE_STATES: Final = ("pending", "running", "shutting-down", "stopping", "stopped")


# ------------------------------------------------------------------------------------------------ pure helpers


def _device_index(eni: dict[str, Any]) -> int:
    attachment = eni.get("Attachment")
    # ENIs without an attachment sort last, as in cloud-provider-aws.
    return int(attachment.get("DeviceIndex", 0)) if attachment else 1 << 30


def node_addresses(instance: dict[str, Any]) -> tuple[tuple[str, str], ...]:
    """NodeAddresses in publishing order: InternalIP for every private IPv4 of every in-use ENI (device-index
    order, each ENI's primary IP first), ExternalIP for the public IPv4, InternalDNS + Hostname from the private
    DNS name, ExternalDNS from the public DNS name."""
    out: list[tuple[str, str]] = []
    enis = sorted(instance.get("NetworkInterfaces") or [], key=_device_index)
    for eni in enis:
        if eni.get("Status", "in-use") != "in-use":
            continue
        ips = sorted(eni.get("PrivateIpAddresses") or [], key=lambda p: not p.get("Primary", False))
        for ip in ips:
            if ip.get("PrivateIpAddress"):
                out.append(("InternalIP", str(ipaddress.ip_address(ip["PrivateIpAddress"]))))
    if not enis and instance.get("PrivateIpAddress"):
        out.append(("InternalIP", str(ipaddress.ip_address(instance["PrivateIpAddress"]))))
    if instance.get("PublicIpAddress"):
        out.append(("ExternalIP", str(ipaddress.ip_address(instance["PublicIpAddress"]))))
    if instance.get("PrivateDnsName"):
        out.append(("InternalDNS", instance["PrivateDnsName"]))
        out.append(("Hostname", instance["PrivateDnsName"]))
    if instance.get("PublicDnsName"):
        out.append(("ExternalDNS", instance["PublicDnsName"]))
    return tuple(out)


def metadata_from_instance(instance: dict[str, Any], region: str, zone_ids: dict[str, str]) -> InstanceMetadata:
    zone = (instance.get("Placement") or {}).get("AvailabilityZone", "")
    return InstanceMetadata(
        provider_id=provider_id_for(zone, instance["InstanceId"]),
        instance_type=instance.get("InstanceType", ""),
        zone=zone,
        region=region,
        zone_id=zone_ids.get(zone, ""),
        addresses=node_addresses(instance),
        state=(instance.get("State") or {}).get("Name", ""),
    )


def _lookup_id(provider_id: str) -> str | None:
    """The instance ID to look up for a providerID; None for a foreign one (Fargate, hybrid nodes...) and for an ID
    EC2 could not hold: upstream's lookup of a malformed ID fails and decides nothing, where our filter would find
    nothing and the node would look gone. A node not looked up is never deleted by us."""
    instance_id = instance_id_from_provider_id(provider_id)
    return instance_id if instance_id and is_well_formed_instance_id(instance_id) else None


def _chunks(values: Sequence[str], size: int = FILTER_CHUNK) -> Iterator[list[str]]:
    for start in range(0, len(values), size):
        yield list(values[start : start + size])


# ------------------------------------------------------------------------------------------------ the driver


class Ec2Instances:
    """`ccm.contracts.cloud.Instances` on EC2. Built once per execution environment; holds only the zone-ID cache."""

    def __init__(self, clients: AwsClients, region: str = "", vpc_id: str = "") -> None:
        self.clients = clients
        self.region = region or clients.session.region_name or ""
        self.vpc_id = vpc_id
        self._zone_ids: dict[str, str] | None = None
        self._lock = threading.Lock()

    # -- the contract ---------------------------------------------------------------------------------------
    def instance_exists(self, node: KubeObject) -> bool:
        found = self._one(node)
        return found is not None and found.exists

    def instance_shutdown(self, node: KubeObject) -> bool:
        found = self._one(node)
        return found is not None and found.shutdown

    def instance_metadata(self, node: KubeObject) -> InstanceMetadata:
        found = self._one(node)
        if found is None:
            raise InstanceNotFound(f"no instance found for node {_name(node)!r}")
        return found

    def instances_metadata(self, nodes: Sequence[KubeObject]) -> dict[str, InstanceMetadata | None]:
        by_id: dict[str, list[str]] = {}  # instance id -> node names (two Nodes may claim one instance)
        by_dns: list[str] = []  # nodes without providerID: their name is the instance's private DNS name
        for node in nodes:
            name = _name(node)
            provider_id = (node.get("spec") or {}).get("providerID") or ""
            if not provider_id:
                by_dns.append(name)
            elif instance_id := _lookup_id(provider_id):
                by_id.setdefault(instance_id, []).append(name)
        result: dict[str, InstanceMetadata | None] = {n: None for names in by_id.values() for n in names}
        result.update(dict.fromkeys(by_dns))
        if by_id:
            for inst in self._describe([{"Name": "instance-id", "Values": chunk}] for chunk in _chunks(sorted(by_id))):
                for name in by_id.get(inst["InstanceId"], []):
                    result[name] = self._metadata(inst)
        if by_dns:
            scope = [{"Name": "instance-state-name", "Values": list(ALIVE_STATES)}]
            if self.vpc_id:  # private DNS names are unique per VPC, not per region
                scope.append({"Name": "vpc-id", "Values": [self.vpc_id]})
            matches: dict[str, list[dict[str, Any]]] = {}
            filters = ([{"Name": "private-dns-name", "Values": chunk}, *scope] for chunk in _chunks(sorted(by_dns)))
            for inst in self._describe(filters):
                matches.setdefault(inst.get("PrivateDnsName", ""), []).append(inst)
            for name in by_dns:
                found = matches.get(name, [])
                # Two live instances with one name: refuse to guess (a providerID, once set, is forever).
                result[name] = self._metadata(found[0]) if len(found) == 1 else None
        return result

    # -- I/O ----------------------------------------------------------------------------------------------------
    def _one(self, node: KubeObject) -> InstanceMetadata | None:
        return self.instances_metadata([node]).get(_name(node))

    def _describe(self, filter_sets: Iterator[list[dict[str, Any]]]) -> Iterator[dict[str, Any]]:
        paginator = self.clients.ec2.get_paginator("describe_instances")
        for filters in filter_sets:
            for page in paginator.paginate(Filters=filters, PaginationConfig={"PageSize": PAGE_SIZE}):
                for reservation in page.get("Reservations", []):
                    yield from reservation.get("Instances", [])

    def _metadata(self, instance: dict[str, Any]) -> InstanceMetadata:
        return metadata_from_instance(instance, self.region, self.zone_ids())

    def zone_ids(self) -> dict[str, str]:
        """Zone name -> zone ID (e.g. us-east-1a -> use1-az6), read once per execution environment."""
        with self._lock:
            if self._zone_ids is None:
                zones = self.clients.ec2.describe_availability_zones(AllAvailabilityZones=True)["AvailabilityZones"]
                self._zone_ids = {z["ZoneName"]: z.get("ZoneId", "") for z in zones}
            return self._zone_ids


def _name(node: KubeObject) -> str:
    return str((node.get("metadata") or {}).get("name", ""))
