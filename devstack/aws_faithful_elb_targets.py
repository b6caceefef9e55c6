"""moto's ELBv2 made to answer as AWS does about target families and the NLB-wide target quotas (see
devstack.aws_faithful for the settings and `install`; apart from devstack.aws_faithful_elb to keep modules small).

- IpAddressType of a target group (ELB user guide, "Target groups for your Network Load Balancers", IP address
  type): "All IP addresses within a target group must have the same IP address type. For example, you can't
  register an IPv4 target with an IPv6 target group", answered as for any address of the wrong family
  (`ValidationError The IP address '...' is not a valid IPv4 address`); and "IPv6 target groups can only be
  associated with dualstack Network Load Balancers": CreateListener / ModifyListener forwarding to an ipv6 group
  from an `ipv4` NLB answers "You cannot associate an IPv6 target group with a load balancer that has an 'ipv4' IP
  address type" (HTTP 400; the code is the listener calls' documented `InvalidConfigurationRequest`). moto took
  both.
- Quotas for your Network Load Balancers: "Targets per Availability Zone per Network Load Balancer" 500 and
  "Targets per Network Load Balancer" 3,000; "If a target is registered with N target groups, it counts as N
  targets"; with cross-zone load balancing at most the per-zone number per load balancer, whatever the zones. A
  RegisterTargets past them answers `TooManyTargets` and registers nothing. Counted over the target groups a
  listener of the NLB forwards to (TargetGroup.LoadBalancerArns); a target's zone is its subnet's (ip) or its
  instance's. moto had no such quota.
"""

from __future__ import annotations

import ipaddress
from collections import Counter
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from devstack.aws_faithful import FaithfulSettings


def family_error(tg: Any, ip: str) -> None:
    """ValidationError when `ip` is not an address of the group's IpAddressType (ipv4 unless created ipv6)."""
    from moto.elbv2.exceptions import ELBClientError

    want: int = 6 if getattr(tg, "ip_address_type", None) == "ipv6" else 4
    try:
        version: int = ipaddress.ip_address(ip).version
    except ValueError:
        version = 0
    if version != want:
        raise ELBClientError("ValidationError", f"The IP address '{ip}' is not a valid IPv{want} address")


def subnet_ranges(subnet: Any) -> list[Any]:
    """A subnet's IPv4 CIDR and its associated IPv6 blocks (AWS places an ip target by them, whatever its family)."""
    ranges = [ipaddress.ip_network(subnet.cidr_block)]
    for assoc in (getattr(subnet, "ipv6_cidr_block_associations", None) or {}).values():
        state = (assoc.get("ipv6CidrBlockState") or {}).get("State", "associated")
        if assoc.get("ipv6CidrBlock") and state == "associated":
            ranges.append(ipaddress.ip_network(assoc["ipv6CidrBlock"]))
    return ranges


def _zone(tg: Any, target_id: str, ec2: Any, subnets: list[Any]) -> str:
    if tg.target_type == "instance":
        instance = ec2.get_instance_by_id(target_id)
        return str(instance.placement.zone) if instance is not None else ""
    try:
        address = ipaddress.ip_address(target_id)
    except ValueError:
        return ""
    found = next((s for s in subnets if any(address in n for n in subnet_ranges(s))), None)
    return str(found.availability_zone) if found is not None else ""


def check_lb_quotas(
    current: Callable[[], FaithfulSettings], backend: Any, ec2: Any, tg: Any, targets: list[dict[str, Any]]
) -> None:
    """TooManyTargets when registering `targets` in `tg` would put one of its NLBs past the per-zone or per-NLB
    quota (counted over every group a listener of that NLB forwards to)."""
    from moto.elbv2.exceptions import ELBClientError

    settings = current()
    if not settings.quotas:
        return
    subnets = list(ec2.describe_subnets(filters={"vpc-id": [tg.vpc_id]}))
    for lb_arn in tg.load_balancer_arns:
        lb = backend.load_balancers.get(lb_arn)
        if lb is None or lb.type != "network":
            continue
        groups = [g for g in backend.target_groups.values() if lb_arn in g.load_balancer_arns]
        zones: Counter[str] = Counter()
        for group in groups:
            ids = set(group.targets) | ({str(t["Id"]) for t in targets} if group.arn == tg.arn else set())
            zones.update(_zone(group, i, ec2, subnets) for i in ids)
        per_lb = settings.max_targets_per_nlb
        if lb.attrs.get("load_balancing.cross_zone.enabled") == "true":
            per_lb = min(per_lb, settings.max_targets_per_zone_per_nlb)
        if zones.total() > per_lb or any(n > settings.max_targets_per_zone_per_nlb for z, n in zones.items() if z):
            raise ELBClientError("TooManyTargets", "You've reached the limit on the number of targets.")


def patch_listeners(current: Callable[[], FaithfulSettings]) -> None:
    """CreateListener / ModifyListener refuse an ipv6 target group behind an `ipv4` load balancer."""
    from moto.elbv2.exceptions import ELBClientError
    from moto.elbv2.models import ELBv2Backend

    create_listener = ELBv2Backend.create_listener
    modify_listener = ELBv2Backend.modify_listener

    def refuse_ipv6_groups(backend: Any, lb: Any, actions: list[dict[str, Any]] | None) -> None:
        if not current().targets or lb is None or lb.ip_address_type == "dualstack":
            return
        for action in actions or []:
            for arn in backend._get_target_group_arns_from(action_data=action):
                tg = backend.target_groups.get(arn)
                if tg is not None and getattr(tg, "ip_address_type", None) == "ipv6":
                    raise ELBClientError(
                        "InvalidConfigurationRequest",
                        f"You cannot associate an IPv6 target group with a load balancer that has an "
                        f"'{lb.ip_address_type}' IP address type",
                    )

    def create_listener_(self: Any, load_balancer_arn: str, *args: Any, **kwargs: Any) -> Any:
        # (protocol, port, ssl_policy, certificate, actions, ...) when passed by position
        actions = kwargs.get("actions") if "actions" in kwargs else (args[4] if len(args) > 4 else None)
        refuse_ipv6_groups(self, self.load_balancers.get(load_balancer_arn), actions)
        return create_listener(self, load_balancer_arn, *args, **kwargs)

    def modify_listener_(self: Any, arn: str, *args: Any, **kwargs: Any) -> Any:
        # (port, protocol, ssl_policy, certificates, actions) when passed by position
        actions = kwargs.get("actions") if "actions" in kwargs else (args[4] if len(args) > 4 else None)
        listener = next(
            (ls for lb in self.load_balancers.values() for ls in lb.listeners.values() if ls.arn == arn), None
        )
        if listener is not None:
            refuse_ipv6_groups(self, self.load_balancers.get(listener.load_balancer_arn), actions)
        return modify_listener(self, arn, *args, **kwargs)

    ELBv2Backend.create_listener = create_listener_  # type: ignore[method-assign]
    ELBv2Backend.modify_listener = modify_listener_  # type: ignore[method-assign]
