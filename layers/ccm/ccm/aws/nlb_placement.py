"""Where an NLB is placed: the subnets, Elastic IPs and private IPs of CreateLoadBalancer, which AWS fixes at
creation, and the Warnings for a Service that later asks for others (pure; ccm.aws.fixed_settings has the rule)."""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping, Sequence
from typing import Any

from ccm.aws import fixed_settings as fixed
from ccm.aws.lbconfig import PREFIX as ANNOTATION_PREFIX
from ccm.aws.lbconfig import LoadBalancerConfig


def placement(config: LoadBalancerConfig, subnets: Sequence[str], cidrs: Mapping[str, str]) -> dict[str, Any]:
    """CreateLoadBalancer's placement: plain subnets, or subnet mappings carrying the EIPs (in the order given,
    as upstream) and the private IPs (each in the subnet whose CIDR contains it; validated before)."""
    if not (config.eip_allocations or config.private_ipv4_addresses):
        return {"Subnets": list(subnets)}
    mappings: list[dict[str, str]] = []
    for i, subnet in enumerate(subnets):
        mapping = {"SubnetId": subnet}
        if config.eip_allocations:
            mapping["AllocationId"] = config.eip_allocations[i]
        if config.private_ipv4_addresses:
            network = ipaddress.ip_network(cidrs[subnet], strict=False)
            mapping["PrivateIPv4Address"] = next(
                a for a in config.private_ipv4_addresses if ipaddress.ip_address(a) in network
            )
        mappings.append(mapping)
    return {"SubnetMappings": mappings}


def placement_warnings(
    lb: dict[str, Any], config: LoadBalancerConfig, wanted_subnets: Sequence[str] | None
) -> list[str]:
    """Pure: what the Service asks for that AWS fixes when an NLB is created (scheme, subnets, EIPs, private
    IPs). The live NLB is kept and converged otherwise; each difference becomes one Warning event. Addresses are
    compared only when the API reports them."""
    keep = fixed.keep("NLB")
    scheme = fixed.scheme_kept("NLB", lb.get("Scheme") or "", config)
    found: list[str] = [scheme] if scheme else []
    zones = lb.get("AvailabilityZones") or []
    live_subnets = sorted(z["SubnetId"] for z in zones if z.get("SubnetId"))
    if wanted_subnets is not None and live_subnets and sorted(wanted_subnets) != live_subnets:
        found.append(
            f"{ANNOTATION_PREFIX}subnets asks for {', '.join(sorted(wanted_subnets))} but the NLB was created "
            f"in {', '.join(live_subnets)} and AWS cannot move it: {keep}"
        )
    addresses = [a for z in zones for a in z.get("LoadBalancerAddresses") or []]
    for key, wanted, annotation in (
        ("AllocationId", config.eip_allocations, "eip-allocations"),
        ("PrivateIPv4Address", config.private_ipv4_addresses, "private-ipv4-addresses"),
    ):
        live = sorted(a[key] for a in addresses if a.get(key))
        if wanted and addresses and sorted(wanted) != live:
            shown = ", ".join(live) or "none"
            found.append(
                f"{ANNOTATION_PREFIX}{annotation} asks for {', '.join(sorted(wanted))} but the NLB has "
                f"{shown}, fixed at creation: {keep}"
            )
    return found
