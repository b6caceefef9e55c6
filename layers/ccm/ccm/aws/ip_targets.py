"""Registering pod IPs in an `ip` target group (issue 24 item 3; docs/ip-targets.md): a pure plan, then the calls.

The plan is the difference between the targets wanted (ccm.contracts.endpoints) and those DescribeTargetHealth
lists: deregister first (terminating pods lose traffic first, and the target quota has room for the new ones),
then register, at most 200 targets a call (the LBC's chunk: neither the API reference nor the SDK model has a
limit; smaller calls keep one refused chunk from holding the rest). An unchanged set makes no write at all. A
target still `draining` that is wanted again is registered again (AWS puts it back to `initial`).

Two refusals are decided here rather than left to AWS, which refuses the whole call for one bad target:
- the address must be in one of the VPC's **subnets** (IPv4 CIDR and IPv6 associations): that is what AWS
  compares (aws-load-balancer-controller #3714: an address in a VPC CIDR block without a subnet is answered
  `ValidationError: The Availability Zone is required for IP address ... because it is not in the VPC`). Without
  AvailabilityZone (only `all` is allowed for outside addresses, which we never register) such a target is skipped
  and named in a Warning; the others are registered;
- the quotas (Elastic Load Balancing, "Quotas for your Network Load Balancers"; all adjustable, hence
  `TargetQuotas`): 1,000 targets per target group, 500 per Availability Zone per NLB and 3,000 per NLB, a target
  registered in N of the NLB's groups counting N times (500 per NLB in all with cross-zone load balancing). The
  zone of a target is the zone of the subnet holding its address. All the NLB's `ip` groups are planned together:
  the targets already registered are kept, then the rest in address order, and the others named in a Warning.
"""

from __future__ import annotations

import ipaddress
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Final, NamedTuple

from ccm.aws.clients import AwsClients
from ccm.contracts.endpoints import IpTarget
from ccm.contracts.readiness_gates import TargetHealth

Network = ipaddress.IPv4Network | ipaddress.IPv6Network

MAX_TARGETS_PER_CALL: Final = 200
DEFAULT_TARGET_QUOTA: Final = 1000  # per target group
# Warning event reasons.
REFUSED_IP_TARGETS: Final = "IpTargetsRefused"
TARGET_QUOTA_EXCEEDED: Final = "TargetQuotaExceeded"
DRAINING: Final = "draining"


class SubnetRange(NamedTuple):
    """One address range of a subnet of the VPC (its IPv4 CIDR or an associated IPv6 block) and the subnet's zone."""

    network: Network
    zone: str = ""


@dataclass(frozen=True)
class TargetQuotas:
    """Elastic Load Balancing quotas on targets (NLB quotas page; adjustable in Service Quotas)."""

    per_group: int = DEFAULT_TARGET_QUOTA  # "Targets per Target Group per Region"
    per_zone: int = 500  # "Targets per Availability Zone per Network Load Balancer"
    per_lb: int = 3000  # "Targets per Network Load Balancer"

    def for_lb(self, cross_zone: bool) -> TargetQuotas:
        """Footnote 3 of the quotas page: with cross-zone load balancing an NLB holds at most the per-zone number
        of targets in all, whatever its zones."""
        return replace(self, per_lb=min(self.per_lb, self.per_zone)) if cross_zone else self

    def describe(self, limit: str) -> str:
        return {
            "group": f"a target group holds at most {self.per_group} targets ('Targets per Target Group per Region')",
            "zone": f"an NLB holds at most {self.per_zone} targets per Availability Zone, a target in N of its "
            "target groups counting N times ('Targets per Availability Zone per Network Load Balancer')",
            "lb": f"an NLB holds at most {self.per_lb} targets in all, a target in N of its target groups counting "
            "N times ('Targets per Network Load Balancer'; with cross-zone load balancing the per-zone number)",
        }[limit]


@dataclass(frozen=True)
class Refusal:
    target: IpTarget
    reason: str


