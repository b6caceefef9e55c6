"""The cluster's shared security groups: the AWS Load Balancer Controller's backend-group pattern, and listener
groups keyed by port set.

- **backend** (`serverless-ccm-backend-<cluster>`): no inbound rules. Every load balancer with a managed group
  carries it, and each node group holds ONE rule allowing all traffic from it. Before it, every LB had its own rule
  on the node group, whose quota (60 inbound rules) stopped a cluster at about 55 load balancers; now the node
  group holds one rule whatever the number of LBs.
- **listener groups** (`serverless-ccm-listeners-<hash>-<cluster>`, `ccm.aws.frontend_model`): the client-facing
  group of every LB whose Service keeps the default source ranges, one per port set: exactly its listeners' ports
  and protocols from 0.0.0.0/0 (and ::/0 when dualstack), plus path-MTU ICMP. A Service with its own source ranges
  or prefix lists keeps a per-LB frontend group (`k8s-elb-<lb>`).
- **legacy default frontend** (`serverless-ccm-frontend-default-<cluster>`, made by 0.2 and earlier): TCP and UDP
  on all ports from everywhere. Never made any more; each LB moves off it on its next pass (make before break),
  and it is deleted once no load balancer carries it (`retire_legacy_frontend`, the sweeper, the uninstall).

All are created on first need with their tags in TagSpecifications (`kubernetes.io/cluster/<name>=owned`,
`serverless-ccm/role`, for listener groups their key in `serverless-ccm/listeners`), found again by those tags or
their name, and their ids cached per execution environment for the node groups' TTL: a warm reconcile spends no
call on them. A found listener group has its rules converged (a creator may have crashed before authorizing them,
someone may have edited them). InvalidGroup.NotFound anywhere forgets the cache (`forget`).

Lifecycle: cluster infrastructure, not any Service's. They carry no Service UID tag, so the per-Service deletes
never touch them; the role tag (which only CreateSecurityGroup can set: IAM allows no later tagging of it) lets the
sweeper delete a listener group no load balancer carries any more and the uninstall delete them all
(`ccm.sweeper.uninstall`).
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any, Final

from botocore.exceptions import ClientError

from ccm.aws import frontend_model as fm
from ccm.aws import names
from ccm.aws import security_groups_model as m
from ccm.aws.clients import AwsClients
from ccm.aws.errors import error_code
from ccm.aws.node_groups import NODE_GROUPS_TTL_SECONDS
from ccm.aws.security_group_rules import CONFLICT_RETRY_SECONDS, RuleWriter
from ccm.contracts.cloud import RetryError
from ccm.contracts.cluster import Cluster

log = logging.getLogger(__name__)

SHARED_TTL_SECONDS: Final = NODE_GROUPS_TTL_SECONDS
BACKEND_RULE: Final = "backend-rule"  # cache slot: the node groups hold the backend rule (value: its source)
SCANNED: Final = "scanned"  # cache slot: the cluster's groups were read; a listener group missing then is new
LISTENERS: Final = "listeners/"  # cache slots: listener groups by name
SHARED_ROLES: Final = (m.ROLE_BACKEND, m.ROLE_FRONTEND, fm.ROLE_LISTENERS)

# (region, vpc, cluster, slot) -> (when, group id); per execution environment, all threads.
_shared: dict[tuple[str, str, str, str], tuple[float, str]] = {}
_shared_lock = threading.Lock()


class SharedGroups:
    def __init__(self, clients: AwsClients, cluster: Cluster, rules: RuleWriter) -> None:
        self.clients = clients
        self.vpc_id = cluster.vpc_id
        self.cluster_name = cluster.name
        self._cluster_tag = cluster.tag_key
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
        mine = self._key("")[:3]
        with _shared_lock:
            for key in [k for k in _shared if k[:3] == mine]:
                del _shared[key]

    def _known(self) -> set[str]:
        """The ids of the shared groups this environment knows (cached)."""
        mine, now = self._key("")[:3], time.monotonic()
        with _shared_lock:
            return {
                value
                for key, (when, value) in _shared.items()
                if key[:3] == mine and key[3] not in (BACKEND_RULE, SCANNED) and now - when < SHARED_TTL_SECONDS
            }

    def has_backend_rule(self, backend_id: str) -> bool:
        return self.cached(BACKEND_RULE) == backend_id

    def remember_backend_rule(self, backend_id: str) -> None:
        self._remember(BACKEND_RULE, backend_id)

    def is_shared(self, group_ids: list[str]) -> bool:
        """All these groups are (cached) shared groups; False when unknown, so callers fall back to reading."""
        return bool(group_ids) and set(group_ids) <= self._known()

    def shared_among(self, group_ids: list[str]) -> set[str]:
        """Those of these groups known (cached) as shared groups."""
        return set(group_ids) & self._known()

    # -- find or create -----------------------------------------------------------------------------------------
    def group_id(self, role: str, scanned: bool = False) -> str:
        """The id of the backend group: cached, else found by its tags (1 read), else created.
        `scanned`: a scan of the cluster's groups just taught the cache what exists (`learn`): not found there,
        it is created without another read (a group made meanwhile answers Duplicate, and is found by name)."""
        if cached := self.cached(role):
            return cached
        found = None if scanned else self._find(self._filters(role))
        group = found or self._create(role, m.shared_group_name(self.cluster_name, role), self._description(role))
        return self._adopt(role, group)

    def listener_group(self, rules: frozenset[m.IngressRule], scanned: bool = False) -> str:
        """The id of the listener group holding exactly `rules` (an open-to-all LB's listener rules): cached, else
        found by name (1 read, none right after a scan of the cluster's groups), else created with its rules."""
        key = fm.listener_key(rules)
        name = fm.listener_group_name(self.cluster_name, key)
        if cached := self.cached(LISTENERS + name):
            return cached
        group = None
        if not (scanned or self.cached(SCANNED)):
            group = self._find([{"Name": "vpc-id", "Values": [self.vpc_id]}, {"Name": "group-name", "Values": [name]}])
        if group is None:
            tags = fm.listener_tags(self._cluster_tag, key, m.ROLE_TAG)
            group = self._create(fm.ROLE_LISTENERS, name, fm.listener_group_description(self.cluster_name, key), tags)
        elif m.shared_role(group, self._cluster_tag) != fm.ROLE_LISTENERS:
            raise RuntimeError(f"security group {name} exists in {self.vpc_id} without our tags; delete it")
        self._converge(str(group["GroupId"]), group, rules)
        self._remember(LISTENERS + name, str(group["GroupId"]))
        return str(group["GroupId"])

    def learn(self, scanned: list[dict[str, Any]]) -> None:
        """From a scan of the VPC's cluster-tagged groups (`NodeGroups.scan`): the shared groups it holds, as a find
        would have found them (the lowest id per role; a listener group's rules converged from its key tag; one
        without that tag, or without any rule (a creator that crashed), is left to be found on use)."""
        for role in (m.ROLE_BACKEND, m.ROLE_FRONTEND):
            mine = [g for g in scanned if m.shared_role(g, self._cluster_tag) == role]
            if mine:
                self._adopt(role, min(mine, key=lambda g: str(g["GroupId"])))
        for group in scanned:
            key = {t["Key"]: t["Value"] for t in group.get("Tags", [])}.get(fm.LISTENERS_TAG)
            if (
                m.shared_role(group, self._cluster_tag) != fm.ROLE_LISTENERS
                or not key
                or not group.get("IpPermissions")
            ):
                continue
            try:
                rules = fm.rules_of_key(key)
            except ValueError:
                continue
            if str(group.get("GroupName")) == fm.listener_group_name(self.cluster_name, key):
                self._converge(str(group["GroupId"]), group, rules)
                self._remember(LISTENERS + str(group["GroupName"]), str(group["GroupId"]))
        self._remember(SCANNED, "1")

    def _adopt(self, role: str, group: dict[str, Any]) -> str:
        self._remember(role, str(group["GroupId"]))
        return str(group["GroupId"])

    def _converge(self, group_id: str, group: dict[str, Any], rules: frozenset[m.IngressRule]) -> None:
        """Exactly `rules`: the missing ones authorized first, then any other revoked (a hand-added rule would
        open a port no LB carrying the group listens on)."""
        authorize, revoke = m.plan_rules(m.rules_from_permissions(group.get("IpPermissions", [])), rules)
        self._rules.authorize(group_id, authorize, lb_rules=True)
        self._rules.revoke(group_id, revoke)

    def retire_legacy_frontend(self, group_id: str) -> bool:
        """The all-ports group of 0.2 and earlier, once a load balancer moved off it: deleted if no load balancer
        carries it any more (AWS refuses with DependencyViolation while one does: then kept, for the next LB
        that moves off it, the sweeper or the uninstall). True when it is gone."""
        try:
            self.clients.ec2.delete_security_group(GroupId=group_id)
        except ClientError as err:
            if error_code(err) == "DependencyViolation":
                log.info("legacy frontend group %s: still carried by a load balancer, kept for now", group_id)
                return False
            if error_code(err) != "InvalidGroup.NotFound":
                raise
        log.info("deleted the legacy all-ports frontend group %s", group_id)
        with _shared_lock:
            _shared.pop(self._key(m.ROLE_FRONTEND), None)
        return True

    def find_all(self) -> list[dict[str, Any]]:
        """Every shared group as it is now (sweeper, uninstall); one read (paginated), never a create."""
        found: list[dict[str, Any]] = []
        for page in self.clients.ec2.get_paginator("describe_security_groups").paginate(
            Filters=self._filters(*SHARED_ROLES)
        ):
            found += page["SecurityGroups"]
        return found

    def _filters(self, *roles: str) -> list[dict[str, Any]]:
        return [
            {"Name": "vpc-id", "Values": [self.vpc_id]},
            {"Name": f"tag:{self._cluster_tag}", "Values": ["owned"]},
            {"Name": f"tag:{m.ROLE_TAG}", "Values": list(roles)},
        ]

    def _find(self, filters: list[dict[str, Any]]) -> dict[str, Any] | None:
        groups = self.clients.ec2.describe_security_groups(Filters=filters)["SecurityGroups"]
        # Names are unique per VPC and carry the role: at most one (the lowest id, should someone copy the tags).
        return min(groups, key=lambda g: str(g["GroupId"])) if groups else None

    def _description(self, role: str) -> str:
        return f"serverless-ccm {role} group of the load balancers of cluster {self.cluster_name}"

    def _create(self, role: str, name: str, description: str, tags: dict[str, str] | None = None) -> dict[str, Any]:
        tags = tags or {self._cluster_tag: "owned", m.ROLE_TAG: role}
        try:
            created = self.clients.ec2.create_security_group(
                GroupName=name,
                Description=description,
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
