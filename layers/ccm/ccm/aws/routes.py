"""VPC routes for pod CIDRs: the `Routes` contract over EC2.

Reads are filtered, never region-wide (cloud-provider-aws lists every route table of the region every 10 s):
route tables by the cluster tag key AND the VPC, instances by id. One DescribeRouteTables answers for every
cluster table at once, so a converged reconcile costs one EC2 call however many tables there are.
"""

from __future__ import annotations

import ipaddress
import logging
from collections.abc import Sequence
from typing import Any

from botocore.exceptions import ClientError

from ccm.aws.clients import AwsClients
from ccm.aws.errors import error_code, error_text
from ccm.contracts.cloud import Route, RouteTable

log = logging.getLogger(__name__)

# DescribeInstances accepts at most 200 values per filter.
_FILTER_CHUNK = 200
_GONE_STATES = ("shutting-down", "terminated")


def cluster_tag_key(cluster_name: str) -> str:
    return f"kubernetes.io/cluster/{cluster_name}"


def _destination(cidr: str) -> dict[str, str]:
    family = ipaddress.ip_network(cidr, strict=False).version
    return {"DestinationIpv6CidrBlock": cidr} if family == 6 else {"DestinationCidrBlock": cidr}


class VpcRoutes:
    def __init__(self, clients: AwsClients, vpc_id: str) -> None:
        self.clients = clients
        self.vpc_id = vpc_id

    @property
    def ec2(self) -> Any:
        return self.clients.ec2

    def list_route_tables(self, cluster_name: str) -> list[RouteTable]:
        filters = [{"Name": "tag-key", "Values": [cluster_tag_key(cluster_name)]}]
        if self.vpc_id:
            filters.append({"Name": "vpc-id", "Values": [self.vpc_id]})
        tables: list[RouteTable] = []
        for page in self.ec2.get_paginator("describe_route_tables").paginate(Filters=filters):
            for table in page.get("RouteTables", []):
                tables.append(_table(cluster_name, table))
        return tables

    def list_routes(self, cluster_name: str) -> list[Route]:
        return [r for t in self.list_route_tables(cluster_name) for r in t.routes]

    def create_route(self, cluster_name: str, name_hint: str, route: Route) -> None:
        log.info("creating route %s -> %s in %s (%s)", route.destination_cidr, route.target_instance,
                 route.route_table_id, name_hint)  # fmt: skip
        self.ec2.create_route(
            RouteTableId=route.route_table_id, InstanceId=route.target_instance, **_destination(route.destination_cidr)
        )

    def replace_route(self, cluster_name: str, route: Route) -> None:
        log.info("replacing route %s -> %s in %s", route.destination_cidr, route.target_instance, route.route_table_id)
        self.ec2.replace_route(
            RouteTableId=route.route_table_id, InstanceId=route.target_instance, **_destination(route.destination_cidr)
        )

    def delete_route(self, cluster_name: str, route: Route) -> None:
        log.info("deleting route %s in %s", route.destination_cidr, route.route_table_id)
        try:
            self.ec2.delete_route(RouteTableId=route.route_table_id, **_destination(route.destination_cidr))
        except ClientError as err:
            if error_code(err) != "InvalidRoute.NotFound":
                raise  # already gone is what we wanted

    def disable_source_dest_check(self, instance_ids: Sequence[str]) -> dict[str, str]:
        """One DescribeInstances (per 200 ids) reads SourceDestCheck; ModifyInstanceAttribute only where it is on.

        A filter (not InstanceIds=) so that one vanished instance does not fail the read for all the others.
        """
        wanted = sorted(set(instance_ids))
        found: dict[str, dict[str, Any]] = {}
        for start in range(0, len(wanted), _FILTER_CHUNK):
            chunk = wanted[start : start + _FILTER_CHUNK]
            pages = self.ec2.get_paginator("describe_instances").paginate(
                Filters=[{"Name": "instance-id", "Values": chunk}]
            )
            for page in pages:
                for reservation in page.get("Reservations", []):
                    for inst in reservation.get("Instances", []):
                        found[inst["InstanceId"]] = inst
        problems: dict[str, str] = {}
        for instance_id in wanted:
            inst = found.get(instance_id)
            state = ((inst or {}).get("State") or {}).get("Name", "")
            if inst is None:
                problems[instance_id] = f"instance {instance_id} not found"
            elif state in _GONE_STATES:
                problems[instance_id] = f"instance {instance_id} is {state}"
            elif inst.get("SourceDestCheck", True):
                try:
                    self.ec2.modify_instance_attribute(InstanceId=instance_id, SourceDestCheck={"Value": False})
                    log.info("disabled SourceDestCheck on %s", instance_id)
                except ClientError as err:
                    problems[instance_id] = f"cannot disable SourceDestCheck: {error_text(err)}"
        return problems


def _table(cluster_name: str, table: dict[str, Any]) -> RouteTable:
    routes = []
    for r in table.get("Routes", []):
        destination = r.get("DestinationCidrBlock") or r.get("DestinationIpv6CidrBlock")
        if not destination:
            continue  # prefix-list destinations are never pod CIDRs
        routes.append(
            Route(
                name=f"{cluster_name}-{destination}",
                target_node="",
                destination_cidr=destination,
                blackhole=r.get("State") == "blackhole",
                route_table_id=table["RouteTableId"],
                target_instance=r.get("InstanceId", ""),
            )
        )
    return RouteTable(route_table_id=table["RouteTableId"], routes=tuple(routes))
