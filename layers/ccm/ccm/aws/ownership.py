"""Whose are the resources named for a Service UID: the tags of its load balancer (NLB and Classic ELB share the
name `a<uid>[:32]`) and of its managed security group. Read before any delete a message asked for
(`ccm.service.decisions`); 3-4 reads, only on those deletes. Both deployers also ask `Cluster.claim`
(ccm.contracts.cluster) before deleting their load balancer, whoever asked for the delete."""

from __future__ import annotations

from typing import Any

from botocore.exceptions import ClientError

from ccm.aws import names
from ccm.aws.clients import AwsClients
from ccm.aws.errors import error_code
from ccm.aws.security_groups_model import managed_group_name
from ccm.contracts.cluster import Cluster


def _tag_dict(items: list[dict[str, Any]] | None) -> dict[str, str]:
    return {t["Key"]: t.get("Value", "") for t in items or []}


def nlb_tags(elbv2: Any, arn: str) -> dict[str, str] | None:
    """An NLB's tags (one DescribeTags), or None when it no longer exists."""
    try:
        described = elbv2.describe_tags(ResourceArns=[arn])["TagDescriptions"]
    except ClientError as err:
        if error_code(err) == "LoadBalancerNotFound":
            return None
        raise
    return _tag_dict([t for d in described for t in d.get("Tags") or []])


def clb_tags(elb: Any, name: str) -> dict[str, str] | None:
    """A Classic ELB's tags (one DescribeTags), or None when it does not exist."""
    try:
        described = elb.describe_tags(LoadBalancerNames=[name])["TagDescriptions"]
    except ClientError as err:
        if error_code(err) == "LoadBalancerNotFound":
            return None
        raise
    return _tag_dict([t for d in described for t in d.get("Tags") or []])


class Ownership:
    def __init__(self, clients: AwsClients, cluster: Cluster) -> None:
        self.clients = clients
        self.vpc_id = cluster.vpc_id
        self.cluster_tag = cluster.tag_key

    def tags_for_uid(self, uid: str) -> list[dict[str, str]]:
        """The tags of every resource named for `uid` that exists (an empty list when none does)."""
        name = names.load_balancer_name(uid)
        lbs = (self._nlb_tags(name), clb_tags(self.clients.client("elb"), name))
        found = [tags for tags in lbs if tags is not None]
        groups = self.clients.ec2.describe_security_groups(
            Filters=[
                {"Name": "vpc-id", "Values": [self.vpc_id]},
                {"Name": "group-name", "Values": [managed_group_name(name)]},
                {"Name": "tag-key", "Values": [self.cluster_tag]},
            ]
        )["SecurityGroups"]
        return found + [_tag_dict(g.get("Tags")) for g in groups]

    def elb_arns_for_uid(self, uid: str) -> set[str]:
        """Every load balancer (either API) and target group carrying the UID tag (`tagged_elb_arns`)."""
        return tagged_elb_arns(self.clients.tagging, uid)

    def _nlb_tags(self, name: str) -> dict[str, str] | None:
        try:
            lbs = self.clients.elbv2.describe_load_balancers(Names=[name])["LoadBalancers"]
        except ClientError as err:
            if error_code(err) == "LoadBalancerNotFound":
                return None
            raise
        return nlb_tags(self.clients.elbv2, lbs[0]["LoadBalancerArn"]) if lbs else None


def tagged_elb_arns(tagging: Any, uid: str) -> set[str]:
    """Every load balancer (either API) and target group carrying the UID tag: one GetResources page per 100. The
    tagging API is eventually consistent, so this complements what a checkpoint recorded; it never replaces it."""
    found: set[str] = set()
    for page in tagging.get_paginator("get_resources").paginate(
        TagFilters=[{"Key": names.SERVICE_UID_TAG, "Values": [uid]}],
        ResourceTypeFilters=["elasticloadbalancing:loadbalancer", "elasticloadbalancing:targetgroup"],
    ):
        found |= {item["ResourceARN"] for item in page.get("ResourceTagMappingList", [])}
    return found
