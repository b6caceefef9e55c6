"""The sweeper's AWS reads: everything tagged `kubernetes.io/cluster/<name>=owned` through the Resource Groups
Tagging API, then described by ARN, name or id in batches. Never a region-wide Describe.

Calls per run for N NLB Services (1 LB, T target groups, 1 security group each): GetResources ceil(R/100),
DescribeLoadBalancers ceil(N/20), DescribeListeners N (the API has no batch form), DescribeTargetGroups
ceil(N*T/20), DescribeSecurityGroups ceil(N/200); CLBs: elb DescribeLoadBalancers ceil(C/20) (listeners, health
check and groups inline). The tagging API is eventually consistent: a resource it lists that a Describe no longer
finds is left out; an LB it does not list yet is confirmed by name before anyone calls it missing.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Final, TypeVar

from botocore.exceptions import ClientError

from ccm.aws import names, nlb_observed
from ccm.aws import nlb_model as nm
from ccm.aws import security_groups_model as sgm
from ccm.aws.clb_observed import observed_from_api
from ccm.aws.clients import AwsClients
from ccm.aws.errors import error_code
from ccm.contracts.cluster import OWNED, Cluster
from ccm.sweeper.model import COLLECTED_SHARED_ROLES, Kind, Resource

log = logging.getLogger(__name__)

RESOURCE_TYPES: Final = ["elasticloadbalancing:loadbalancer", "elasticloadbalancing:targetgroup", "ec2:security-group"]
ELB_BATCH: Final = 20  # DescribeLoadBalancers / DescribeTargetGroups accept at most 20 names or ARNs
SG_FILTER_BATCH: Final = 200  # values per EC2 filter
NOT_FOUND: Final = frozenset({"LoadBalancerNotFound", "TargetGroupNotFound", "AccessPointNotFound"})
T = TypeVar("T")


def _chunks(items: Sequence[T], size: int) -> Iterable[Sequence[T]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


def _timestamp(value: Any) -> float | None:
    return value.timestamp() if hasattr(value, "timestamp") else None


def kind_of(arn: str) -> Kind | None:
    """From the ARN: loadbalancer/net/<name>/<id> (ELBv2, confirmed by Describe), loadbalancer/<name> (Classic),
    targetgroup/<name>/<id>, security-group/<id>."""
    resource = arn.split(":", 5)[-1]
    if resource.startswith("loadbalancer/"):
        return Kind.CLB if resource.count("/") == 1 else Kind.NLB
    if resource.startswith("targetgroup/"):
        return Kind.TARGET_GROUP
    if resource.startswith("security-group/"):
        return Kind.SECURITY_GROUP
    return None


class Inventory:
    def __init__(self, clients: AwsClients, cluster: Cluster) -> None:
        self.clients = clients
        self.cluster = cluster

    def read(self) -> list[Resource]:
        tagged: dict[Kind, dict[str, dict[str, str]]] = {kind: {} for kind in Kind}
        for arn, tags in self._tagged():
            kind = kind_of(arn)
            shared = kind is Kind.SECURITY_GROUP and tags.get(sgm.ROLE_TAG) in COLLECTED_SHARED_ROLES
            if not shared and (names.SERVICE_NAME_TAG not in tags or names.SERVICE_UID_TAG not in tags):
                continue  # not ours: node groups, another controller's LBs (EKS's own, cloud-provider-aws)
            if kind is not None:
                tagged[kind][arn] = tags
        return [
            *self._network_lbs(tagged[Kind.NLB]),
            *self._classic_lbs(tagged[Kind.CLB]),
            *self._target_groups(tagged[Kind.TARGET_GROUP]),
            *self._security_groups(tagged[Kind.SECURITY_GROUP]),
        ]

    def existing_lb_names(self, lb_names: Iterable[str]) -> set[str]:
        """Which of these LB names exist under either API, asked by name (strongly consistent, unlike tagging)."""
        found: set[str] = set()
        for name in sorted(set(lb_names)):
            for call in (
                lambda n: self.clients.elbv2.describe_load_balancers(Names=[n])["LoadBalancers"],
                lambda n: self.clients.client("elb").describe_load_balancers(LoadBalancerNames=[n])[
                    "LoadBalancerDescriptions"
                ],
            ):
                try:
                    if call(name):
                        found.add(name)
                        break
                except ClientError as err:
                    if error_code(err) not in NOT_FOUND:
                        raise
        return found

    # -- reads --------------------------------------------------------------------------------------------------
    def _tagged(self) -> Iterable[tuple[str, dict[str, str]]]:
        paginator = self.clients.tagging.get_paginator("get_resources")
        for page in paginator.paginate(
            TagFilters=[{"Key": self.cluster.tag_key, "Values": [OWNED]}],
            ResourceTypeFilters=RESOURCE_TYPES,
            ResourcesPerPage=100,
        ):
            for item in page.get("ResourceTagMappingList", []):
                yield item["ResourceARN"], {t["Key"]: t.get("Value", "") for t in item.get("Tags", [])}

    def _described(self, ids: Sequence[str], describe: Callable[[Sequence[str]], list[dict[str, Any]]]) -> list[Any]:
        """Describe in batches; a batch naming something already gone is asked again one by one."""
        out: list[dict[str, Any]] = []
        for batch in _chunks(ids, ELB_BATCH):
            try:
                out += describe(batch)
            except ClientError as err:
                if error_code(err) not in NOT_FOUND:
                    raise
                for one in batch if len(batch) > 1 else ():
                    try:
                        out += describe([one])
                    except ClientError as single:
                        if error_code(single) not in NOT_FOUND:
                            raise
        return out

    def _network_lbs(self, tagged: dict[str, dict[str, str]]) -> list[Resource]:
        elbv2 = self.clients.elbv2
        lbs = self._described(
            sorted(tagged), lambda b: elbv2.describe_load_balancers(LoadBalancerArns=list(b))["LoadBalancers"]
        )
        out: list[Resource] = []
        for lb in lbs:
            if lb.get("Type") != "network":
                continue  # an ALB or gateway LB with our tags was not made by us
            arn = lb["LoadBalancerArn"]
            out.append(
                Resource(
                    Kind.NLB,
                    arn,
                    arn,
                    lb["LoadBalancerName"],
                    tagged[arn],
                    created=_timestamp(lb.get("CreatedTime")),
                    dns_name=lb.get("DNSName", ""),
                    security_groups=frozenset(lb.get("SecurityGroups") or ()),
                    listeners=self._listeners(arn),
                )
            )
        return out

    def _listeners(self, lb_arn: str) -> tuple[nm.ObservedListener, ...]:
        try:
            listeners = self.clients.elbv2.describe_listeners(LoadBalancerArn=lb_arn)["Listeners"]
        except ClientError as err:
            if error_code(err) in NOT_FOUND:
                return ()
            raise
        return tuple(nlb_observed.listener_from_api(ls) for ls in listeners)  # parsed as the NLB driver parses them

    def _classic_lbs(self, tagged: dict[str, dict[str, str]]) -> list[Resource]:
        elb = self.clients.client("elb")
        by_name = {arn.rsplit("/", 1)[-1]: arn for arn in tagged}
        lbs = self._described(
            sorted(by_name),
            lambda b: elb.describe_load_balancers(LoadBalancerNames=list(b))["LoadBalancerDescriptions"],
        )
        out: list[Resource] = []
        for lb in lbs:
            name = lb["LoadBalancerName"]
            arn = by_name[name]
            out.append(
                Resource(
                    Kind.CLB,
                    arn,
                    name,
                    name,
                    tagged[arn],
                    created=_timestamp(lb.get("CreatedTime")),
                    dns_name=lb.get("DNSName", ""),
                    security_groups=frozenset(lb.get("SecurityGroups") or ()),
                    clb=observed_from_api(lb, {}, None),
                )
            )
        return out

    def _target_groups(self, tagged: dict[str, dict[str, str]]) -> list[Resource]:
        elbv2 = self.clients.elbv2
        groups = self._described(
            sorted(tagged), lambda b: elbv2.describe_target_groups(TargetGroupArns=list(b))["TargetGroups"]
        )
        return [
            Resource(
                Kind.TARGET_GROUP,
                tg["TargetGroupArn"],
                tg["TargetGroupArn"],
                tg["TargetGroupName"],
                tagged[tg["TargetGroupArn"]],
                target_group=nm.ObservedTargetGroup(
                    tg["TargetGroupArn"],
                    tg["TargetGroupName"],
                    tg.get("Protocol", ""),
                    int(tg.get("Port", 0)),
                    nlb_observed.health_from_api(tg),
                ),
            )
            for tg in groups
        ]

    def _security_groups(self, tagged: dict[str, dict[str, str]]) -> list[Resource]:
        by_id = {arn.rsplit("/", 1)[-1]: arn for arn in tagged}
        out: list[Resource] = []
        for batch in _chunks(sorted(by_id), SG_FILTER_BATCH):
            # A group-id filter (unlike GroupIds) does not fail on a group deleted since the tagging API saw it.
            for page in self.clients.ec2.get_paginator("describe_security_groups").paginate(
                Filters=[{"Name": "group-id", "Values": list(batch)}]
            ):
                for group in page["SecurityGroups"]:
                    gid = group["GroupId"]
                    out.append(
                        Resource(Kind.SECURITY_GROUP, by_id[gid], gid, group.get("GroupName", ""), tagged[by_id[gid]])
                    )
        return out
