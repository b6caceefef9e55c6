"""moto made to answer as AWS does where our controller's correctness depends on it: a local world kinder than AWS
would let tests pass that production fails.

Every patch changes moto's server-side models or its response dispatch, never boto3/botocore, so the drivers
run unchanged over the real wire protocols, in the moto server (devstack, e2e, chaos, bench) and in-process
(`mock_aws`, tests/integration). `install(settings)` patches once per process and replaces the settings; the
patches read the current settings on every call, so a test can switch a behaviour on or off.

What AWS does, and what moto 5.2 did instead:
- DeleteSecurityGroup answers `DependencyViolation` while a network interface, a load balancer or another
  group's rule uses the group (EC2 API reference, DeleteSecurityGroup; EC2 error codes: DependencyViolation). An
  NLB's or CLB's network interfaces are released some minutes after DeleteLoadBalancer, so the group stays in use
  for `sg_release_seconds` after its load balancer is gone. moto deleted any group at once.
- ModifyListener moves a listener to another target group; a target group's LoadBalancerArns (and
  DescribeTargetGroups(LoadBalancerArn=...)) are derived from the listeners that forward to it (ELBv2 API
  reference, TargetGroup.LoadBalancerArns). moto only ever appended the LBs of CreateListener.
- RegisterTargets of an instance that does not exist or is not running (stopped, terminated) answers
  `InvalidTarget` (ELBv2 API reference, RegisterTargets: "If the target is an EC2 instance, it must be in the
  running state when you register it"; errors: InvalidTarget); RegisterInstancesWithLoadBalancer of an instance
  that does not exist or is not running answers `InvalidInstance` (ELB API reference). Either call registers
  nothing when it refuses. moto registered unknown instances (both) and any instance (CLB); its RegisterTargets
  refused a non-running instance only after registering the targets listed before it.
- Classic ELB listeners keep the InstanceProtocol they were created with (ELB API reference, Listener). moto
  reported the listener's Protocol.
- AuthorizeSecurityGroupIngress and RevokeSecurityGroupIngress apply all their permissions or none (moto kept
  those before a refused one).
- Quotas (Amazon VPC quotas: 60 inbound rules per security group, moto already enforces it; 5 security groups per
  network interface, so per load balancer: `InvalidConfigurationRequest`; NLB quotas: 50 listeners per load
  balancer, `TooManyListeners`; Classic ELB quotas: 100 listeners per load balancer, answered
  `InvalidConfigurationRequest`, the one error the ELB API documents for its listener calls). Target groups per
  NLB need no check of their own: the NLB quotas page has no such quota, only "Listeners per Network Load
  Balancer: 50" and "Target Groups per Action per Network Load Balancer: 1", and a target group counts for a load
  balancer through the listeners forwarding to it (TargetGroup.LoadBalancerArns), so an NLB uses at most 50.
- Per-Region quotas, as AWS Service Quotas applies them (Elastic Load Balancing quotas, "Quotas for your Network
  Load Balancers": Network Load Balancers per Region 50, target groups per Region 3000; "Quotas for your Classic
  Load Balancers": Classic Load Balancers per Region 20): a create past them answers `TooManyLoadBalancers` /
  `TooManyTargetGroups` (ELBv2 and ELB API references, CreateLoadBalancer, CreateTargetGroup). They are adjustable
  in a real account (a Service Quotas request), so the values are settings (`max_nlbs_per_region`,
  `max_clbs_per_region`, `max_target_groups_per_region`). A create of a name that exists is idempotent in AWS
  and is never refused. moto had no such quota.
- Request throttling (`rate_limits`, off by default): token buckets with AWS's documented figures, answering
  `Throttling` / `RequestLimitExceeded` (devstack.aws_throttling).
- EC2 eventual consistency (`eventual_consistency`): a group or an inbound rule just created is not returned by
  DescribeSecurityGroups for `consistency_seconds` (EC2 developer guide, "Eventual consistency in the Amazon EC2
  API": a resource just created may not be visible to subsequent read calls).
"""

from __future__ import annotations

import copy
import os
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from devstack import aws_idempotency, aws_tagging, aws_throttling

ENV_SG_RELEASE = "DEVSTACK_SG_RELEASE_SECONDS"

MAX_GROUPS_PER_LB = 5
MAX_NLB_LISTENERS = 50
MAX_CLB_LISTENERS = 100


