"""The NLB driver's writes: creating the load balancer and carrying out a plan of `nlb_model` operations (target
groups, targets, listeners, attributes), each AWS answer that means "retry" turned into a RetryError.

Apart from the driver so the reconcile flow (`nlb.py`) reads as read -> plan -> apply without the API details.
"""

from __future__ import annotations

import logging
from typing import Any

from botocore.exceptions import ClientError

from ccm.aws import names, nlb_observed
from ccm.aws import nlb_model as m
from ccm.aws.clients import AwsClients
from ccm.aws.errors import error_code
from ccm.aws.ip_targets import IpTargetRegistrar, nlb_warnings
from ccm.aws.subnets import forget_discovery
from ccm.aws.targets import register_targets
from ccm.contracts.cloud import RetryError
from ccm.contracts.endpoints import IpTarget

log = logging.getLogger(__name__)


def create_lb(
    clients: AwsClients, vpc_id: str, desired: m.NLBSpec, placement: dict[str, Any], group_ids: list[str]
) -> dict[str, Any]:
    if group_ids:
        placement = {**placement, "SecurityGroups": group_ids}
    try:
        created = clients.elbv2.create_load_balancer(
            Name=desired.name,
            Type="network",
            Scheme=desired.scheme,
            IpAddressType=desired.ip_address_type,
            Tags=names.as_tag_list(desired.tags),
            **placement,
        )["LoadBalancers"][0]
    except ClientError as err:
        if error_code(err) in ("SubnetNotFound", "InvalidSubnet"):
            forget_discovery(vpc_id)  # a subnet of the reused discovery is gone: read again next time
        if error_code(err) != "DuplicateLoadBalancerName":
            raise
        # Created without looking and one is there after all (made concurrently): the retry reads it.
        raise RetryError(f"{desired.name} exists already: reading it", delay_seconds=1) from err
    lb: dict[str, Any] = created
    return lb


def apply_plan(
    clients: AwsClients,
    vpc_id: str,
    operations: list[m.Operation],
    observed: m.ObservedNLB,
    desired: m.NLBSpec,
    registrar: IpTargetRegistrar | None = None,
    ip_warnings: list[tuple[str, str]] | None = None,
) -> tuple[list[str], dict[str, str]]:
    """Apply the plan; returns the instances AWS refused as targets (dropped from this pass, reported) and the
    ARN of every target group by name. `ip` target groups are converged by `registrar`; what it could not register
    (outside the VPC's subnets, over the quota) is added to `ip_warnings` as (reason, message)."""
    elbv2 = clients.elbv2
    refused: set[str] = set()
    arn_by_name = {tg.name: tg.arn for tg in observed.target_groups.values()}
    held = [op for op in operations if isinstance(op, m.AwaitHealthy)]
    syncs = [op for op in operations if isinstance(op, m.SyncIpTargets)]
    for op in operations:
        log.info("nlb %s: %s", desired.name, type(op).__name__)
        if isinstance(op, m.CreateTargetGroup):
            arn_by_name[op.spec.name] = create_target_group(clients, vpc_id, op.spec, desired.tags)
        elif isinstance(op, m.SetTargetGroupAttributes):
            elbv2.modify_target_group_attributes(
                TargetGroupArn=arn_by_name[op.name], Attributes=[{"Key": k, "Value": v} for k, v in op.attributes]
            )
        elif isinstance(op, m.SetLoadBalancerAttributes):
            elbv2.modify_load_balancer_attributes(
                LoadBalancerArn=observed.arn, Attributes=[{"Key": k, "Value": v} for k, v in op.attributes]
            )
        elif isinstance(op, m.ModifyTargetGroup):
            elbv2.modify_target_group(TargetGroupArn=arn_by_name[op.name], **nlb_observed.health_kwargs(op.health))
        elif isinstance(op, m.RegisterTargets):
            refused.update(register_targets(elbv2, clients.ec2, arn_by_name[op.name], op.port, op.instance_ids))
        elif isinstance(op, m.DeregisterTargets):
            elbv2.deregister_targets(
                TargetGroupArn=arn_by_name[op.name], Targets=[{"Id": i, "Port": op.port} for i in op.instance_ids]
            )
        elif isinstance(op, m.SyncIpTargets) and op is syncs[-1]:
            # All the NLB's ip groups at once, when every one exists: its target quotas count them together.
            registrar = registrar or IpTargetRegistrar(clients)
            warnings = sync_ip_groups(registrar, vpc_id, desired, observed, arn_by_name)
            if ip_warnings is not None:
                ip_warnings.extend(warnings)
        elif isinstance(op, m.CreateListener):
            create_listener(clients, observed.arn, op, arn_by_name[op.target_group], desired.tags)
        elif isinstance(op, m.ModifyListener):
            elbv2.modify_listener(
                ListenerArn=op.arn,
                Protocol=op.protocol,
                DefaultActions=[{"Type": "forward", "TargetGroupArn": arn_by_name[op.target_group]}],
                **nlb_observed.tls_kwargs(op.certificate, op.ssl_policy),
            )
        elif isinstance(op, m.DeleteListener):
            elbv2.delete_listener(ListenerArn=op.arn)
        elif isinstance(op, m.DeleteTargetGroup):
            delete_target_group(clients, op.arn)
    if held:
        # Traffic stays on the old group until the new one has a healthy target; never sleep in a Lambda.
        waiting = ", ".join(f"{op.name} (port {op.port})" for op in held)
        raise RetryError(
            f"waiting for target group {waiting} to report a healthy target before switching its listener",
            delay_seconds=max(op.delay_seconds for op in held),
        )
    return sorted(refused), arn_by_name


