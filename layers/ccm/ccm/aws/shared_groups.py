"""The cluster's two shared security groups: the AWS Load Balancer Controller's backend-group pattern.

- **backend** (`serverless-ccm-backend-<cluster>`): no inbound rules. Every load balancer with a managed group
  carries it, and each node group holds ONE rule allowing all traffic from it. Before it, every LB had its own rule
  on the node group, whose quota (60 inbound rules) stopped a cluster at about 55 load balancers; now the node
  group holds one rule whatever the number of LBs.
- **default frontend** (`serverless-ccm-frontend-default-<cluster>`): TCP and UDP on all ports from 0.0.0.0/0 and
  ::/0, plus path-MTU ICMP (type 3 code 4; ICMPv6 packet-too-big). The client-facing group of every LB whose
  Service keeps the default source ranges. Equivalent to the per-listener rules it replaces: a load balancer
  accepts traffic only on its listener ports (anything else is dropped by the LB, not by the group), and the group
  sits only on load balancers' network interfaces, never on a node. A Service with its own source ranges keeps a
  per-LB frontend group (`k8s-elb-<lb>`) built from them, as before.

Both are created on first need with their tags in TagSpecifications (`kubernetes.io/cluster/<name>=owned`,
`serverless-ccm/role`), found again by those tags, and their ids cached per execution environment for the node
groups' TTL: a warm reconcile spends no call on them. A found frontend group has its rules converged (a creator
may have crashed before authorizing them). InvalidGroup.NotFound anywhere forgets the cache (`forget`).

Lifecycle: cluster infrastructure, not any Service's: they live as long as the stack. They carry no Service UID
tag, so no function can delete them (IAM DeleteOwnSecurityGroups / DeleteOwnedSecurityGroups need it; the sweeper's
inventory skips what names no Service), and nothing deletes them behind a warm Lambda that has their ids cached.
An idle cluster keeps them (two groups, no cost, within the VPC's groups quota). The documented uninstall
(docs/deploy.md, "Removing it") revokes the backend rule and deletes both; they are named and tagged so that
nothing is left unexplained.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any, Final

from botocore.exceptions import ClientError

from ccm.aws import names
from ccm.aws import security_groups_model as m
from ccm.aws.clients import AwsClients
from ccm.aws.errors import error_code
from ccm.aws.node_groups import NODE_GROUPS_TTL_SECONDS
from ccm.aws.security_group_rules import CONFLICT_RETRY_SECONDS, RuleWriter
from ccm.contracts.cloud import RetryError

log = logging.getLogger(__name__)

SHARED_TTL_SECONDS: Final = NODE_GROUPS_TTL_SECONDS
BACKEND_RULE: Final = "backend-rule"  # cache slot: the node groups hold the backend rule (value: its source)

# (region, vpc, cluster, role or BACKEND_RULE) -> (when, group id); per execution environment, all threads.
_shared: dict[tuple[str, str, str, str], tuple[float, str]] = {}
_shared_lock = threading.Lock()


class SharedGroups:
    def __init__(self, clients: AwsClients, vpc_id: str, cluster_name: str, rules: RuleWriter) -> None:
        self.clients = clients
        self.vpc_id = vpc_id
        self.cluster_name = cluster_name
        self._cluster_tag = names.cluster_tag_key(cluster_name)
        self._rules = rules

    # -- the cache ----------------------------------------------------------------------------------------------
    def _key(self, slot: str) -> tuple[str, str, str, str]:
        return (self.clients.session.region_name or "", self.vpc_id, self.cluster_name, slot)

    def cached(self, slot: str) -> str | None:
        with _shared_lock:
            entry = _shared.get(self._key(slot))
        return entry[1] if entry and time.monotonic() - entry[0] < SHARED_TTL_SECONDS else None

    def _remember(self, slot: str, value: str) -> None:
        with _shared_lock:
            _shared[self._key(slot)] = (time.monotonic(), value)

    def forget(self) -> None:
        """A group of ours or a node group is gone: everything learnt about them is read again."""
        with _shared_lock:
            for slot in (m.ROLE_BACKEND, m.ROLE_FRONTEND, BACKEND_RULE):
                _shared.pop(self._key(slot), None)

    def has_backend_rule(self, backend_id: str) -> bool:
        return self.cached(BACKEND_RULE) == backend_id

    def remember_backend_rule(self, backend_id: str) -> None:
        self._remember(BACKEND_RULE, backend_id)

    def is_shared(self, group_ids: list[str]) -> bool:
        """All these groups are (cached) shared groups; False when unknown, so callers fall back to reading."""
        known = {self.cached(m.ROLE_BACKEND), self.cached(m.ROLE_FRONTEND)} - {None}
        return bool(group_ids) and set(group_ids) <= known

    # -- find or create -----------------------------------------------------------------------------------------
    def group_id(self, role: str, scanned: bool = False) -> str:
        """The id of the shared group of that role: cached, else found by its tags (1 read), else created.
        `scanned`: a scan of the cluster's groups just taught the cache what exists (`learn`): not found there,
        it is created without another read (a group made meanwhile answers Duplicate, and is found by name)."""
        if cached := self.cached(role):
            return cached
        return self._adopt(role, (None if scanned else self._find(role)) or self._create(role))

    def learn(self, scanned: list[dict[str, Any]]) -> None:
        """From a scan of the VPC's cluster-tagged groups (`NodeGroups.scan`): the shared groups it holds, as a find
        would have found them (the lowest id per role; the frontend's rules converged)."""
        for role in (m.ROLE_BACKEND, m.ROLE_FRONTEND):
            mine = [g for g in scanned if m.shared_role(g, self._cluster_tag) == role]
            if mine:
                self._adopt(role, min(mine, key=lambda g: str(g["GroupId"])))

    def _adopt(self, role: str, group: dict[str, Any]) -> str:
        group_id = str(group["GroupId"])
        if role == m.ROLE_FRONTEND:  # a creator may have crashed before authorizing its rules
            current = m.rules_from_permissions(group.get("IpPermissions", []))
            self._rules.authorize(group_id, m.plan_rules(current, m.frontend_default_rules())[0], lb_rules=True)
        self._remember(role, group_id)
        return group_id

    def find_all(self) -> list[dict[str, Any]]:
        """Both shared groups as they are now (sweeper); one read, never a create."""
        found: list[dict[str, Any]] = self.clients.ec2.describe_security_groups(
            Filters=self._filters(m.ROLE_BACKEND, m.ROLE_FRONTEND)
        )["SecurityGroups"]
        return found

    def _filters(self, *roles: str) -> list[dict[str, Any]]:
        return [
            {"Name": "vpc-id", "Values": [self.vpc_id]},
            {"Name": f"tag:{self._cluster_tag}", "Values": ["owned"]},
            {"Name": f"tag:{m.ROLE_TAG}", "Values": list(roles)},
        ]

    def _find(self, role: str) -> dict[str, Any] | None:
        groups = self.clients.ec2.describe_security_groups(Filters=self._filters(role))["SecurityGroups"]
        # Names are unique per VPC and carry the role: at most one (the lowest id, should someone copy the tags).
        return min(groups, key=lambda g: str(g["GroupId"])) if groups else None

    def _create(self, role: str) -> dict[str, Any]:
        name = m.shared_group_name(self.cluster_name, role)
        tags = {self._cluster_tag: "owned", m.ROLE_TAG: role}
        try:
            created = self.clients.ec2.create_security_group(
                GroupName=name,
                Description=f"serverless-ccm {role} group of the load balancers of cluster {self.cluster_name}",
                VpcId=self.vpc_id,
                TagSpecifications=[{"ResourceType": "security-group", "Tags": names.as_tag_list(tags)}],
            )
        except ClientError as err:
            if error_code(err) != "InvalidGroup.Duplicate":
                raise
            # Another reconcile created it a moment ago (many Services start at once): find it by name.
            filters = [{"Name": "vpc-id", "Values": [self.vpc_id]}, {"Name": "group-name", "Values": [name]}]
            found = self.clients.ec2.describe_security_groups(Filters=filters)["SecurityGroups"]
            if not found:  # EC2 reads are eventually consistent
                raise RetryError(f"security group {name} is not visible yet", CONFLICT_RETRY_SECONDS) from err
            if m.shared_role(found[0], self._cluster_tag) != role:
                raise RuntimeError(
                    f"security group {name} exists in {self.vpc_id} without the tags {tags}; delete or tag it"
                ) from err
            return dict(found[0])
        log.info("created shared %s security group %s (%s)", role, created["GroupId"], name)
        return {"GroupId": created["GroupId"], "IpPermissions": []}
