"""The cost we must beat: the AWS calls cloud-provider-aws makes, counted by reading its code
(pkg/providers/v1/aws_loadbalancer.go and aws.go in https://github.com/kubernetes/cloud-provider-aws), for a Service
with 2 TCP ports, 3 nodes, externalTrafficPolicy Cluster, no optional annotations."""

from __future__ import annotations

from typing import Any

CLOUD_PROVIDER_AWS: dict[str, Any] = {
    "nlb": {"create": 19, "noop": 12, "add_node": 16, "delete": None},
    "clb": {"create": 18, "noop": "8-10", "add_node": 5, "delete": None},
    "notes": "cloud-provider-aws figures counted from its code; its delete path was not counted",
}


def upstream_node_burst_calls(node_changes: int, services: int, ports: int) -> dict[str, int]:
    """Upstream: every node change triggers UpdateLoadBalancer on every LB Service, i.e. a full re-ensure
    (16 calls for a 2-port NLB, of which one RegisterTargets per target group)."""
    return {
        "target_calls": node_changes * services * ports,
        "reconciles": node_changes * services,
        "aws_calls": node_changes * services * CLOUD_PROVIDER_AWS["nlb"]["add_node"],
    }