def _default_release_seconds() -> float:
    return float(os.environ.get(ENV_SG_RELEASE, "120"))


@dataclass
class FaithfulSettings:
    # AWS takes minutes; long enough by default that the controller's retries really run. Tests shorten it.
    sg_release_seconds: float = field(default_factory=_default_release_seconds)
    rate_limits: bool = False  # on in the latency benchmark and in chaos profiles that ask for it
    refill_scale: float = 1.0  # x AWS's refill rates (tests set 0 to freeze a drained bucket)
    eventual_consistency: bool = True
    consistency_seconds: float = 0.5
    quotas: bool = True
    targets: bool = True  # InvalidTarget / InvalidInstance for instances AWS refuses
    listener_associations: bool = True  # target groups follow ModifyListener / DeleteListener
    clb_instance_protocol: bool = True
    # Elastic Load Balancing per-Region quotas (adjustable through Service Quotas); enforced when `quotas` is on.
    max_nlbs_per_region: int = 50
    max_clbs_per_region: int = 20
    max_target_groups_per_region: int = 3000


_settings = FaithfulSettings()
_lock = threading.Lock()
throttled = aws_throttling.throttled  # "api:Action" -> throttled requests, for tests and the benchmark
take_token = aws_throttling.take_token


def settings() -> FaithfulSettings:
    return _settings


def install(new: FaithfulSettings | None = None) -> FaithfulSettings:
    """Patch moto (once per process) and make `new` (default: all defaults) the behaviour from now on."""
    global _settings
    with _lock:
        _settings = new or FaithfulSettings()
        aws_throttling.reset(_settings.refill_scale)
        if not _installed:
            _patch_security_groups()
            _patch_elbv2()
            aws_idempotency.patch_moto()  # outermost: a repeated create is answered before any quota
            _patch_elb()
            aws_tagging.patch_moto()
            aws_throttling.patch_moto(lambda: _settings.rate_limits)
            _installed.append(True)
    return _settings


_installed: list[bool] = []


# -- security groups ------------------------------------------------------------------------------------------------
def _holds(ec2_backend: Any) -> dict[str, float]:
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
    if _holds(ec2_backend).get(group_id, 0.0) > time.monotonic():
        users.append("network interfaces of a deleted load balancer")
    for groups in ec2_backend.groups.values():
        for other in groups.values():
            if other.id != group_id and any(
                (rule.source_group or {}).get("GroupId") == group_id for rule in other.ingress_rules
            ):
                users.append(f"a rule of {other.id}")
    return users


def _hold_groups(account_id: str, region: str, group_ids: list[str]) -> None:
    from moto.ec2.models import ec2_backends

    until = time.monotonic() + _settings.sg_release_seconds
    holds = _holds(ec2_backends[account_id][region])
    for gid in group_ids:
        holds[gid] = max(holds.get(gid, 0.0), until)


def _patch_security_groups() -> None:
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
        if not _settings.eventual_consistency:
            return found
        since = time.monotonic() - _settings.consistency_seconds
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


# -- ELBv2 ----------------------------------------------------------------------------------------------------------
def _check_group_count(groups: list[str] | None) -> None:
    from moto.elbv2.exceptions import ELBClientError

    if _settings.quotas and groups and len(groups) > MAX_GROUPS_PER_LB:
        raise ELBClientError(
            "InvalidConfigurationRequest",
            f"A load balancer can have at most {MAX_GROUPS_PER_LB} security groups; {len(groups)} were given",
        )


