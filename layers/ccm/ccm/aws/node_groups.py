"""The cluster's node security groups, discovered once per execution environment (cached 30 minutes).

The cluster-tagged groups of the VPC that are not load-balancer groups (`is_lb_group`: per-LB groups, the shared
backend and frontend groups); if exactly one, that one (1 read); otherwise cloud-provider-aws's per-instance choice
over the cluster-tagged instances of the VPC (`choose_node_groups`). Untagged node groups cannot be changed under
the tag-conditioned IAM policy; tag them. A node group that is gone (InvalidGroup.NotFound) is forgotten and
discovered again once.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any, Final

from botocore.exceptions import ClientError

from ccm.aws import security_groups_model as m
from ccm.aws.clients import AwsClients
from ccm.aws.errors import error_code
from ccm.contracts.cluster import Cluster

NODE_GROUPS_TTL_SECONDS: Final = 1800.0
_LIVE_INSTANCE_STATES: Final = ["pending", "running", "stopping", "stopped"]

# (region, vpc, cluster) -> (when, node group ids); shared by the threads of one execution environment.
_node_groups: dict[tuple[str, str, str], tuple[float, tuple[str, ...]]] = {}
_node_groups_lock = threading.Lock()


class NodeGroups:
    def __init__(self, clients: AwsClients, cluster: Cluster, on_forget: Callable[[], None]) -> None:
        self.clients = clients
        self.vpc_id = cluster.vpc_id
        self.cluster_name = cluster.name
        self._cluster_tag = cluster.tag_key
        self._vpc_filter = {"Name": "vpc-id", "Values": [cluster.vpc_id]}
        self._on_forget = on_forget  # what else was learnt about the node groups (the backend rule) goes too

    def _key(self) -> tuple[str, str, str]:
        return (self.clients.session.region_name or "", self.vpc_id, self.cluster_name)

    def ids(self) -> tuple[str, ...]:
        now = time.monotonic()
        with _node_groups_lock:
            cached = _node_groups.get(self._key())
        if cached and now - cached[0] < NODE_GROUPS_TTL_SECONDS:
            return cached[1]
        found = self._discover()
        if found:  # an empty answer is not cached: the node group may be created any moment
            with _node_groups_lock:
                _node_groups[self._key()] = (now, found)
        return found

    def forget(self) -> None:
        with _node_groups_lock:
            _node_groups.pop(self._key(), None)
        self._on_forget()

    def read(self) -> list[dict[str, Any]]:
        """The node groups as DescribeSecurityGroups answers (rules included); [] when there are none."""
        for attempt in range(2):
            ids = self.ids()
            if not ids:
                return []
            try:
                groups: list[dict[str, Any]] = self.clients.ec2.describe_security_groups(GroupIds=list(ids))[
                    "SecurityGroups"
                ]
                return groups
            except ClientError as err:
                if error_code(err) != "InvalidGroup.NotFound" or attempt:
                    raise
                self.forget()  # a node group was replaced: discover again once
        return []

    def scan(self) -> list[dict[str, Any]]:
        """Every cluster-tagged group of the VPC as DescribeSecurityGroups answers (rules and tags included): the
        node groups, the shared groups and the per-LB groups. One read (paginated)."""
        found: list[dict[str, Any]] = []
        for page in self.clients.ec2.get_paginator("describe_security_groups").paginate(
            Filters=[self._vpc_filter, {"Name": "tag-key", "Values": [self._cluster_tag]}]
        ):
            found += page["SecurityGroups"]
        return found

    def learn(self, scanned: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """From a `scan`: when the tags alone name the node group (exactly one cluster-tagged group that is not a
        load balancer's), it is cached as discovery would cache it, and returned as scanned; otherwise [] and
        nothing learnt (discovery goes on to the instances when the node groups are next needed)."""
        tagged = _tagged_node_groups(scanned)
        if len(tagged) != 1:
            return []
        with _node_groups_lock:
            _node_groups[self._key()] = (time.monotonic(), (str(tagged[0]["GroupId"]),))
        return tagged

    def _discover(self) -> tuple[str, ...]:
        tagged = [str(g["GroupId"]) for g in _tagged_node_groups(self.scan())]
        if len(tagged) == 1:
            return (tagged[0],)
        instance_groups: list[list[str]] = []
        for page in self.clients.ec2.get_paginator("describe_instances").paginate(
            Filters=[
                self._vpc_filter,
                {"Name": "tag-key", "Values": [self._cluster_tag]},
                {"Name": "instance-state-name", "Values": _LIVE_INSTANCE_STATES},
            ]
        ):
            for reservation in page["Reservations"]:
                instance_groups += [
                    [str(g["GroupId"]) for g in inst.get("SecurityGroups", [])] for inst in reservation["Instances"]
                ]
        return m.choose_node_groups(tagged, instance_groups)


def _tagged_node_groups(scanned: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The scan's cluster-tagged groups that are not a load balancer's: the node-group candidates."""
    return [g for g in scanned if not m.is_lb_group(g)]
