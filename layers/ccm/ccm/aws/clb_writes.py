"""The Classic ELB driver's writes: CreateLoadBalancer and the in-place edits of a `clb_model` plan.

Apart from the driver so the reconcile flow (`clb.py`) reads as read -> plan -> apply without the API details.
"""

from __future__ import annotations

import logging
from typing import Any

from botocore.exceptions import ClientError

from ccm.aws import clb_model as m
from ccm.aws import names
from ccm.aws.clients import AwsClients
from ccm.aws.errors import error_code
from ccm.aws.subnets import forget_discovery
from ccm.aws.targets import register_instances
from ccm.contracts.cloud import RetryError

log = logging.getLogger(__name__)


def create_lb(clients: AwsClients, vpc_id: str, desired: m.CLBSpec) -> str:
    """CreateLoadBalancer with listeners, subnets, groups and tags inline; returns its DNS name."""
    kwargs: dict[str, Any] = {}
    if desired.security_groups:
        kwargs["SecurityGroups"] = list(desired.security_groups)
    try:
        created = clients.client("elb").create_load_balancer(
            LoadBalancerName=desired.name,
            Listeners=[_listener(ls) for ls in desired.listeners],
            Subnets=list(desired.subnets),
            Scheme=desired.scheme,
            Tags=names.as_tag_list(dict(desired.tags)),
            **kwargs,
        )
    except ClientError as err:
        code = error_code(err)
        if code == "DuplicateLoadBalancerName":
            raise RetryError(f"{desired.name} appeared concurrently", delay_seconds=5) from err
        if code in ("SubnetNotFound", "InvalidSubnet"):
            forget_discovery(vpc_id)  # a subnet of the reused discovery is gone: read again next time
        raise
    return str(created["DNSName"])


def apply_plan(clients: AwsClients, name: str, operations: list[m.Operation]) -> list[str]:
    """Apply the plan; returns the instances AWS refused to register (dropped from this pass)."""
    elb = clients.client("elb")
    refused: list[str] = []
    for op in operations:
        log.info("clb %s: %s", name, op)
        if isinstance(op, m.AddTags):
            elb.add_tags(LoadBalancerNames=[name], Tags=[{"Key": k, "Value": v} for k, v in op.tags])
        elif isinstance(op, m.DeleteListeners):
            elb.delete_load_balancer_listeners(LoadBalancerName=name, LoadBalancerPorts=list(op.ports))
        elif isinstance(op, m.CreateListeners):
            elb.create_load_balancer_listeners(LoadBalancerName=name, Listeners=[_listener(ls) for ls in op.listeners])
        elif isinstance(op, m.SetCertificate):
            elb.set_load_balancer_listener_ssl_certificate(
                LoadBalancerName=name, LoadBalancerPort=op.port, SSLCertificateId=op.certificate
            )
        elif isinstance(op, m.CreatePolicy):
            elb.create_load_balancer_policy(
                LoadBalancerName=name,
                PolicyName=op.name,
                PolicyTypeName=op.type_name,
                PolicyAttributes=[{"AttributeName": k, "AttributeValue": v} for k, v in op.attributes],
            )
        elif isinstance(op, m.SetListenerPolicies):
            elb.set_load_balancer_policies_of_listener(
                LoadBalancerName=name, LoadBalancerPort=op.port, PolicyNames=list(op.policies)
            )
        elif isinstance(op, m.SetBackendPolicies):
            elb.set_load_balancer_policies_for_backend_server(
                LoadBalancerName=name, InstancePort=op.instance_port, PolicyNames=list(op.policies)
            )
        elif isinstance(op, m.DeletePolicy):
            elb.delete_load_balancer_policy(LoadBalancerName=name, PolicyName=op.name)
        elif isinstance(op, m.ConfigureHealthCheck):
            elb.configure_health_check(
                LoadBalancerName=name,
                HealthCheck={
                    "Target": op.health.target,
                    "Interval": op.health.interval,
                    "Timeout": op.health.timeout,
                    "HealthyThreshold": op.health.healthy,
                    "UnhealthyThreshold": op.health.unhealthy,
                },
            )
        elif isinstance(op, m.ModifyAttributes):
            elb.modify_load_balancer_attributes(LoadBalancerName=name, LoadBalancerAttributes=op.to_api())
        elif isinstance(op, m.AttachSubnets):
            elb.attach_load_balancer_to_subnets(LoadBalancerName=name, Subnets=list(op.subnets))
        elif isinstance(op, m.DetachSubnets):
            elb.detach_load_balancer_from_subnets(LoadBalancerName=name, Subnets=list(op.subnets))
        elif isinstance(op, m.ApplySecurityGroups):
            elb.apply_security_groups_to_load_balancer(LoadBalancerName=name, SecurityGroups=list(op.groups))
        elif isinstance(op, m.RegisterInstances):
            refused += register_instances(elb, clients.ec2, name, op.instance_ids)
        elif isinstance(op, m.DeregisterInstances):
            elb.deregister_instances_from_load_balancer(
                LoadBalancerName=name, Instances=[{"InstanceId": i} for i in op.instance_ids]
            )
    return refused


def _listener(ls: m.ListenerSpec) -> dict[str, Any]:
    out: dict[str, Any] = {
        "Protocol": ls.protocol,
        "LoadBalancerPort": ls.port,
        "InstanceProtocol": ls.instance_protocol,
        "InstancePort": ls.instance_port,
    }
    if ls.certificate:
        out["SSLCertificateId"] = ls.certificate
    return out


def apply_instances_by_name(clients: AwsClients, name: str, add: frozenset[str], remove: frozenset[str]) -> list[str]:
    """Register/deregister the difference on the LB of the checkpoint; returns the instances AWS refused. A gone LB
    is a RetryError (the next pass reads everything)."""
    elb = clients.client("elb")
    try:
        refused = register_instances(elb, clients.ec2, name, sorted(add)) if add else []
        if remove:
            elb.deregister_instances_from_load_balancer(
                LoadBalancerName=name, Instances=[{"InstanceId": i} for i in sorted(remove)]
            )
    except ClientError as err:
        if error_code(err) != "LoadBalancerNotFound":
            raise
        raise RetryError(f"{name} is gone: reading it in full", delay_seconds=1) from err
    return refused


def claim_and_delete(clients: AwsClients, name: str, uid: str, claimed: bool) -> None:
    """Delete the LB (listeners, policies, health check and registrations go with it). One made by
    cloud-provider-aws and never reconciled here gets our UID tag first: IAM deletes only UID-tagged LBs and lets us
    add that tag to a cluster-tagged LB without one (template: AdoptClusterLoadBalancers)."""
    elb = clients.client("elb")
    if not claimed:
        elb.add_tags(LoadBalancerNames=[name], Tags=[{"Key": names.SERVICE_UID_TAG, "Value": uid}])
    elb.delete_load_balancer(LoadBalancerName=name)
