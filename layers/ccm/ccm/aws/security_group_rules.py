"""Ingress-rule writes on one security group, with AWS's answers turned into our outcomes (retry, Warning, done).

Node rules are added with the cluster tag on the rule itself (TagSpecifications, resource type
security-group-rule) and revoked by name only through `revoke_tagged`: by rule id, and only the rules carrying that
tag (a rule with our description but without it was not made by us). `revoke` takes rules by their permissions,
for the LB groups' own rules and for a rule whose source is a managed group being deleted.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, Final

from botocore.exceptions import ClientError

from ccm.aws import security_groups_model as m
from ccm.aws.clients import AwsClients
from ccm.aws.errors import error_code
from ccm.aws.security_groups_model import IngressRule
from ccm.contracts.cloud import CloudStateError, RetryError

log = logging.getLogger(__name__)

CONFLICT_RETRY_SECONDS: Final = 5
_RULE_GONE: Final = ("InvalidPermission.NotFound", "InvalidSecurityGroupRuleId.NotFound")


class RuleWriter:
    def __init__(self, clients: AwsClients, cluster_tag: str, group_missing: Callable[[], None]) -> None:
        self.clients = clients
        self.cluster_tag = cluster_tag
        self.group_missing = group_missing  # a group we wrote to is gone: forget cached node groups

    def authorize(
        self,
        group_id: str,
        rules: list[IngressRule],
        *,
        lb_rules: bool = False,
        tags: list[dict[str, Any]] | None = None,
    ) -> None:
        if not rules:
            return
        try:
            self.clients.ec2.authorize_security_group_ingress(
                GroupId=group_id, IpPermissions=m.to_permissions(rules), **({"TagSpecifications": tags} if tags else {})
            )
        except ClientError as err:
            code = error_code(err)
            if code == "InvalidPermission.Duplicate":
                # Someone added one of them since we read: read again on the retry rather than guess.
                raise RetryError(f"rules of {group_id} changed concurrently", CONFLICT_RETRY_SECONDS) from err
            if code == "InvalidGroup.NotFound":
                # A just-created group not yet visible everywhere (AWS is eventually consistent), or a replaced
                # node group.
                self.group_missing()
                raise RetryError(f"security group not found authorizing on {group_id}", CONFLICT_RETRY_SECONDS) from err
            if lb_rules and code == "RulesPerSecurityGroupLimitExceeded":
                # A quota: fewer ranges or ports cure it, and so does a raised quota (AWS side): Warning + retry.
                raise CloudStateError(
                    f"{len(rules)} new rules exceed the rules-per-security-group quota of {group_id}: "
                    "use fewer source ranges or ports, or raise the quota"
                ) from err
            if code == "RulesPerSecurityGroupLimitExceeded":
                # The node group holds one rule per load balancer: say what to do (the Warning carries it).
                raise RuntimeError(
                    f"the node security group {group_id} is full (RulesPerSecurityGroupLimitExceeded; one rule per "
                    "load balancer): raise the quota 'Inbound or outbound rules per security group', or give "
                    "Services a shared group with service.beta.kubernetes.io/aws-load-balancer-security-groups"
                ) from err
            raise
        log.info("authorized %d rules on %s", len(rules), group_id)

    def revoke_tagged(self, group_id: str, rules: list[IngressRule]) -> None:
        """Revoke, by rule id, those of `rules` that carry our cluster tag (AuthorizeSecurityGroupIngress
        TagSpecifications); a rule with our description but without the tag is someone else's: left alone."""
        if not rules:
            return
        described: list[dict[str, Any]] = []
        for page in self.clients.ec2.get_paginator("describe_security_group_rules").paginate(
            Filters=[{"Name": "group-id", "Values": [group_id]}, {"Name": "tag-key", "Values": [self.cluster_tag]}]
        ):
            described += page["SecurityGroupRules"]
        ids, untagged = m.tagged_rule_ids(rules, described, self.cluster_tag)
        if untagged:
            log.warning(
                "not revoking %d rules of %s without the tag %s: %s",
                len(untagged), group_id, self.cluster_tag, [r.description for r in untagged],
            )  # fmt: skip
        self._revoke_ids(group_id, ids)

    def _revoke_ids(self, group_id: str, ids: list[str]) -> None:
        if not ids:
            return
        try:
            self.clients.ec2.revoke_security_group_ingress(GroupId=group_id, SecurityGroupRuleIds=ids)
        except ClientError as err:
            code = error_code(err)
            if code == "InvalidGroup.NotFound" or (code in _RULE_GONE and len(ids) == 1):
                return
            if code not in _RULE_GONE:
                raise
            # One of them was revoked concurrently and the call is all-or-nothing: the others one by one.
            for rule_id in ids:
                self._revoke_ids(group_id, [rule_id])
            return
        log.info("revoked %d tagged rules on %s", len(ids), group_id)

    def revoke(self, group_id: str, rules: list[IngressRule]) -> None:
        if not rules:
            return
        try:
            # The rules come from our read, descriptions included: AWS ignores them when matching, but other
            # implementations (moto) only match a group pair with its description.
            self.clients.ec2.revoke_security_group_ingress(GroupId=group_id, IpPermissions=m.to_permissions(rules))
        except ClientError as err:
            code = error_code(err)
            if code == "InvalidGroup.NotFound":
                return
            if code != "InvalidPermission.NotFound":
                raise
            # One of them was revoked concurrently and the call is all-or-nothing: the others one by one.
            for rule in rules if len(rules) > 1 else ():
                self.revoke(group_id, [rule])
        log.info("revoked %d rules on %s", len(rules), group_id)