def sync_ip_groups(
    registrar: IpTargetRegistrar,
    vpc_id: str,
    desired: m.NLBSpec,
    observed: m.ObservedNLB,
    arn_by_name: dict[str, str],
) -> list[tuple[str, str]]:
    """Converge every `ip` group of the desired NLB (unchanged ones too: they count towards its quotas); returns
    the Warnings' (reason, message)."""
    groups = {}
    for ls in desired.listeners:
        tg = ls.target_group
        if tg.target_type == "ip" and tg.name in arn_by_name:
            have = observed.target_groups.get(arn_by_name[tg.name])
            groups[arn_by_name[tg.name]] = (tg.ip_targets, m.ip_health(have) if have else {})
    plans = registrar.plan_all(vpc_id, groups, cross_zone(desired))
    registrar.apply_all(plans)
    return nlb_warnings(plans.values())


def cross_zone(desired: m.NLBSpec) -> bool:
    return dict(desired.attributes).get("load_balancing.cross_zone.enabled") == "true"


def create_target_group(clients: AwsClients, vpc_id: str, spec: m.TargetGroupSpec, tags: dict[str, str]) -> str:
    # IpAddressType only for `ip` groups: instance groups keep the AWS default (ipv4), as before.
    family = {"IpAddressType": spec.ip_address_type} if spec.target_type == "ip" else {}
    try:
        created = clients.elbv2.create_target_group(
            Name=spec.name,
            Protocol=spec.protocol,
            Port=spec.port,
            VpcId=vpc_id,
            TargetType=spec.target_type,
            Tags=names.as_tag_list(tags),
            **family,
            **nlb_observed.health_kwargs(spec.health),
        )
        return str(created["TargetGroups"][0]["TargetGroupArn"])
    except ClientError as err:
        if error_code(err) != "DuplicateTargetGroupName":
            raise
        # AWS returns the existing group for an identical create; some implementations refuse instead.
        found = clients.elbv2.describe_target_groups(Names=[spec.name])["TargetGroups"]
        return str(found[0]["TargetGroupArn"])


def create_listener(clients: AwsClients, lb_arn: str, op: m.CreateListener, tg_arn: str, tags: dict[str, str]) -> None:
    try:
        clients.elbv2.create_listener(
            LoadBalancerArn=lb_arn,
            Port=op.port,
            Protocol=op.protocol,
            DefaultActions=[{"Type": "forward", "TargetGroupArn": tg_arn}],
            Tags=names.as_tag_list(tags),
            **nlb_observed.tls_kwargs(op.certificate, op.ssl_policy),
        )
    except ClientError as err:
        if error_code(err) != "DuplicateListener":
            raise
        raise RetryError(f"listener on port {op.port} appeared concurrently", delay_seconds=5) from err


def delete_target_group(clients: AwsClients, arn: str) -> None:
    try:
        clients.elbv2.delete_target_group(TargetGroupArn=arn)
    except ClientError as err:
        code = error_code(err)
        if code == "TargetGroupNotFound":
            return
        if code == "ResourceInUse":
            # The LB or listener that used it is still being deleted: ask the queue to come back.
            raise RetryError(f"target group {arn} still in use", delay_seconds=10) from err
        raise


def delete_lb(clients: AwsClients, lb_arn: str) -> None:
    """The NLB; its listeners go with it. Gone already is done."""
    try:
        clients.elbv2.delete_load_balancer(LoadBalancerArn=lb_arn)
    except ClientError as err:
        if error_code(err) != "LoadBalancerNotFound":
            raise


def set_security_groups(clients: AwsClients, lb_arn: str, group_ids: list[str]) -> None:
    clients.elbv2.set_security_groups(LoadBalancerArn=lb_arn, SecurityGroups=list(group_ids))


def apply_targets_by_arn(
    clients: AwsClients, target_groups: tuple[tuple[str, int], ...], add: frozenset[str], remove: frozenset[str]
) -> list[str]:
    """Register/deregister the difference by stored target-group ARNs; returns the instances AWS refused. A gone
    target group is a RetryError (the next pass reads everything)."""
    refused: set[str] = set()
    try:
        for arn, port in target_groups:
            if add:
                refused.update(register_targets(clients.elbv2, clients.ec2, arn, port, sorted(add)))
            if remove:
                clients.elbv2.deregister_targets(
                    TargetGroupArn=arn, Targets=[{"Id": i, "Port": port} for i in sorted(remove)]
                )
    except ClientError as err:
        if error_code(err) != "TargetGroupNotFound":
            raise
        raise RetryError("a target group of the checkpoint is gone: reading it in full", delay_seconds=1) from err
    return sorted(refused)


def sync_ip_targets_by_arn(
    registrar: IpTargetRegistrar,
    vpc_id: str,
    groups: list[tuple[str, frozenset[IpTarget]]],
    cross_zone: bool = False,
) -> list[tuple[str, str]]:
    """Converge the stored `ip` target groups of one NLB (ARN, wanted targets), planned together against its
    quotas: observe each, plan, apply; returns the Warnings' (reason, message). A gone group is a RetryError (the
    next pass reads everything)."""
    try:
        observed = {arn: (wanted, registrar.observe(arn)) for arn, wanted in groups}
        plans = registrar.plan_all(vpc_id, observed, cross_zone)
        registrar.apply_all(plans)
    except ClientError as err:
        if error_code(err) != "TargetGroupNotFound":
            raise
        raise RetryError("a target group of the checkpoint is gone: reading it in full", delay_seconds=1) from err
    return nlb_warnings(plans.values())
