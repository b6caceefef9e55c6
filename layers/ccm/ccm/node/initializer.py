"""Cloud node initialisation decisions (upstream cloud node controller), pure functions over plain dicts.

A Node tainted `node.cloudprovider.kubernetes.io/uninitialized` gets, from its instance's metadata: providerID (if
empty), the instance-type / zone / region labels with their beta twins (always overwritten, as upstream), the
provider extra `topology.k8s.aws/zone-id` (only when absent, as upstream's AdditionalLabels) and its addresses.
Annotation `alpha.kubernetes.io/provided-node-ip` must match a cloud address, or nothing is applied and the taint
stays. Untainted nodes only get the beta -> GA label copy; their addresses are refreshed by `desired_addresses`.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field
from typing import Final

from ccm.contracts.cloud import InstanceMetadata, KubeObject
from ccm.node import model as m

# (primary, secondary): upstream's labelReconcileInfo keeps the beta label as the source of truth and makes sure
# the GA twin exists with the same value.
LABEL_RECONCILE: Final = (
    (m.BETA_ZONE, m.ZONE),
    (m.BETA_REGION, m.REGION),
    (m.BETA_INSTANCE_TYPE, m.INSTANCE_TYPE),
)

IpAddress = ipaddress.IPv4Address | ipaddress.IPv6Address


class InvalidNodeIP(ValueError):
    """The provided-node-ip annotation does not parse or matches no cloud address."""


@dataclass(frozen=True, slots=True)
class InitPlan:
    provider_id: str  # "" when the node already has one (immutable once set)
    labels: dict[str, str] = field(default_factory=dict)  # only the labels whose value changes
    addresses: list[dict[str, str]] = field(default_factory=list)


def cloud_labels(meta: InstanceMetadata) -> dict[str, str]:
    """The labels upstream always (over)writes, GA and beta twins."""
    out: dict[str, str] = {}
    if meta.instance_type:
        out[m.INSTANCE_TYPE] = out[m.BETA_INSTANCE_TYPE] = meta.instance_type
    if meta.zone:
        out[m.ZONE] = out[m.BETA_ZONE] = meta.zone
    if meta.region:
        out[m.REGION] = out[m.BETA_REGION] = meta.region
    return out


def beta_to_ga_labels(labels: dict[str, str]) -> dict[str, str]:
    """Labels to write on an initialised node: each GA twin set to its beta label's value (reconcileNodeLabels)."""
    return {ga: labels[beta] for beta, ga in LABEL_RECONCILE if beta in labels and labels.get(ga) != labels[beta]}


def parse_node_ips(value: str) -> list[IpAddress]:
    """The annotation: one IP, or two of different families (dual-stack), comma separated."""
    try:
        ips = [ipaddress.ip_address(part.strip()) for part in value.split(",")]
    except ValueError as err:
        raise InvalidNodeIP(f"could not parse {value!r}: {err}") from None
    if not ips or len(ips) > 2 or (len(ips) == 2 and ips[0].version == ips[1].version):
        raise InvalidNodeIP(f"could not parse {value!r}: expected one IP or a dual-stack pair")
    return ips


def _ip(address: str) -> IpAddress | None:
    try:
        return ipaddress.ip_address(address)
    except ValueError:
        return None  # DNS names never match a node IP


def apply_node_ip(value: str, cloud: list[dict[str, str]]) -> list[dict[str, str]]:
    """GetNodeAddressesFromNodeIP: the addresses matching the provided IPs first, and each matched type keeps
    only those; the other types follow in cloud order. Raises InvalidNodeIP when an IP matches nothing."""
    enforced: list[dict[str, str]] = []
    matched_types: set[str] = set()
    for node_ip in parse_node_ips(value):
        hits = [a for a in cloud if _ip(a["address"]) == node_ip]
        if not hits:
            raise InvalidNodeIP(f"failed to get node address from cloud provider that matches ip: {node_ip}")
        enforced.extend(dict(a) for a in hits)
        matched_types.update(a["type"] for a in hits)
    return enforced + [dict(a) for a in cloud if a["type"] not in matched_types]


def desired_addresses(node: KubeObject, meta: InstanceMetadata) -> list[dict[str, str]]:
    """status.addresses as upstream's updateNodeAddress computes them; [] means "leave them alone"."""
    cloud = [{"type": t, "address": a} for t, a in meta.addresses]
    if not cloud:
        return []
    if not any(a["type"] == "Hostname" for a in cloud):
        # No private DNS name (e.g. an IPv6-only instance): keep the hostname the kubelet reported.
        cloud += [a for a in m.addresses(node) if a["type"] == "Hostname"]
    provided = m.annotations_of(node).get(m.PROVIDED_NODE_IP)
    return apply_node_ip(provided, cloud) if provided else cloud


def plan_initialisation(node: KubeObject, meta: InstanceMetadata) -> InitPlan:
    """What initialising a tainted node writes; raises InvalidNodeIP (then nothing is written, the taint stays)."""
    addresses = desired_addresses(node, meta)
    current = m.labels(node)
    wanted = cloud_labels(meta)
    if meta.zone_id and m.ZONE_ID not in current:
        wanted[m.ZONE_ID] = meta.zone_id
    return InitPlan(
        provider_id="" if m.provider_id(node) else meta.provider_id,
        labels={k: v for k, v in wanted.items() if current.get(k) != v},
        addresses=addresses,
    )
