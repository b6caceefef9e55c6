"""Whose are the resources named for a Service UID: the tags of its load balancer (NLB and Classic ELB share the
name `a<uid>[:32]`) and of its managed security group. Read before any delete a message asked for
(`ccm.service.hints`); 3-4 reads, only on those deletes."""

from __future__ import annotations

from typing import Any

from botocore.exceptions import ClientError

from ccm.aws import names
from ccm.aws.clients import AwsClients
from ccm.aws.errors import error_code
from ccm.aws.security_groups_model import managed_group_name


def _tag_dict(items: list[dict[str, Any]] | None) -> dict[str, str]:
    return {t["Key"]: t.get("Value", "") for t in items or []}


class Ownership:
    def __init__(self, clients: AwsClients, vpc_id: str, cluster_name: str) -> None:
        self.clients = clients
        self.vpc_id = vpc_id
        self.cluster_tag = names.cluster_tag_key(cluster_name)

    def tags_for_uid(self, uid: str) -> list[dict[str, str]]:
        """The tags of every resource named for `uid` that exists (an empty list when none does)."""
        name = names.load_balancer_name(uid)
        found = [tags for tags in (self._nlb_tags(name), self._clb_tags(name)) if tags is not None]
        groups = self.clients.ec2.describe_security_groups(
            Filters=[
                {"Name": "vpc-id", "Values": [self.vpc_id]},
                {"Name": "group-name", "Values": [managed_group_name(name)]},
                {"Name": "tag-key", "Values": [self.cluster_tag]},
            ]
        )["SecurityGroups"]
        return found + [_tag_dict(g.get("Tags")) for g in groups]

    def _nlb_tags(self, name: str) -> dict[str, str] | None:
        try:
            lbs = self.clients.elbv2.describe_load_balancers(Names=[name])["LoadBalancers"]
        except ClientError as err:
            if error_code(err) == "LoadBalancerNotFound":
                return None
            raise
        if not lbs:
            return None
        described = self.clients.elbv2.describe_tags(ResourceArns=[lbs[0]["LoadBalancerArn"]])["TagDescriptions"]
        return _tag_dict([t for d in described for t in d.get("Tags") or []])

    def _clb_tags(self, name: str) -> dict[str, str] | None:
        try:
            described = self.clients.client("elb").describe_tags(LoadBalancerNames=[name])["TagDescriptions"]
        except ClientError as err:
            if error_code(err) == "LoadBalancerNotFound":
                return None
            raise
        return _tag_dict([t for d in described for t in d.get("Tags") or []])