def _patch_elbv2() -> None:
    from moto.ec2.models import ec2_backends
    from moto.elbv2.exceptions import ELBClientError, InvalidTargetError
    from moto.elbv2.models import ELBv2Backend, FakeTargetGroup, elbv2_backends

    stored = "_ccm_load_balancer_arns"

    def load_balancer_arns(tg: Any) -> list[str]:
        if not _settings.listener_associations:
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

    def register_targets(tg: Any, targets: list[dict[str, Any]]) -> None:
        if _settings.targets and tg.target_type == "instance":
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

    create_lb = ELBv2Backend.create_load_balancer
    create_tg = ELBv2Backend.create_target_group
    delete_lb = ELBv2Backend.delete_load_balancer
    set_groups = ELBv2Backend.set_security_groups
    create_listener = ELBv2Backend.create_listener

    def create_load_balancer(self: Any, name: str, security_groups: list[str], *args: Any, **kwargs: Any) -> Any:
        _check_group_count(security_groups)
        # (subnet_ids, subnet_mappings, scheme, loadbalancer_type, ...) when passed by position
        lb_type = kwargs.get("loadbalancer_type") or (args[3] if len(args) > 3 else None)
        if _settings.quotas and lb_type == "network":
            nlbs = [lb for lb in self.load_balancers.values() if lb.type == "network"]
            if len(nlbs) >= _settings.max_nlbs_per_region and all(lb.name != name for lb in nlbs):
                raise ELBClientError(
                    "TooManyLoadBalancers",
                    f"You've reached the limit on the number of load balancers ({_settings.max_nlbs_per_region} "
                    "Network Load Balancers per Region) for your account",
                )
        return create_lb(self, name, security_groups, *args, **kwargs)

    def create_target_group(self: Any, name: str, **kwargs: Any) -> Any:
        groups = list(self.target_groups.values())
        if (
            _settings.quotas
            and len(groups) >= _settings.max_target_groups_per_region
            and all(tg.name != name for tg in groups)
        ):
            raise ELBClientError(
                "TooManyTargetGroups",
                f"You've reached the limit on the number of target groups ({_settings.max_target_groups_per_region} "
                "per Region) for your account",
            )
        return create_tg(self, name, **kwargs)

    def delete_load_balancer(self: Any, arn: str) -> None:
        lb = self.load_balancers.get(arn)
        if lb is not None:
            _hold_groups(self.account_id, self.region_name, list(lb.security_groups or []))
        delete_lb(self, arn)

    def set_security_groups(self: Any, arn: str, sec_groups: list[str]) -> None:
        _check_group_count(sec_groups)
        set_groups(self, arn, sec_groups)

    def create_listener_(self: Any, load_balancer_arn: str, *args: Any, **kwargs: Any) -> Any:
        lb = self.load_balancers.get(load_balancer_arn)
        if _settings.quotas and lb is not None and len(lb.listeners) >= MAX_NLB_LISTENERS:
            raise ELBClientError(
                "TooManyListeners", f"You've reached the limit of {MAX_NLB_LISTENERS} listeners per load balancer"
            )
        return create_listener(self, load_balancer_arn, *args, **kwargs)

    ELBv2Backend.create_load_balancer = create_load_balancer  # type: ignore[method-assign]
    ELBv2Backend.create_target_group = create_target_group  # type: ignore[method-assign]
    ELBv2Backend.delete_load_balancer = delete_load_balancer  # type: ignore[method-assign]
    ELBv2Backend.set_security_groups = set_security_groups  # type: ignore[method-assign]
    ELBv2Backend.create_listener = create_listener_  # type: ignore[method-assign]


# -- Classic ELB ----------------------------------------------------------------------------------------------------
def _patch_elb() -> None:
    from moto.ec2.models import ec2_backends
    from moto.elb.exceptions import ELBClientError
    from moto.elb.models import ELBBackend, FakeListener

    def instance_protocol(listener: Any) -> str:
        wanted = listener.__dict__.get("_ccm_instance_protocol")
        return str(wanted if wanted and _settings.clb_instance_protocol else listener.protocol)

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
        if _settings.quotas and count > MAX_CLB_LISTENERS:
            raise ELBClientError(
                "InvalidConfigurationRequest",
                f"A load balancer can have at most {MAX_CLB_LISTENERS} listeners; {count} were asked for",
            )

    def create_load_balancer(
        self: Any, name: str, zones: Any, ports: list[dict[str, Any]], *args: Any, **kw: Any
    ) -> Any:
        _check_group_count(kw.get("security_groups") or (args[2] if len(args) > 2 else None))
        too_many_listeners(len(ports))
        quota = _settings.max_clbs_per_region
        if _settings.quotas and len(self.load_balancers) >= quota and name not in self.load_balancers:
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
            _hold_groups(self.account_id, self.region_name, list(lb.security_groups or []))
        delete_lb(self, load_balancer_name)

    def apply_security_groups_to_load_balancer(self: Any, load_balancer_name: str, security_group_ids: Any) -> None:
        _check_group_count(list(security_group_ids))
        apply_groups(self, load_balancer_name, security_group_ids)

    def register_instances(self: Any, load_balancer_name: str, instance_ids: Any, *args: Any, **kw: Any) -> Any:
        ids = list(instance_ids)
        if _settings.targets:
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
