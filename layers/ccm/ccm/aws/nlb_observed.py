"""An NLB as ELBv2 reports it, parsed into `nlb_model.ObservedNLB` by pure functions, and the API shapes the writes
send. Kept apart from the planner (`nlb_model`) so that one reads as desired -> plan; shared by the deployer's reads
and writes and the sweeper's inventory, which judge the same descriptions the same way."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ccm.aws.lbconfig import HealthCheck
from ccm.aws.nlb_model import AWS_DEFAULT_LB_ATTRIBUTES, ObservedListener, ObservedNLB, ObservedTargetGroup


# -- what AWS reports -------------------------------------------------------------------------------------------------
# As in clb_model: the driver reads (I/O), these parse (pure), `plan` decides (pure), the driver applies (I/O).
# An answer the driver did not read is None (or absent), and the plan then leaves what it describes alone.
def observed_from(
    lb: Mapping[str, Any],
    listeners: Sequence[Mapping[str, Any]],
    target_groups: Sequence[Mapping[str, Any]],
    *,
    attributes: Sequence[Mapping[str, Any]] | None = None,
    target_health: Mapping[str, Sequence[Mapping[str, Any]]] | None = None,
    target_group_attributes: Mapping[str, Sequence[Mapping[str, Any]]] | None = None,
) -> ObservedNLB:
    """Pure: the NLB as DescribeLoadBalancers (its entry), DescribeListeners and DescribeTargetGroups report it,
    plus when read DescribeLoadBalancerAttributes and, by target group ARN, DescribeTargetHealth and
    DescribeTargetGroupAttributes."""
    health, tg_attributes = target_health or {}, target_group_attributes or {}
    return ObservedNLB(
        arn=lb["LoadBalancerArn"],
        dns_name=lb["DNSName"],
        scheme=lb.get("Scheme", ""),
        listeners=[listener_from_api(ls) for ls in listeners],
        target_groups={
            tg["TargetGroupArn"]: target_group_from_api(
                tg, health.get(tg["TargetGroupArn"]), tg_attributes.get(tg["TargetGroupArn"])
            )
            for tg in target_groups
        },
        attributes=None if attributes is None else _key_values(attributes),
    )


def listener_from_api(listener: Mapping[str, Any]) -> ObservedListener:
    forward: Mapping[str, Any] = next((a for a in listener.get("DefaultActions", []) if a.get("Type") == "forward"), {})
    certificates = listener.get("Certificates") or [{}]
    return ObservedListener(
        listener["ListenerArn"],
        int(listener["Port"]),
        listener["Protocol"],
        forward.get("TargetGroupArn", ""),
        certificates[0].get("CertificateArn", ""),
        listener.get("SslPolicy", "") or "",
    )


def target_group_from_api(
    tg: Mapping[str, Any],
    health: Sequence[Mapping[str, Any]] | None,
    attributes: Sequence[Mapping[str, Any]] | None,
) -> ObservedTargetGroup:
    """A draining target is on its way out: not a target any more (registered again if still wanted)."""
    states = [(d["Target"]["Id"], d.get("TargetHealth", {}).get("State")) for d in health or ()]
    health_states = tuple(
        (
            str(d["Target"]["Id"]),
            int(d["Target"].get("Port") or tg.get("Port") or 0),
            str((d.get("TargetHealth") or {}).get("State") or ""),
            str((d.get("TargetHealth") or {}).get("Reason") or ""),
            str((d.get("TargetHealth") or {}).get("Description") or ""),
        )
        for d in health or ()
    )
    return ObservedTargetGroup(
        tg["TargetGroupArn"],
        tg["TargetGroupName"],
        tg["Protocol"],
        int(tg["Port"]),
        health_from_api(tg),
        frozenset(i for i, state in states if state != "draining"),
        None if attributes is None else _key_values(attributes),
        frozenset(i for i, state in states if state == "healthy"),
        str(tg.get("TargetType") or "instance"),
        health_states,
    )


def _key_values(attributes: Sequence[Mapping[str, Any]]) -> dict[str, str]:
    return {a["Key"]: a["Value"] for a in attributes}


# What DescribeLoadBalancerAttributes would answer for a new NLB: read as such, so a creation reads nothing back.
CREATED_LB_ATTRIBUTES: tuple[Mapping[str, str], ...] = tuple(
    {"Key": k, "Value": v} for k, v in AWS_DEFAULT_LB_ATTRIBUTES.items()
)


def health_from_api(tg: Mapping[str, Any]) -> HealthCheck:
    return HealthCheck(
        protocol=tg.get("HealthCheckProtocol", "TCP"),
        port=str(tg.get("HealthCheckPort", "traffic-port")),
        path=tg.get("HealthCheckPath", "") or "",
        healthy=int(tg.get("HealthyThresholdCount", 0)),
        unhealthy=int(tg.get("UnhealthyThresholdCount", 0)),
        interval=int(tg.get("HealthCheckIntervalSeconds", 0)),
        timeout=int(tg.get("HealthCheckTimeoutSeconds", 0)),
    )


# -- the API shape -----------------------------------------------------------------------------------------------------
def tls_kwargs(certificate: str, ssl_policy: str) -> dict[str, Any]:
    """The Certificates/SslPolicy parameters of CreateListener and ModifyListener (none for a plain listener)."""
    kwargs: dict[str, Any] = {}
    if certificate:
        kwargs["Certificates"] = [{"CertificateArn": certificate}]
        if ssl_policy:
            kwargs["SslPolicy"] = ssl_policy
    return kwargs


def health_kwargs(health: HealthCheck) -> dict[str, Any]:
    """The health-check parameters of CreateTargetGroup and ModifyTargetGroup."""
    kwargs: dict[str, Any] = {
        "HealthCheckProtocol": health.protocol,
        "HealthCheckPort": health.port,
        "HealthyThresholdCount": health.healthy,
        "UnhealthyThresholdCount": health.unhealthy,
        "HealthCheckIntervalSeconds": health.interval,
        "HealthCheckTimeoutSeconds": health.timeout,
    }
    if health.protocol.startswith("HTTP"):
        kwargs["HealthCheckPath"] = health.path
    return kwargs