@dataclass(frozen=True)
class IpTargetPlan:
    deregister: tuple[IpTarget, ...] = ()
    register: tuple[IpTarget, ...] = ()
    refused: tuple[Refusal, ...] = ()
    over_quota: tuple[IpTarget, ...] = ()
    limits: tuple[str, ...] = ()  # the quotas (TargetQuotas.describe) that kept `over_quota` out

    @property
    def empty(self) -> bool:
        return not self.deregister and not self.register

    def calls(self) -> list[tuple[str, tuple[IpTarget, ...]]]:
        """("deregister" | "register", targets) in the order they are made."""
        out: list[tuple[str, tuple[IpTarget, ...]]] = []
        for verb, targets in (("deregister", self.deregister), ("register", self.register)):
            out += [(verb, targets[i : i + MAX_TARGETS_PER_CALL]) for i in range(0, len(targets), MAX_TARGETS_PER_CALL)]
        return out

    def warnings(self) -> list[tuple[str, str]]:
        """(reason, message) of the Warning events this plan calls for."""
        out: list[tuple[str, str]] = []
        if self.refused:
            named = ", ".join(f"{r.target.ip}:{r.target.port} ({r.reason})" for r in self.refused[:20])
            more = f" and {len(self.refused) - 20} more" if len(self.refused) > 20 else ""
            out.append((REFUSED_IP_TARGETS, f"not registered as targets: {named}{more}"))
        if self.over_quota:
            named = ", ".join(f"{t.ip}:{t.port}" for t in self.over_quota[:20])
            more = f" and {len(self.over_quota) - 20} more" if len(self.over_quota) > 20 else ""
            out.append(
                (
                    TARGET_QUOTA_EXCEEDED,
                    f"{len(self.over_quota)} endpoints not registered ({named}{more}): "
                    + "; ".join(self.limits)
                    + " (Elastic Load Balancing quotas, adjustable in Service Quotas)",
                )
            )
        return out


def nlb_warnings(plans: Iterable[IpTargetPlan]) -> list[tuple[str, str]]:
    """The Warnings of all the plans of one NLB as one per reason: an endpoint left out of two groups (two
    listeners) is named once."""
    plans = list(plans)
    merged = IpTargetPlan(
        refused=tuple({r.target: r for p in plans for r in p.refused}.values()),
        over_quota=tuple(_sorted({t for p in plans for t in p.over_quota})),
        limits=tuple(dict.fromkeys(limit for p in plans for limit in p.limits)),
    )
    return merged.warnings()


def _sorted(targets: Iterable[IpTarget]) -> list[IpTarget]:
    return sorted(targets, key=IpTarget.sort_key)


def subnet_networks(subnets: Iterable[Mapping[str, Any]]) -> tuple[SubnetRange, ...]:
    """The address ranges of DescribeSubnets answers, with the subnet's zone: each subnet's IPv4 CIDR and its
    associated IPv6 blocks."""
    networks: list[SubnetRange] = []
    for subnet in subnets:
        zone = str(subnet.get("AvailabilityZone") or "")
        if subnet.get("CidrBlock"):
            networks.append(SubnetRange(ipaddress.ip_network(subnet["CidrBlock"]), zone))
        for assoc in subnet.get("Ipv6CidrBlockAssociationSet") or []:
            state = (assoc.get("Ipv6CidrBlockState") or {}).get("State", "associated")
            if assoc.get("Ipv6CidrBlock") and state == "associated":
                networks.append(SubnetRange(ipaddress.ip_network(assoc["Ipv6CidrBlock"]), zone))
    return tuple(networks)


def _ranges(networks: Iterable[SubnetRange | Network]) -> list[SubnetRange]:
    return [n if isinstance(n, SubnetRange) else SubnetRange(n) for n in networks]


def _range_of(target: IpTarget, networks: Sequence[SubnetRange]) -> SubnetRange | None:
    try:
        address = ipaddress.ip_address(target.ip)
    except ValueError:
        return None
    return next((r for r in networks if address.version == r.network.version and address in r.network), None)


