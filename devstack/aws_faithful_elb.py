"""moto's ELBv2 (NLB) and Classic ELB made to answer as AWS does (see devstack.aws_faithful for the AWS references):
target groups follow their listeners, refused targets and instances, Classic listeners' InstanceProtocol, the
quotas, and the hold a deleted load balancer leaves on its security groups.

Apart from devstack.aws_faithful (the settings and `install`) because these are the bulk of the patches; the two
load balancer APIs share the per-LB security-group count and the hold.
"""

from __future__ import annotations

import ipaddress
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from devstack.aws_faithful_ec2 import hold_groups
from devstack.aws_faithful_elb_targets import check_lb_quotas, family_error, subnet_ranges

if TYPE_CHECKING:
    from devstack.aws_faithful import FaithfulSettings

MAX_GROUPS_PER_LB = 5
MAX_NLB_LISTENERS = 50
MAX_CLB_LISTENERS = 100
# Where an IP target outside the target group's VPC may be (CreateTargetGroup, TargetType ip): RFC 1918 and RFC 6598.
PRIVATE_RANGES = tuple(
    ipaddress.ip_network(n) for n in ("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "100.64.0.0/10")
)
_REGISTERED_AT = "_ccm_registered_at"  # target id -> monotonic time of its registration
_DRAINING = "_ccm_draining"  # target id -> (monotonic time of its deregistration, the target)


def _ip_target_errors(tg: Any, targets: list[dict[str, Any]], subnets: list[Any]) -> None:
    """RegisterTargets on an `ip` target group (ELBv2 API reference, TargetDescription.AvailabilityZone and
    CreateTargetGroup.TargetType): an address in a subnet of the group's VPC gets its subnet's zone and may not be
    given another (not even `all`); an address outside them must be in the RFC 1918 or RFC 6598 ranges and needs
    AvailabilityZone `all`. "In the VPC" means in one of its subnets, not in its CIDR blocks: AWS compares with the
    subnets (aws-load-balancer-controller #3714). Every target is checked before any is registered."""
    from moto.elbv2.exceptions import ELBClientError, InvalidTargetError

    for target in targets:
        ip, zone = str(target.get("Id")), target.get("AvailabilityZone")
        family_error(tg, ip)  # an address of the group's IpAddressType (aws_faithful_elb_targets)
        address = ipaddress.ip_address(ip)
        subnet = next((s for s in subnets if any(address in n for n in subnet_ranges(s))), None)
        if subnet is not None:
            if zone and zone != subnet.availability_zone:
                raise ELBClientError(
                    "ValidationError",
                    f"The IP address '{ip}' is within the VPC, and cannot have its Availability Zone overridden to "
                    f"'{zone}' from '{subnet.availability_zone}'",
                )
            continue
        if not any(address in network for network in PRIVATE_RANGES):
            raise InvalidTargetError()  # "is not in the same VPC as the target group": no public address
        if not zone:
            raise ELBClientError(
                "ValidationError",
                f"The Availability Zone is required for IP address '{ip}' because it is not in the VPC",
            )
        if zone != "all":
            raise ELBClientError(
                "ValidationError",
                f"The Availability Zone for IP address '{ip}' must be 'all' for Network Load Balancer target "
                "groups, when not within the VPC",
            )


def _ip_health(tg: Any, target: dict[str, Any], scale: float) -> Any:
    """DescribeTargetHealth of an `ip` target, from the group's health-check settings (ELB user guide, "Health checks
    for Network Load Balancer target groups" and "Deregistration delay"; TargetHealth reason codes): `initial`
    (Elb.RegistrationInProgress for the first interval, then Elb.InitialHealthChecking) until HealthyThresholdCount
    checks, HealthCheckIntervalSeconds apart, passed; then `healthy`. `unused` (Target.NotInUse) while no load
    balancer forwards to the group, `unavailable` (Target.HealthCheckDisabled) with health checks off. A
    deregistered target is `draining` (Target.DeregistrationInProgress) for deregistration_delay.timeout_seconds.
    Times are multiplied by ``scale`` (FaithfulSettings.target_time_scale). Returns None for moto's own answer."""
    from moto.elbv2.models import FakeHealthStatus

    now = time.monotonic()
    tid = target["Id"]
    registered = tg.targets.get(tid)
    if registered is None:
        draining = tg.__dict__.get(_DRAINING, {}).get(tid)
        if draining is not None and now - draining[0] < _deregistration_delay(tg) * scale:
            return FakeHealthStatus(
                tid,
                draining[1]["Port"],
                tg.health_check_port,
                "draining",
                "Target.DeregistrationInProgress",
                "Target deregistration is in progress",
            )
        return None
    port, hc_port = registered["Port"], tg.health_check_port
    if not tg.load_balancer_arns:
        return FakeHealthStatus(
            tid,
            port,
            hc_port,
            "unused",
            "Target.NotInUse",
            "Target group is not configured to receive traffic from the load balancer",
        )
    if not tg.health_check_enabled:
        return FakeHealthStatus(
            tid, port, hc_port, "unavailable", "Target.HealthCheckDisabled", "Health checks are disabled"
        )
    interval = float(tg.health_check_interval_seconds) * scale
    elapsed = now - tg.__dict__.get(_REGISTERED_AT, {}).get(tid, 0.0)
    if elapsed < interval:
        return FakeHealthStatus(
            tid, port, hc_port, "initial", "Elb.RegistrationInProgress", "Target registration is in progress"
        )
    if elapsed < interval * int(tg.healthy_threshold_count):
        return FakeHealthStatus(
            tid, port, hc_port, "initial", "Elb.InitialHealthChecking", "Initial health checks in progress"
        )
    return FakeHealthStatus(tid, port, hc_port, "healthy")


def _deregistration_delay(tg: Any) -> float:
    return float(tg.attributes.get("deregistration_delay.timeout_seconds", 300))


def _check_group_count(current: Callable[[], FaithfulSettings], groups: list[str] | None) -> None:
    from moto.elbv2.exceptions import ELBClientError

    if current().quotas and groups and len(groups) > MAX_GROUPS_PER_LB:
        raise ELBClientError(
            "InvalidConfigurationRequest",
            f"A load balancer can have at most {MAX_GROUPS_PER_LB} security groups; {len(groups)} were given",
        )


def patch_elbv2(current: Callable[[], FaithfulSettings]) -> None:
    """Target groups follow their listeners, InvalidTarget, the quotas, the security-group hold on delete."""
    from moto.ec2.models import ec2_backends
    from moto.elbv2.exceptions import ELBClientError, InvalidTargetError
    from moto.elbv2.models import ELBv2Backend, FakeTargetGroup, elbv2_backends

    stored = "_ccm_load_balancer_arns"

    def load_balancer_arns(tg: Any) -> list[str]:
        if not current().listener_associations:
            return list(tg.__dict__.get(stored, []))
        account, region = tg.arn.split(":")[4], tg.arn.split(":")[3]
        backend = elbv2_backends[account][region]
        return sorted(
            lb_arn
            for lb_arn, lb in backend.load_balancers.items()
            if any(
                tg.arn in backend._get_target_group_arns_from(action_data=action.data)
                for listener in lb.listeners.values()
                for rule in listener.rules.values()
                for action in rule.actions
            )
        )

    def set_arns(tg: Any, value: list[str]) -> None:
        tg.__dict__[stored] = value  # what moto would have kept (create-time associations)

    FakeTargetGroup.load_balancer_arns = property(load_balancer_arns, set_arns)  # type: ignore[assignment]

    register = FakeTargetGroup.register
    deregister = FakeTargetGroup.deregister
    health_for = FakeTargetGroup.health_for
    describe_health = ELBv2Backend.describe_target_health

    def register_targets(tg: Any, targets: list[dict[str, Any]]) -> None:
        if current().targets and tg.target_type == "ip":
            ec2 = ec2_backends[tg.arn.split(":")[4]][tg.arn.split(":")[3]]
            _ip_target_errors(tg, targets, ec2.describe_subnets(filters={"vpc-id": [tg.vpc_id]}))
            ids = {str(t["Id"]) for t in targets} | set(tg.targets)
            if current().quotas and len(ids) > current().max_targets_per_target_group:
                raise ELBClientError("TooManyTargets", "You've reached the limit on the number of targets.")
        if current().targets:
            account, region = tg.arn.split(":")[4], tg.arn.split(":")[3]
            check_lb_quotas(current, elbv2_backends[account][region], ec2_backends[account][region], tg, targets)
        if tg.target_type == "ip":
            now = time.monotonic()
            registered_at = tg.__dict__.setdefault(_REGISTERED_AT, {})
            for target in targets:
                if target["Id"] not in tg.targets:  # registering a registered target again changes nothing
                    registered_at[target["Id"]] = now
                tg.__dict__.setdefault(_DRAINING, {}).pop(target["Id"], None)
        if current().targets and tg.target_type == "instance":
            backend = ec2_backends[tg.arn.split(":")[4]][tg.arn.split(":")[3]]
            # All checked before any is registered: AWS refuses the whole call.
            refused = [
                t["Id"]
                for t in targets
                if (inst := backend.get_instance_by_id(t["Id"])) is None or inst.state != "running"
            ]
            if refused:
                raise InvalidTargetError(
                    f"The following targets are not in a running state and cannot be registered: {', '.join(refused)}"
                )
        register(tg, targets)

    FakeTargetGroup.register = register_targets  # type: ignore[method-assign,assignment]

    def deregister_targets(tg: Any, targets: list[dict[str, Any]]) -> None:
        kept = {t["Id"]: tg.targets[t["Id"]] for t in targets if t["Id"] in tg.targets}
        deregister(tg, targets)
        if tg.target_type == "ip":
            now = time.monotonic()
            draining = tg.__dict__.setdefault(_DRAINING, {})
            for tid, target in kept.items():
                draining[tid] = (now, target)
                tg.__dict__.get(_REGISTERED_AT, {}).pop(tid, None)

    def target_health(tg: Any, target: dict[str, Any], ec2_backend: Any) -> Any:
        if current().target_health_timing and tg.target_type == "ip":
            answer = _ip_health(tg, target, current().target_time_scale)
            if answer is not None:
                return answer
        return health_for(tg, target, ec2_backend)

    def describe_target_health(self: Any, target_group_arn: str, targets: list[dict[str, Any]]) -> Any:
        tg = self.target_groups.get(target_group_arn)
        if not targets and tg is not None and tg.target_type == "ip" and current().target_health_timing:
            # Without Targets, AWS lists the registered targets and those still draining.
            now, delay = time.monotonic(), _deregistration_delay(tg) * current().target_time_scale
            draining = tg.__dict__.get(_DRAINING, {})
            for tid in [t for t, (at, _) in draining.items() if now - at >= delay]:
                del draining[tid]
            targets = list(tg.targets.values()) + [t for tid, (_, t) in draining.items() if tid not in tg.targets]
        return describe_health(self, target_group_arn, targets)

    FakeTargetGroup.deregister = deregister_targets  # type: ignore[method-assign,assignment]
    FakeTargetGroup.health_for = target_health  # type: ignore[method-assign,assignment]
    ELBv2Backend.describe_target_health = describe_target_health  # type: ignore[method-assign]

    create_lb = ELBv2Backend.create_load_balancer
    create_tg = ELBv2Backend.create_target_group
    delete_lb = ELBv2Backend.delete_load_balancer
    set_groups = ELBv2Backend.set_security_groups
    create_listener = ELBv2Backend.create_listener

    def create_load_balancer(self: Any, name: str, security_groups: list[str], *args: Any, **kwargs: Any) -> Any:
        _check_group_count(current, security_groups)
        # CreateLoadBalancer, "Errors": InvalidSecurityGroup, "The specified security group does not exist" (HTTP
        # 400). moto checks it on SetSecurityGroups only; a group deleted under a cached id must fail here too.
        ec2 = ec2_backends[self.account_id][self.region_name]
        if missing := [g for g in security_groups or [] if ec2.get_security_group_from_id(g) is None]:
            raise ELBClientError("InvalidSecurityGroup", f"Security group {missing[0]} does not exist")
        # (subnet_ids, subnet_mappings, scheme, loadbalancer_type, ...) when passed by position
        lb_type = kwargs.get("loadbalancer_type") or (args[3] if len(args) > 3 else None)
        if current().quotas and lb_type == "network":
            nlbs = [lb for lb in self.load_balancers.values() if lb.type == "network"]
            if len(nlbs) >= current().max_nlbs_per_region and all(lb.name != name for lb in nlbs):
                raise ELBClientError(
                    "TooManyLoadBalancers",
                    f"You've reached the limit on the number of load balancers ({current().max_nlbs_per_region} "
                    "Network Load Balancers per Region) for your account",
                )
        return create_lb(self, name, security_groups, *args, **kwargs)

    def create_target_group(self: Any, name: str, **kwargs: Any) -> Any:
        groups = list(self.target_groups.values())
        if (
            current().quotas
            and len(groups) >= current().max_target_groups_per_region
            and all(tg.name != name for tg in groups)
        ):
            raise ELBClientError(
                "TooManyTargetGroups",
                f"You've reached the limit on the number of target groups ({current().max_target_groups_per_region} "
                "per Region) for your account",
            )
        return create_tg(self, name, **kwargs)

    def delete_load_balancer(self: Any, arn: str) -> None:
        lb = self.load_balancers.get(arn)
        if lb is not None:
            hold_groups(self.account_id, self.region_name, list(lb.security_groups or []), current().sg_release_seconds)
        delete_lb(self, arn)

    def set_security_groups(self: Any, arn: str, sec_groups: list[str]) -> None:
        _check_group_count(current, sec_groups)
        set_groups(self, arn, sec_groups)

    def create_listener_(self: Any, load_balancer_arn: str, *args: Any, **kwargs: Any) -> Any:
        lb = self.load_balancers.get(load_balancer_arn)
        if current().quotas and lb is not None and len(lb.listeners) >= MAX_NLB_LISTENERS:
            raise ELBClientError(
                "TooManyListeners", f"You've reached the limit of {MAX_NLB_LISTENERS} listeners per load balancer"
            )
        return create_listener(self, load_balancer_arn, *args, **kwargs)

    ELBv2Backend.create_load_balancer = create_load_balancer  # type: ignore[method-assign]
    ELBv2Backend.create_target_group = create_target_group  # type: ignore[method-assign]
    ELBv2Backend.delete_load_balancer = delete_load_balancer  # type: ignore[method-assign]
    ELBv2Backend.set_security_groups = set_security_groups  # type: ignore[method-assign]
    ELBv2Backend.create_listener = create_listener_  # type: ignore[method-assign]


def patch_elb(current: Callable[[], FaithfulSettings]) -> None:
    """Listeners keep their InstanceProtocol, InvalidInstance, the quotas, the security-group hold on delete."""
    from moto.ec2.models import ec2_backends
    from moto.elb.exceptions import ELBClientError
    from moto.elb.models import ELBBackend, FakeListener

    def instance_protocol(listener: Any) -> str:
        wanted = listener.__dict__.get("_ccm_instance_protocol")
        return str(wanted if wanted and current().clb_instance_protocol else listener.protocol)

    FakeListener.instance_protocol = property(instance_protocol)  # type: ignore[assignment,method-assign]

    def remember_protocols(balancer: Any, ports: list[dict[str, Any]]) -> None:
        wanted = {
            int(p.get("LoadBalancerPort") or p.get("load_balancer_port") or 0): p.get("InstanceProtocol") for p in ports
        }
        for listener in balancer.listeners:
            protocol = wanted.get(int(listener.load_balancer_port))
            if protocol and "_ccm_instance_protocol" not in listener.__dict__:
                listener.__dict__["_ccm_instance_protocol"] = str(protocol).upper()

    create_lb = ELBBackend.create_load_balancer
    create_listeners = ELBBackend.create_load_balancer_listeners
    delete_lb = ELBBackend.delete_load_balancer
    apply_groups = ELBBackend.apply_security_groups_to_load_balancer
    register = ELBBackend.register_instances

    def too_many_listeners(count: int) -> None:
        # The ELB API documents no TooManyListeners; its listener calls answer InvalidConfigurationRequest (409).
        if current().quotas and count > MAX_CLB_LISTENERS:
            raise ELBClientError(
                "InvalidConfigurationRequest",
                f"A load balancer can have at most {MAX_CLB_LISTENERS} listeners; {count} were asked for",
            )

    def create_load_balancer(
        self: Any, name: str, zones: Any, ports: list[dict[str, Any]], *args: Any, **kw: Any
    ) -> Any:
        _check_group_count(current, kw.get("security_groups") or (args[2] if len(args) > 2 else None))
        too_many_listeners(len(ports))
        quota = current().max_clbs_per_region
        if current().quotas and len(self.load_balancers) >= quota and name not in self.load_balancers:
            raise ELBClientError(
                "TooManyLoadBalancers",
                f"The quota for the number of load balancers has been reached ({quota} Classic Load Balancers per "
                "Region)",
            )
        balancer = create_lb(self, name, zones, ports, *args, **kw)
        remember_protocols(balancer, ports)
        return balancer

    def create_load_balancer_listeners(self: Any, name: str, ports: list[dict[str, Any]]) -> Any:
        balancer = self.load_balancers.get(name)
        if balancer is not None:
            too_many_listeners(len(balancer.listeners) + len(ports))
        balancer = create_listeners(self, name, ports)
        if balancer is not None:
            remember_protocols(balancer, ports)
        return balancer

    def delete_load_balancer(self: Any, load_balancer_name: str) -> None:
        lb = self.load_balancers.get(load_balancer_name)
        if lb is not None:
            hold_groups(self.account_id, self.region_name, list(lb.security_groups or []), current().sg_release_seconds)
        delete_lb(self, load_balancer_name)

    def apply_security_groups_to_load_balancer(self: Any, load_balancer_name: str, security_group_ids: Any) -> None:
        _check_group_count(current, list(security_group_ids))
        apply_groups(self, load_balancer_name, security_group_ids)

    def register_instances(self: Any, load_balancer_name: str, instance_ids: Any, *args: Any, **kw: Any) -> Any:
        ids = list(instance_ids)
        if current().targets:
            ec2 = ec2_backends[self.account_id][self.region_name]
            refused = [i for i in ids if (inst := ec2.get_instance_by_id(i)) is None or inst.state != "running"]
            if refused:
                raise ELBClientError(
                    "InvalidInstance", f"EC2 instance {', '.join(refused)} is not in a valid state to register"
                )
            balancer = self.load_balancers.get(load_balancer_name)
            if balancer is not None:  # AWS registers an instance once; moto appended duplicates
                ids = [i for i in dict.fromkeys(ids) if i not in balancer.instance_sparse_ids]
        return register(self, load_balancer_name, ids, *args, **kw)

    ELBBackend.create_load_balancer = create_load_balancer  # type: ignore[method-assign]
    ELBBackend.create_load_balancer_listeners = create_load_balancer_listeners  # type: ignore[method-assign]
    ELBBackend.delete_load_balancer = delete_load_balancer  # type: ignore[method-assign]
    ELBBackend.apply_security_groups_to_load_balancer = apply_security_groups_to_load_balancer  # type: ignore[method-assign]
    ELBBackend.register_instances = register_instances  # type: ignore[method-assign]
