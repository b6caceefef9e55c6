"""The NLB driver's reads: the load balancer by name, its target groups (attached or found by UID tag) and the
observation the plan is made against. Kept apart from the driver so the read budget of a pass is in one place.

Reads on a no-op reconcile: DescribeLoadBalancers (by name), DescribeListeners, DescribeTargetGroups (by LB)
and one DescribeTargetHealth per target group; a thorough pass also asks the tagging API (`tagged_target_groups`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from botocore.exceptions import ClientError

from ccm.aws import names, nlb_observed
from ccm.aws import nlb_model as m
from ccm.aws.clients import AwsClients
from ccm.aws.errors import error_code
from ccm.aws.ownership import nlb_tags
from ccm.contracts.cloud import PassFlags


def describe_lb(clients: AwsClients, name: str) -> dict[str, Any] | None:
    """The NLB of that name, or None when there is none."""
    try:
        found = clients.elbv2.describe_load_balancers(Names=[name])["LoadBalancers"]
    except ClientError as err:
        if error_code(err) == "LoadBalancerNotFound":
            return None
        raise
    return found[0] if found else None


def target_group_exists(clients: AwsClients, arn: str) -> bool:
    try:
        return bool(clients.elbv2.describe_target_groups(TargetGroupArns=[arn])["TargetGroups"])
    except ClientError as err:
        if error_code(err) == "TargetGroupNotFound":
            return False
        raise


def target_groups_of(clients: AwsClients, lb_arn: str) -> list[dict[str, Any]]:
    try:
        groups: list[dict[str, Any]] = clients.elbv2.describe_target_groups(LoadBalancerArn=lb_arn)["TargetGroups"]
    except ClientError as err:
        if error_code(err) == "TargetGroupNotFound":  # some implementations say so for an LB without groups
            return []
        raise
    return groups


def tagged_target_groups(clients: AwsClients, uid: str) -> dict[str, dict[str, Any]]:
    """Target groups tagged with this UID, attached or not (the tagging API is eventually consistent, so
    this complements the by-LB reads; it never replaces them)."""
    found: dict[str, dict[str, Any]] = {}
    paginator = clients.tagging.get_paginator("get_resources")
    for page in paginator.paginate(
        TagFilters=[{"Key": names.SERVICE_UID_TAG, "Values": [uid]}],
        ResourceTypeFilters=["elasticloadbalancing:targetgroup"],
    ):
        for item in page.get("ResourceTagMappingList", []):
            found[item["ResourceARN"]] = {"TargetGroupArn": item["ResourceARN"]}
    return found


def observe(
    clients: AwsClients,
    lb: dict[str, Any],
    uid: str,
    flags: PassFlags,
    desired: m.NLBSpec | None = None,
    created: bool = False,
) -> m.ObservedNLB:
    """Read what the plan needs (I/O), then parse it (nlb_observed.observed_from, pure): read, parse, plan, apply."""
    elbv2, lb_arn = clients.elbv2, lb["LoadBalancerArn"]
    attributes = None  # not read: left as they are
    if desired is not None and created and not flags.thorough:
        # Just created in this pass: no listener or target group can be attached yet; trust the answer.
        return nlb_observed.observed_from(lb, [], [], attributes=nlb_observed.CREATED_LB_ATTRIBUTES)
    if desired is not None and created:
        attributes = nlb_observed.CREATED_LB_ATTRIBUTES  # a new LB has the defaults: no read needed
    elif desired is not None and flags.check_attributes:
        attributes = elbv2.describe_load_balancer_attributes(LoadBalancerArn=lb_arn)["Attributes"]
    listeners = elbv2.describe_listeners(LoadBalancerArn=lb_arn)["Listeners"]
    groups = {tg["TargetGroupArn"]: tg for tg in target_groups_of(clients, lb_arn)}
    if flags.thorough:
        orphans = [arn for arn in tagged_target_groups(clients, uid) if arn not in groups]
        if orphans:
            for tg in elbv2.describe_target_groups(TargetGroupArns=orphans)["TargetGroups"]:
                groups[tg["TargetGroupArn"]] = tg
    with_attributes = {
        ls.target_group.name
        for ls in (desired.listeners if desired and flags.check_attributes else ())
        if ls.target_group.attributes
    }
    health: dict[str, Any] = {}
    tg_attributes: dict[str, Any] = {}
    for arn, tg in groups.items():
        health[arn] = elbv2.describe_target_health(TargetGroupArn=arn)["TargetHealthDescriptions"]
        if tg["TargetGroupName"] in with_attributes:
            tg_attributes[arn] = elbv2.describe_target_group_attributes(TargetGroupArn=arn)["Attributes"]
    return nlb_observed.observed_from(
        lb,
        listeners,
        list(groups.values()),
        attributes=attributes,
        target_health=health,
        target_group_attributes=tg_attributes,
    )


def active_hostname(clients: AwsClients, lb_arn: str) -> str | None:
    """One read by ARN: the NLB's DNS name while it exists and has not failed, else None."""
    try:
        found = clients.elbv2.describe_load_balancers(LoadBalancerArns=[lb_arn])["LoadBalancers"]
    except ClientError as err:
        if error_code(err) == "LoadBalancerNotFound":
            return None
        raise
    if not found or (found[0].get("State") or {}).get("Code") == "failed":
        return None
    return str(found[0]["DNSName"])


def lb_subnet_ids(lb: Mapping[str, Any]) -> list[str]:
    """The subnets of a DescribeLoadBalancers entry (one per zone)."""
    return [str(az["SubnetId"]) for az in lb.get("AvailabilityZones") or [] if az.get("SubnetId")]


def subnet_cidrs(clients: AwsClients, subnet_ids: list[str]) -> dict[str, str]:
    """Subnet CIDRs by id (for placing private IPs), one DescribeSubnets."""
    found = clients.ec2.describe_subnets(SubnetIds=subnet_ids)["Subnets"]
    return {s["SubnetId"]: s["CidrBlock"] for s in found}


def lb_tags(clients: AwsClients, lb_arn: str) -> dict[str, str] | None:
    """The NLB's tags (one DescribeTags), None when it no longer exists."""
    return nlb_tags(clients.elbv2, lb_arn)
