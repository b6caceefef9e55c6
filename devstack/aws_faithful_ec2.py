"""moto's security groups made to answer as AWS does (see devstack.aws_faithful for the AWS references): a group
stays in use while a load balancer lists it and for a while after that load balancer is deleted, what was just
created is not yet readable, and an ingress change applies all its permissions or none.

Its own module because the load balancer patches (devstack.aws_faithful_elb) and the settle step share the state it
keeps on moto's EC2 backend: the holds and the creation times.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from devstack.aws_faithful import FaithfulSettings


def group_holds(ec2_backend: Any) -> dict[str, float]:
    """group id -> monotonic time until which a deleted LB's network interfaces still use the group."""
    holds: dict[str, float] = ec2_backend.__dict__.setdefault("_ccm_sg_holds", {})
    return holds


def _created(ec2_backend: Any) -> dict[str, float]:
    """group or rule id -> monotonic time of creation (eventual consistency)."""
    created: dict[str, float] = ec2_backend.__dict__.setdefault("_ccm_created", {})
    return created


def settle() -> None:
    """Everything created so far is visible to reads: a seeded cluster network existed long before the controller
    ran (eventual consistency is about what was *just* created)."""
    from moto.ec2.models import ec2_backends

    for regions in ec2_backends.values():
        for backend in regions.values():
            backend.__dict__.pop("_ccm_created", None)


def _lb_backends(account_id: str, region: str) -> tuple[Any, Any]:
    from moto.elb.models import elb_backends
    from moto.elbv2.models import elbv2_backends

    return elbv2_backends[account_id][region], elb_backends[account_id][region]


def group_users(ec2_backend: Any, group_id: str) -> list[str]:
    """What keeps the group from being deleted: load balancers listing it (or released too recently) and rules of
    other groups referencing it."""
    elbv2, elb = _lb_backends(ec2_backend.account_id, ec2_backend.region_name)
    users = [f"load balancer {lb.name}" for lb in elbv2.load_balancers.values() if group_id in lb.security_groups]
    users += [f"load balancer {lb.name}" for lb in elb.load_balancers.values() if group_id in lb.security_groups]
    if group_holds(ec2_backend).get(group_id, 0.0) > time.monotonic():
        users.append("network interfaces of a deleted load balancer")
    for groups in ec2_backend.groups.values():
        for other in groups.values():
            if other.id != group_id and any(
                (rule.source_group or {}).get("GroupId") == group_id for rule in other.ingress_rules
            ):
                users.append(f"a rule of {other.id}")
    return users


def hold_groups(account_id: str, region: str, group_ids: list[str], seconds: float) -> None:
    """A load balancer listing these groups is being deleted: its network interfaces keep them `seconds` more."""
    from moto.ec2.models import ec2_backends

    until = time.monotonic() + seconds
    holds = group_holds(ec2_backends[account_id][region])
    for gid in group_ids:
        holds[gid] = max(holds.get(gid, 0.0), until)


def _patch_subnet_ipv6_state() -> None:
    """DescribeSubnets: an IPv6 block's Ipv6CidrBlockState is a SubnetCidrBlockState, `{"State": "associated"}`
    (EC2 API reference, SubnetIpv6CidrBlockAssociation). moto 5.2 nested its stored state once more and answered
    the string "{'State': 'associated'}" as the State."""
    from moto.ec2.models.subnets import Subnet

    def ipv6_cidr_block_association_set(subnet: Any) -> list[dict[str, Any]]:
        return [
            {
                "ipv6CidrBlock": association["ipv6CidrBlock"],
                "associationId": association["associationId"],
                "ipv6CidrBlockState": {"state": association["ipv6CidrBlockState"]["State"]},
            }
            for association in subnet.ipv6_cidr_block_associations.values()
            if association["ipv6CidrBlockState"]["State"] == "associated"
        ]

    Subnet.ipv6_cidr_block_association_set = property(ipv6_cidr_block_association_set)  # type: ignore[assignment,method-assign]


def patch_moto(current: Callable[[], FaithfulSettings]) -> None:
    """DependencyViolation while in use, read-after-create lag, all-or-nothing ingress changes, subnets' IPv6
    block states."""
    _patch_subnet_ipv6_state()
    from moto.ec2.exceptions import DependencyViolationError, InvalidSecurityGroupNotFoundError
    from moto.ec2.models.security_groups import SecurityGroupBackend

    delete = SecurityGroupBackend.delete_security_group
    create = SecurityGroupBackend.create_security_group
    authorize = SecurityGroupBackend.authorize_security_group_ingress
    describe = SecurityGroupBackend.describe_security_groups

    def delete_security_group(self: Any, name: str | None = None, group_id: str | None = None) -> None:
        if group_id and (users := group_users(self, group_id)):
            raise DependencyViolationError(f"resource {group_id} has a dependent object ({', '.join(users)})")
        delete(self, name, group_id)

    def create_security_group(self: Any, *args: Any, **kwargs: Any) -> Any:
        group = create(self, *args, **kwargs)
        _created(self)[group.id] = time.monotonic()
        return group

    def authorize_security_group_ingress(self: Any, *args: Any, **kwargs: Any) -> Any:
        rules, group = authorize(self, *args, **kwargs)
        now = time.monotonic()
        for rule in rules:
            _created(self)[rule.id] = now
        return rules, group

    def describe_security_groups(self: Any, *args: Any, **kwargs: Any) -> list[Any]:
        found: list[Any] = describe(self, *args, **kwargs)
        if not current().eventual_consistency:
            return found
        since = time.monotonic() - current().consistency_seconds
        created = _created(self)
        visible = []
        hidden = [g.id for g in found if created.get(g.id, 0.0) > since]
        if hidden and (kwargs.get("group_ids") or (args[0] if args else None)):
            raise InvalidSecurityGroupNotFoundError(hidden[0])  # asked for by id: AWS says it does not exist
        for group in found:
            if group.id in hidden:
                continue  # not yet visible to reads
            fresh = [r for r in group.ingress_rules if created.get(r.id, 0.0) > since]
            if fresh:
                group = copy.copy(group)
                group.ingress_rules = [r for r in group.ingress_rules if r not in fresh]
            visible.append(group)
        return visible

    from moto.ec2.responses.security_groups import SecurityGroups as SecurityGroupsResponse

    # AuthorizeSecurityGroupIngress / RevokeSecurityGroupIngress are all-or-nothing on AWS; moto applies the
    # permissions one by one and kept the ones before a refusal (e.g. the 61st rule).
    for action in ("authorize_security_group_ingress", "revoke_security_group_ingress"):
        setattr(SecurityGroupsResponse, action, _atomic(getattr(SecurityGroupsResponse, action)))

    SecurityGroupBackend.delete_security_group = delete_security_group  # type: ignore[method-assign]
    SecurityGroupBackend.create_security_group = create_security_group  # type: ignore[method-assign]
    SecurityGroupBackend.authorize_security_group_ingress = authorize_security_group_ingress  # type: ignore[method-assign]
    SecurityGroupBackend.describe_security_groups = describe_security_groups  # type: ignore[method-assign]


def _atomic(action: Any) -> Any:
    def all_or_nothing(self: Any) -> Any:
        before = {g.id: list(g.ingress_rules) for groups in self.ec2_backend.groups.values() for g in groups.values()}
        try:
            return action(self)
        except Exception:
            for groups in self.ec2_backend.groups.values():
                for group in groups.values():
                    if group.id in before:
                        group.ingress_rules = before[group.id]
            raise

    return all_or_nothing
