"""A Classic ELB as the `elb` API reports it, parsed into `clb_model.ObservedCLB` by pure functions.

Shared by the driver (`clb.py`) and the sweeper's inventory, which judge the same description the same way; apart
from the driver so the sweeper needs no driver to read one.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ccm.aws import clb_model as m


def observed_from_api(
    description: Mapping[str, Any], tags: Mapping[str, str], attributes: Mapping[str, Any] | None
) -> m.ObservedCLB:
    """Parse DescribeLoadBalancers (+ DescribeTags, + DescribeLoadBalancerAttributes when read)."""
    observed = m.ObservedCLB(
        name=description["LoadBalancerName"],
        dns_name=description.get("DNSName", ""),
        scheme=description.get("Scheme", ""),
        tags=dict(tags),
        instances=frozenset(i["InstanceId"] for i in description.get("Instances") or []),
        subnets=frozenset(description.get("Subnets") or []),
        security_groups=frozenset(description.get("SecurityGroups") or []),
        policies=frozenset((description.get("Policies") or {}).get("OtherPolicies") or []),
    )
    for item in description.get("ListenerDescriptions") or []:
        ls = item["Listener"]
        port = int(ls["LoadBalancerPort"])
        observed.listeners[port] = m.ListenerSpec(
            port,
            str(ls["Protocol"]).upper(),
            int(ls["InstancePort"]),
            str(ls.get("InstanceProtocol") or ls["Protocol"]).upper(),
            ls.get("SSLCertificateId") or "",
        )
        observed.listener_policies[port] = tuple(item.get("PolicyNames") or ())
    for backend in description.get("BackendServerDescriptions") or []:
        observed.backend_policies[int(backend["InstancePort"])] = tuple(backend.get("PolicyNames") or ())
    hc = description.get("HealthCheck")
    if hc:
        observed.health = m.HealthCheck.from_target(
            hc["Target"],
            healthy=int(hc["HealthyThreshold"]),
            unhealthy=int(hc["UnhealthyThreshold"]),
            interval=int(hc["Interval"]),
            timeout=int(hc["Timeout"]),
        )
    observed.attributes = None if attributes is None else attributes_from_api(attributes)
    return observed


def attributes_from_api(attrs: Mapping[str, Any]) -> m.Attributes:
    draining = attrs.get("ConnectionDraining") or {}
    log = attrs.get("AccessLog") or {}
    return m.Attributes(
        cross_zone=bool((attrs.get("CrossZoneLoadBalancing") or {}).get("Enabled", False)),
        draining=bool(draining.get("Enabled", False)),
        draining_timeout=int(draining.get("Timeout", 300)),
        idle_timeout=int((attrs.get("ConnectionSettings") or {}).get("IdleTimeout", 60)),
        access_log=bool(log.get("Enabled", False)),
        log_interval=int(log.get("EmitInterval", 60)),
        log_bucket=log.get("S3BucketName") or "",
        log_prefix=log.get("S3BucketPrefix") or "",
    )