def refusal_reason(target: IpTarget, networks: Sequence[SubnetRange | Network]) -> str | None:
    """Why AWS would refuse this target without an AvailabilityZone; None when it takes it."""
    try:
        ipaddress.ip_address(target.ip)
    except ValueError:
        return "not an IP address"
    if not 1 <= target.port <= 65535:
        return "port out of range"
    if _range_of(target, _ranges(networks)) is None:
        return "not in a subnet of the load balancer's VPC"
    return None


def registered_targets(observed: Mapping[IpTarget, TargetHealth]) -> set[IpTarget]:
    """What DescribeTargetHealth shows as registered: not those draining (deregistered already) nor those AWS says
    are not registered."""
    return {t for t, h in observed.items() if h.state != DRAINING and h.reason != "Target.NotRegistered"}


def plan_ip_targets(
    desired: Iterable[IpTarget],
    observed: Mapping[IpTarget, TargetHealth],
    *,
    networks: Sequence[SubnetRange | Network] | None = None,
    quota: int = DEFAULT_TARGET_QUOTA,
) -> IpTargetPlan:
    """Pure: one group alone on its NLB (plan_lb_ip_targets). `networks` None skips the subnet check (the caller
    vouches for the addresses)."""
    return plan_lb_ip_targets({"": (desired, observed)}, networks=networks, quotas=TargetQuotas(per_group=quota))[""]


def plan_lb_ip_targets(
    groups: Mapping[str, tuple[Iterable[IpTarget], Mapping[IpTarget, TargetHealth]]],
    *,
    networks: Sequence[SubnetRange | Network] | None = None,
    quotas: TargetQuotas = TargetQuotas(),
) -> dict[str, IpTargetPlan]:
    """Pure: the plan of every `ip` group of one NLB (key -> (wanted, observed)), planned together because the
    per-zone and per-NLB quotas count all of them. Within the quotas, targets already registered come first (no
    serving pod is dropped for a new one), then the rest in address order (deterministic); a target whose zone is
    unknown (no `networks`) counts towards the NLB only."""
    ranges = None if networks is None else _ranges(networks)
    refused: dict[str, list[Refusal]] = {key: [] for key in groups}
    registered = {key: registered_targets(observed) for key, (_, observed) in groups.items()}
    candidates: list[tuple[bool, tuple[int, int, int, str], str, IpTarget]] = []
    for key, (desired, _) in sorted(groups.items()):
        for target in set(desired):
            reason = refusal_reason(target, ranges) if ranges is not None else None
            if reason:
                refused[key].append(Refusal(target, reason))
            else:
                candidates.append((target not in registered[key], target.sort_key(), key, target))
    in_group: Counter[str] = Counter()
    in_zone: Counter[str] = Counter()
    accepted: dict[str, set[IpTarget]] = {key: set() for key in groups}
    over: dict[str, list[IpTarget]] = {key: [] for key in groups}
    limits: dict[str, set[str]] = {key: set() for key in groups}
    for _, _, key, target in sorted(candidates):
        found = _range_of(target, ranges) if ranges is not None else None
        zone = found.zone if found else ""
        limit = (
            "group"
            if in_group[key] >= quotas.per_group
            else "zone"
            if zone and in_zone[zone] >= quotas.per_zone
            else "lb"
            if in_group.total() >= quotas.per_lb
            else None
        )
        if limit:
            over[key].append(target)
            limits[key].add(limit)
            continue
        accepted[key].add(target)
        in_group[key] += 1
        in_zone[zone] += 1
    order = ("group", "zone", "lb")
    return {
        key: IpTargetPlan(
            deregister=tuple(_sorted(registered[key] - accepted[key])),
            register=tuple(_sorted(accepted[key] - registered[key])),
            refused=tuple(sorted(refused[key], key=lambda r: r.target.sort_key())),
            over_quota=tuple(_sorted(over[key])),
            limits=tuple(quotas.describe(limit) for limit in order if limit in limits[key]),
        )
        for key in groups
    }


