"""The sweeper's writes: deleting one orphan (idempotent, dependency-aware) and re-enqueuing drifted Services.

Deletes never wait: a target group still in use by a listener that is going away, or a security group still held
by a deleted LB's network interfaces, is reported IN_USE and tried again next run (it stays remembered, so it is
not subject to a new grace period).
"""

from __future__ import annotations

import enum
import hashlib
import logging
from collections.abc import Sequence
from dataclasses import replace
from typing import Final

from botocore.exceptions import ClientError

from ccm.aws import security_groups_model as sgm
from ccm.aws.clients import AwsClients
from ccm.aws.errors import error_code
from ccm.aws.security_groups import SecurityGroups
from ccm.contracts import kube as p
from ccm.contracts.cloud import SERVICE_UID_TAG
from ccm.contracts.cluster import Claim, Cluster
from ccm.contracts.messages import REPAIR, delta_for, message_group_id
from ccm.contracts.queues import OutgoingMessage
from ccm.sweeper.drift import Drift
from ccm.sweeper.model import Kind, Resource

log = logging.getLogger(__name__)

IN_USE: Final = frozenset({"ResourceInUse", "DependencyViolation", "InvalidGroup.InUse"})
GONE: Final = frozenset({"LoadBalancerNotFound", "TargetGroupNotFound", "AccessPointNotFound", "InvalidGroup.NotFound"})


class Deleted(enum.StrEnum):
    DELETED = "deleted"
    GONE = "gone"  # someone else deleted it first
    IN_USE = "in-use"  # a dependency still holds it: next run


class Actions:
    def __init__(self, clients: AwsClients, groups: SecurityGroups, cluster: Cluster, services_queue_url: str) -> None:
        self.clients = clients
        self.groups = groups
        self.cluster = cluster
        self.services_queue_url = services_queue_url

    def delete(self, resource: Resource) -> Deleted:
        if not self._ours(resource):  # the model never asks; a last line of defence
            raise ValueError(f"refusing to delete {resource.key}: not tagged as owned by {self.cluster.name}")
        try:
            if resource.kind is Kind.NLB:
                # Its listeners go with it; AWS answers a delete of a missing LB with success.
                self.clients.elbv2.delete_load_balancer(LoadBalancerArn=resource.id)
            elif resource.kind is Kind.CLB:
                self.clients.client("elb").delete_load_balancer(LoadBalancerName=resource.id)
            elif resource.kind is Kind.TARGET_GROUP:
                self.clients.elbv2.delete_target_group(TargetGroupArn=resource.id)
            else:
                self._revoke_node_rules_from(resource.id)
                self.clients.ec2.delete_security_group(GroupId=resource.id)
        except ClientError as err:
            code = error_code(err)
            if code in GONE:
                return Deleted.GONE
            if code in IN_USE:
                return Deleted.IN_USE
            raise
        return Deleted.DELETED

    def _ours(self, resource: Resource) -> bool:
        """The drivers' rule (`Cluster.claim`) on the UID the resource names, owned by this cluster; a shared group
        of the cluster (no UID: a role tag) is the cluster's."""
        if not self.cluster.owns(resource.tags):
            return False
        uid = resource.tags.get(SERVICE_UID_TAG)
        if uid is None:
            return resource.tags.get(sgm.ROLE_TAG) is not None
        return self.cluster.claim(resource.tags, uid) is Claim.OURS

    def _revoke_node_rules_from(self, group_id: str) -> None:
        """Node-group rules whose source is the group to delete: AWS refuses to delete a referenced group."""
        node_ids = list(self.groups.node_group_ids())
        if not node_ids:
            return
        for group in self.clients.ec2.describe_security_groups(GroupIds=node_ids)["SecurityGroups"]:
            rules = [
                r for r in sgm.rules_from_permissions(group.get("IpPermissions", [])) if r.source_group == group_id
            ]
            if rules:
                self.clients.ec2.revoke_security_group_ingress(
                    GroupId=group["GroupId"], IpPermissions=sgm.to_permissions(rules)
                )

    def requeue(self, drifts: Sequence[Drift], now: float) -> int:
        """One SYNC delta per drifted Service, in its own FIFO group (serialised with its other reconciles). The
        deduplication id is per run, so a watcher message of the same resourceVersion does not swallow it."""
        messages = []
        for drift in drifts:
            delta = delta_for("Service", "SYNC", drift.service, observed_at=now)
            delta = replace(delta, object={**delta.object, REPAIR: True})  # read in full, never the checkpoint
            meta = p.meta(drift.service)
            dedup = f"sweeper/{meta.get('uid')}/{meta.get('resourceVersion')}/{int(now)}"
            messages.append(
                OutgoingMessage(
                    delta.to_body(), message_group_id(drift.key), hashlib.sha256(dedup.encode()).hexdigest()
                )
            )
        sent, refused = self.clients.queue(self.services_queue_url).send_batch(messages)
        if refused:
            log.warning("could not re-enqueue: %s", refused)
        return sent
