"""Names and tags, compatible with cloud-provider-aws so its load balancers can be found (and later adopted)."""

from __future__ import annotations

import hashlib
from typing import Any

# The ownership tag keys are part of the contracts: the service controller reads them too (ccm.service.decisions).
from ccm.contracts.cloud import SERVICE_NAME_TAG as SERVICE_NAME_TAG
from ccm.contracts.cloud import SERVICE_UID_TAG as SERVICE_UID_TAG
from ccm.contracts.cluster import CLUSTER_TAG_PREFIX as CLUSTER_TAG_PREFIX
from ccm.contracts.cluster import Cluster


def cluster_tag_key(cluster_name: str) -> str:
    """For callers holding only a name (the doctor, route tables); the rest ask `Cluster.tag_key`."""
    return Cluster(cluster_name).tag_key


def load_balancer_name(uid: str) -> str:
    """Upstream GetLoadBalancerName: "a" + UID without dashes, first 32 characters."""
    return ("a" + uid.replace("-", ""))[:32]


def target_group_name(namespace: str, name: str, uid: str, identity: tuple[Any, ...]) -> str:
    """`k8s-<ns:8>-<name:8>-<hash:10>`; the hash covers everything AWS cannot change in place."""
    digest = hashlib.sha1(repr((uid, *identity)).encode(), usedforsecurity=False).hexdigest()[:10]
    return f"k8s-{namespace[:8].strip('-')}-{name[:8].strip('-')}-{digest}"


def resource_tags(cluster_name: str, namespace: str, name: str, uid: str) -> dict[str, str]:
    return {
        cluster_tag_key(cluster_name): "owned",
        SERVICE_NAME_TAG: f"{namespace}/{name}",
        SERVICE_UID_TAG: uid,
    }


def as_tag_list(tags: dict[str, str]) -> list[dict[str, str]]:
    return [{"Key": k, "Value": v} for k, v in sorted(tags.items())]