class IpTargetRegistrar:
    """observe → plan → apply for one `ip` target group, through the repository's clients (bounded retries,
    throttling waits, call counting: ccm.aws.clients). Holds the VPC's subnet ranges for the life of the
    execution environment; an address outside them makes one fresh DescribeSubnets before it is refused (a
    subnet added since)."""

    def __init__(self, clients: AwsClients, quotas: TargetQuotas = TargetQuotas()) -> None:
        self.clients = clients
        self.quotas = quotas
        self._networks: dict[str, tuple[SubnetRange, ...]] = {}

    def observe(self, tg_arn: str) -> dict[IpTarget, TargetHealth]:
        """One DescribeTargetHealth without Targets: the registered targets and those draining."""
        answer = self.clients.elbv2.describe_target_health(TargetGroupArn=tg_arn)
        observed: dict[IpTarget, TargetHealth] = {}
        for description in answer.get("TargetHealthDescriptions") or []:
            target, health = description["Target"], description.get("TargetHealth") or {}
            observed[IpTarget(str(target["Id"]), int(target["Port"]))] = TargetHealth(
                str(health.get("State") or ""), str(health.get("Reason") or ""), str(health.get("Description") or "")
            )
        return observed

    def networks(self, vpc_id: str, refresh: bool = False) -> tuple[SubnetRange, ...]:
        if refresh or vpc_id not in self._networks:
            pages = self.clients.ec2.get_paginator("describe_subnets").paginate(
                Filters=[{"Name": "vpc-id", "Values": [vpc_id]}]
            )
            self._networks[vpc_id] = subnet_networks(s for page in pages for s in page.get("Subnets") or [])
        return self._networks[vpc_id]

    def plan(self, vpc_id: str, desired: Iterable[IpTarget], observed: Mapping[IpTarget, TargetHealth]) -> IpTargetPlan:
        """One group alone on its NLB."""
        return self.plan_all(vpc_id, {"": (frozenset(desired), observed)})[""]

    def plan_all(
        self,
        vpc_id: str,
        groups: Mapping[str, tuple[Iterable[IpTarget], Mapping[IpTarget, TargetHealth]]],
        cross_zone: bool = False,
    ) -> dict[str, IpTargetPlan]:
        """Every `ip` group of one NLB (ARN -> (wanted, observed)), against the NLB's quotas."""
        quotas = self.quotas.for_lb(cross_zone)
        wanted = {key: (frozenset(desired), observed) for key, (desired, observed) in groups.items()}
        plans = plan_lb_ip_targets(wanted, networks=self.networks(vpc_id), quotas=quotas)
        if any(r.reason.startswith("not in a subnet") for plan in plans.values() for r in plan.refused):
            plans = plan_lb_ip_targets(wanted, networks=self.networks(vpc_id, refresh=True), quotas=quotas)
        return plans

    def apply_all(self, plans: Mapping[str, IpTargetPlan]) -> int:
        """Every group's deregistrations before any registration (the NLB-wide quotas count all the groups, so a
        group's new targets may need another's room); returns how many calls were made."""
        calls = 0
        for verb in ("deregister", "register"):
            for arn, plan in plans.items():
                half = (
                    IpTargetPlan(deregister=plan.deregister)
                    if verb == "deregister"
                    else IpTargetPlan(register=plan.register)
                )
                calls += self.apply(arn, half)
        return calls

    def apply(self, tg_arn: str, plan: IpTargetPlan) -> int:
        """The plan's calls, deregistrations first; returns how many were made. AvailabilityZone is left out: every
        target is in a subnet of the VPC, where AWS takes the subnet's zone and refuses any other (`all` included)."""
        elbv2 = self.clients.elbv2
        calls = plan.calls()
        for verb, chunk in calls:
            targets = [{"Id": t.ip, "Port": t.port} for t in chunk]
            if verb == "deregister":
                elbv2.deregister_targets(TargetGroupArn=tg_arn, Targets=targets)
            else:
                elbv2.register_targets(TargetGroupArn=tg_arn, Targets=targets)
        return len(calls)

    def sync(self, tg_arn: str, vpc_id: str, desired: Iterable[IpTarget]) -> IpTargetPlan:
        """observe, plan and apply in one: the plan applied (its refusals and quota overflow for the caller's
        Warning events)."""
        plan = self.plan(vpc_id, desired, self.observe(tg_arn))
        self.apply(tg_arn, plan)
        return plan
