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
- the quota, 1,000 targets per target group (Elastic Load Balancing quotas, "Targets per Target Group per Region";
  adjustable, hence a parameter): beyond it the targets already registered are kept, then the rest in address
  order, and the others named in a Warning.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from ccm.aws.clients import AwsClients
from ccm.contracts.endpoints import IpTarget
from ccm.contracts.readiness_gates import TargetHealth

Network = ipaddress.IPv4Network | ipaddress.IPv6Network

MAX_TARGETS_PER_CALL: Final = 200
DEFAULT_TARGET_QUOTA: Final = 1000
# Warning event reasons.
REFUSED_IP_TARGETS: Final = "IpTargetsRefused"
TARGET_QUOTA_EXCEEDED: Final = "TargetQuotaExceeded"
DRAINING: Final = "draining"


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

    @property
    def empty(self) -> bool:
        return not self.deregister and not self.register

    def calls(self) -> list[tuple[str, tuple[IpTarget, ...]]]:
        """("deregister" | "register", targets) in the order they are made."""
        out: list[tuple[str, tuple[IpTarget, ...]]] = []
        for verb, targets in (("deregister", self.deregister), ("register", self.register)):
            out += [(verb, targets[i : i + MAX_TARGETS_PER_CALL]) for i in range(0, len(targets), MAX_TARGETS_PER_CALL)]
        return out

    def warnings(self, quota: int = DEFAULT_TARGET_QUOTA) -> list[tuple[str, str]]:
        """(reason, message) of the Warning events this plan calls for."""
        out: list[tuple[str, str]] = []
        if self.refused:
            named = ", ".join(f"{r.target.ip}:{r.target.port} ({r.reason})" for r in self.refused[:20])
            more = f" and {len(self.refused) - 20} more" if len(self.refused) > 20 else ""
            out.append((REFUSED_IP_TARGETS, f"not registered as targets: {named}{more}"))
        if self.over_quota:
            out.append(
                (
                    TARGET_QUOTA_EXCEEDED,
                    f"{len(self.over_quota)} endpoints not registered: a target group holds at most {quota} "
                    "targets (Elastic Load Balancing quota 'Targets per Target Group per Region'; adjustable in "
                    "Service Quotas)",
                )
            )
        return out


def _sorted(targets: Iterable[IpTarget]) -> list[IpTarget]:
    return sorted(targets, key=IpTarget.sort_key)


def subnet_networks(subnets: Iterable[Mapping[str, Any]]) -> tuple[Network, ...]:
    """The address ranges of DescribeSubnets answers: each subnet's IPv4 CIDR and its associated IPv6 blocks."""
    networks: list[Network] = []
    for subnet in subnets:
        if subnet.get("CidrBlock"):
            networks.append(ipaddress.ip_network(subnet["CidrBlock"]))
        for assoc in subnet.get("Ipv6CidrBlockAssociationSet") or []:
            state = (assoc.get("Ipv6CidrBlockState") or {}).get("State", "associated")
            if assoc.get("Ipv6CidrBlock") and state == "associated":
                networks.append(ipaddress.ip_network(assoc["Ipv6CidrBlock"]))
    return tuple(networks)


def refusal_reason(target: IpTarget, networks: Sequence[Network]) -> str | None:
    """Why AWS would refuse this target without an AvailabilityZone; None when it takes it."""
    try:
        address = ipaddress.ip_address(target.ip)
    except ValueError:
        return "not an IP address"
    if not 1 <= target.port <= 65535:
        return "port out of range"
    if not any(address.version == n.version and address in n for n in networks):
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
    networks: Sequence[Network] | None = None,
    quota: int = DEFAULT_TARGET_QUOTA,
) -> IpTargetPlan:
    """Pure. `networks` None skips the subnet check (the caller vouches for the addresses)."""
    refused: list[Refusal] = []
    accepted: set[IpTarget] = set()
    for target in _sorted(set(desired)):
        reason = refusal_reason(target, networks) if networks is not None else None
        if reason:
            refused.append(Refusal(target, reason))
        else:
            accepted.add(target)
    registered = registered_targets(observed)
    over: list[IpTarget] = []
    if len(accepted) > quota:
        # Targets that serve now stay; the newest endpoints wait (deterministic: address order).
        ranked = _sorted(accepted & registered) + _sorted(accepted - registered)
        accepted, over = set(ranked[:quota]), _sorted(ranked[quota:])
    return IpTargetPlan(
        deregister=tuple(_sorted(registered - accepted)),
        register=tuple(_sorted(accepted - registered)),
        refused=tuple(refused),
        over_quota=tuple(over),
    )


class IpTargetRegistrar:
    """observe → plan → apply for one `ip` target group, through the repository's clients (bounded retries,
    throttling waits, call counting: ccm.aws.clients). Holds the VPC's subnet ranges for the life of the
    execution environment; an address outside them makes one fresh DescribeSubnets before it is refused (a
    subnet added since)."""

    def __init__(self, clients: AwsClients, quota: int = DEFAULT_TARGET_QUOTA) -> None:
        self.clients = clients
        self.quota = quota
        self._networks: dict[str, tuple[Network, ...]] = {}

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

    def networks(self, vpc_id: str, refresh: bool = False) -> tuple[Network, ...]:
        if refresh or vpc_id not in self._networks:
            pages = self.clients.ec2.get_paginator("describe_subnets").paginate(
                Filters=[{"Name": "vpc-id", "Values": [vpc_id]}]
            )
            self._networks[vpc_id] = subnet_networks(s for page in pages for s in page.get("Subnets") or [])
        return self._networks[vpc_id]

    def plan(self, vpc_id: str, desired: Iterable[IpTarget], observed: Mapping[IpTarget, TargetHealth]) -> IpTargetPlan:
        wanted = set(desired)
        plan = plan_ip_targets(wanted, observed, networks=self.networks(vpc_id), quota=self.quota)
        if any(r.reason.startswith("not in a subnet") for r in plan.refused):
            plan = plan_ip_targets(wanted, observed, networks=self.networks(vpc_id, refresh=True), quota=self.quota)
        return plan

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
