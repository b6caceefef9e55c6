"""Registering instances with a load balancer when AWS may refuse some of them (both drivers).

AWS refuses the whole call when one instance is not running or does not exist: ELBv2 RegisterTargets answers
`InvalidTarget`, Classic ELB RegisterInstancesWithLoadBalancer `InvalidInstance` (the API references' errors). One
node whose instance is gone must not keep the Service's other nodes out: only after a refusal is EC2 asked which
instances run (one filtered DescribeInstances, never on an ordinary pass); those are registered and the others
returned, for a Warning event naming them. The next pass plans them again, so an instance that starts running is
registered then.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any, Final

from botocore.exceptions import ClientError

from ccm.aws.errors import error_code

log = logging.getLogger(__name__)

# Warning event reason: instances the load balancer API refused as targets.
REFUSED_TARGETS: Final = "TargetsRefused"
_FILTER_CHUNK: Final = 200  # EC2 accepts up to 200 values per filter


def running_instances(ec2: Any, instance_ids: Sequence[str]) -> set[str]:
    """Which of the instances are running (filters: an unknown ID is left out instead of failing the call)."""
    ids = sorted(set(instance_ids))
    running: set[str] = set()
    for start in range(0, len(ids), _FILTER_CHUNK):
        pages = ec2.get_paginator("describe_instances").paginate(
            Filters=[
                {"Name": "instance-id", "Values": ids[start : start + _FILTER_CHUNK]},
                {"Name": "instance-state-name", "Values": ["running"]},
            ]
        )
        running |= {i["InstanceId"] for page in pages for r in page["Reservations"] for i in r["Instances"]}
    return running


def refused_message(instance_ids: Sequence[str]) -> str:
    return (
        f"not registered as targets (AWS refused them: not running or gone): {', '.join(sorted(instance_ids))}; "
        "their nodes stay out of the load balancer until their instances run"
    )


def register_targets(elbv2: Any, ec2: Any, arn: str, port: int, instance_ids: Sequence[str]) -> list[str]:
    """RegisterTargets on an instance target group; returns the instances AWS refused (not registered)."""
    return _register(
        lambda ids: elbv2.register_targets(TargetGroupArn=arn, Targets=[{"Id": i, "Port": port} for i in ids]),
        "InvalidTarget",
        ec2,
        instance_ids,
        f"target group {arn}",
    )


def register_instances(elb: Any, ec2: Any, name: str, instance_ids: Sequence[str]) -> list[str]:
    """RegisterInstancesWithLoadBalancer on a Classic ELB; returns the instances AWS refused (not registered)."""
    return _register(
        lambda ids: elb.register_instances_with_load_balancer(
            LoadBalancerName=name, Instances=[{"InstanceId": i} for i in ids]
        ),
        "InvalidInstance",
        ec2,
        instance_ids,
        f"clb {name}",
    )


def _register(call: Any, refusal: str, ec2: Any, instance_ids: Sequence[str], what: str) -> list[str]:
    try:
        call(list(instance_ids))
        return []
    except ClientError as err:
        if error_code(err) != refusal:
            raise
    running = running_instances(ec2, instance_ids)
    refused = sorted(set(instance_ids) - running)
    log.warning("%s: %s", what, refused_message(refused))
    if running:
        call(sorted(running))
    return refused
