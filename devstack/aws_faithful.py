"""moto made to answer as AWS does where our controller's correctness depends on it: a local world kinder than AWS
would let tests pass that production fails.

Every patch changes moto's server-side models or its response dispatch, never boto3/botocore, so the drivers
run unchanged over the real wire protocols, in the moto server (devstack, e2e, chaos, bench) and in-process
(`mock_aws`, tests/integration). `install(settings)` patches once per process and replaces the settings; the
patches read the current settings on every call, so a test can switch a behaviour on or off. This module holds the
settings, `install` and `settle`; the patches are in devstack.aws_faithful_ec2 (security groups) and
devstack.aws_faithful_elb (NLB and Classic ELB).

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
- `ip` target groups (CreateTargetGroup TargetType=ip; ELBv2 API reference, TargetDescription): RegisterTargets of
  an address in a subnet of the group's VPC takes that subnet's zone and refuses another (`ValidationError ... is
  within the VPC, and cannot have its Availability Zone overridden`); an address outside the VPC's subnets must be
  in RFC 1918 / RFC 6598 (else `InvalidTarget`) and needs AvailabilityZone `all` (`ValidationError The
  Availability Zone is required for IP address ... because it is not in the VPC`); the whole call is refused. At
  most `max_targets_per_target_group` (NLB quotas: "Targets per Target Group per Region" 1,000) distinct targets,
  else `TooManyTargets`. DescribeTargetHealth: `initial` until HealthCheckIntervalSeconds x HealthyThresholdCount
  after registration, then `healthy`; `unused` (Target.NotInUse) while no listener forwards to the group; a
  deregistered target `draining` for deregistration_delay.timeout_seconds, and listed while it drains. moto
  answered `healthy` at once, forgot a deregistered target at once and accepted any address. Neither the API
  reference nor the SDK model limits the number of targets per RegisterTargets / DeregisterTargets call (the AWS
  Load Balancer Controller's 200 is its own chunk size), so no such limit is enforced.
- Target families and the NLB-wide target quotas (devstack.aws_faithful_elb_targets): an address of the other
  family than the group's IpAddressType answers `ValidationError`; an ipv6 group behind an `ipv4` NLB's listener
  `InvalidConfigurationRequest`; past `max_targets_per_zone_per_nlb` (500) or `max_targets_per_nlb` (3,000; the
  per-zone number with cross-zone load balancing), counted over the NLB's groups, `TooManyTargets`.
- Request throttling (`rate_limits`, off by default): token buckets with AWS's documented figures, answering
  `Throttling` / `RequestLimitExceeded` (devstack.aws_throttling).
- EC2 eventual consistency (`eventual_consistency`): a group or an inbound rule just created is not returned by
  DescribeSecurityGroups for `consistency_seconds` (EC2 developer guide, "Eventual consistency in the Amazon EC2
  API": a resource just created may not be visible to subsequent read calls).
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass, field

from devstack import (
    aws_faithful_ec2,
    aws_faithful_elb,
    aws_faithful_elb_targets,
    aws_idempotency,
    aws_tagging,
    aws_throttling,
)

ENV_SG_RELEASE = "DEVSTACK_SG_RELEASE_SECONDS"


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
    # `ip` target groups: DescribeTargetHealth follows the health-check timing and the deregistration delay, times
    # multiplied by target_time_scale (tests shorten them); targets per target group (Network Load Balancer quotas).
    target_health_timing: bool = True
    target_time_scale: float = 1.0
    max_targets_per_target_group: int = 1000
    # Per NLB, over the groups its listeners forward to (devstack.aws_faithful_elb_targets).
    max_targets_per_zone_per_nlb: int = 500
    max_targets_per_nlb: int = 3000


_settings = FaithfulSettings()
_lock = threading.Lock()
throttled = aws_throttling.throttled  # "api:Action" -> throttled requests, for tests and the benchmark
take_token = aws_throttling.take_token
settle = aws_faithful_ec2.settle  # part of this module's API (devstack.aws, tests), like install


def settings() -> FaithfulSettings:
    return _settings


def install(new: FaithfulSettings | None = None) -> FaithfulSettings:
    """Patch moto (once per process) and make `new` (default: all defaults) the behaviour from now on."""
    global _settings
    with _lock:
        _settings = new or FaithfulSettings()
        aws_throttling.reset(_settings.refill_scale)
        if not _installed:
            aws_faithful_ec2.patch_moto(settings)
            aws_faithful_elb.patch_elbv2(settings)
            aws_faithful_elb_targets.patch_listeners(settings)
            aws_idempotency.patch_moto()  # outermost: a repeated create is answered before any quota
            aws_faithful_elb.patch_elb(settings)
            aws_tagging.patch_moto()
            aws_throttling.patch_moto(lambda: _settings.rate_limits)
            _installed.append(True)
    return _settings


_installed: list[bool] = []
