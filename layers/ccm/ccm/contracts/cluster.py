"""The cluster one deployment serves, as one value built once per composition root (`ccm.config.Settings.cluster`)
and handed to the drivers and controllers that need it: nothing passes the cluster name per call, and the cluster
tag key, the class, the claim of class-less Services and the default load balancer type are worked out here once.

It also holds the one rule for "is this resource ours to delete" (`claim`), used by both load balancer drivers
(whether a Service, its UID or a message asked), the sweeper and the stack's teardown.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final, Literal

from ccm.contracts.cloud import SERVICE_UID_TAG

CLUSTER_TAG_PREFIX: Final = "kubernetes.io/cluster/"
OWNED: Final = "owned"
LbType = Literal["nlb", "clb"]


class Claim(enum.Enum):
    OURS = "ours"  # this cluster's tag and our UID tag naming exactly that UID
    ADOPTABLE = "adoptable"  # this cluster's tag, no UID tag: made by cloud-provider-aws under the UID's name
    NOT_OURS = "not-ours"  # anything else: another cluster's, made by hand, or another Service's UID


@dataclass(frozen=True, slots=True)
class Cluster:
    name: str
    vpc_id: str = ""
    load_balancer_class: str = "ccm.aws/serverless"
    claim_unclassed: bool = True  # serve LoadBalancer Services without spec.loadBalancerClass too
    default_lb_type: LbType = "clb"

    @classmethod
    def of(
        cls, name: str, vpc_id: str, load_balancer_class: str, claim_unclassed: bool, default_lb_type: str
    ) -> Cluster:
        """Normalised once: any default type but `nlb` is cloud-provider-aws's Classic ELB."""
        return cls(name, vpc_id, load_balancer_class, claim_unclassed, "nlb" if default_lb_type == "nlb" else "clb")

    @property
    def tag_key(self) -> str:
        """`kubernetes.io/cluster/<name>`: what cloud-provider-aws, EKS and we tag the cluster's resources with."""
        return CLUSTER_TAG_PREFIX + self.name

    def owns(self, tags: Mapping[str, str]) -> bool:
        return tags.get(self.tag_key) == OWNED

    def claim(self, tags: Mapping[str, str], uid: str) -> Claim:
        """Pure: whose is a resource named for `uid` that carries `tags`. A name is no proof (anyone can make a
        load balancer called `a<uid>`), so only the tags decide: this cluster's tag (any value, as cloud-provider-aws
        and the services role's IAM conditions judge it; the sweeper considers only `owned` resources at all) and
        our UID tag naming exactly `uid`. A resource with the cluster tag and no UID tag is adoptable: the caller
        tags it with the UID before deleting it (IAM lets us add that tag to a cluster resource without one)."""
        if self.tag_key not in tags:
            return Claim.NOT_OURS
        owner = tags.get(SERVICE_UID_TAG)
        if owner is None:
            return Claim.ADOPTABLE
        return Claim.OURS if owner == uid else Claim.NOT_OURS
