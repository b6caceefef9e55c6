"""50 node joins within a minute, 100 LoadBalancer Services with 2 TCP ports each: how many Register/
DeregisterTargets calls and reconciles, against upstream's N x S full re-ensures.

The joins are replayed on a simulated minute (one every 1.2 s) in the past, bucket by bucket: the HOSTS
messages of a bucket are processed once its joins are in the table, exactly the order the deferral enforces."""

from __future__ import annotations

import time
from typing import Any

from bench.anchors import upstream_node_burst_calls
from bench.world import BenchWorld
from ccm.contracts.messages import parse_delta

SECURITY_GROUPS = "service.beta.kubernetes.io/aws-load-balancer-security-groups"


def run(nodes: int = 50, services: int = 100, window_s: float = 60.0, bucket_seconds: int = 15) -> dict[str, Any]:
    bench = BenchWorld(nodes=3)
    try:
        # One shared load-balancer group (bring your own): a managed group per LB puts one rule per LB on the node
        # group, and a node group holds 60 rules by default (AWS quota; moto enforces it): 100 LBs need a raised
        # quota or a shared group. Target calls, what this scenario measures, do not depend on it.
        shared = bench.clients.ec2.create_security_group(
            GroupName="bench-burst-lbs", Description="bench: shared LB group", VpcId=bench.world.vpc_id
        )["GroupId"]
        for i in range(services):
            svc = bench.create_service(f"burst-{i:03d}", [80, 443], annotations={SECURITY_GROUPS: shared})
            bench.reconcile(bench.delta("Service", "ADDED", svc))
        joins = [bench.add_node() for _ in range(nodes)]
        # A minute that is already over, aligned to a bucket: HOSTS messages are due at once, not deferred.
        start = (int(time.time()) // bucket_seconds - 100) * bucket_seconds
        clock = [float(start)]
        updater = bench.updater(clock=lambda: clock[0], bucket_seconds=bucket_seconds)
        target_calls = reconciles = messages_sent = 0
        by_bucket: dict[int, list[dict[str, Any]]] = {}
        for i, node in enumerate(joins):
            by_bucket.setdefault(int((start + i * window_s / nodes) // bucket_seconds), []).append(node)
        for bucket, members in sorted(by_bucket.items()):
            for i, node in enumerate(members):
                clock[0] = bucket * bucket_seconds + i * 0.01
                messages_sent += updater.on_node_delta(bench.delta("Node", "ADDED", node))
            while True:
                got = bench.sqs.receive_message(QueueUrl=bench.queue_url, MaxNumberOfMessages=10).get("Messages", [])
                if not got:
                    break
                for message in got:
                    calls = bench.reconcile(parse_delta(message["Body"]), receive_count=2)
                    target_calls += calls.get("elbv2:RegisterTargets", 0) + calls.get("elbv2:DeregisterTargets", 0)
                    reconciles += 1
                    bench.sqs.delete_message(QueueUrl=bench.queue_url, ReceiptHandle=message["ReceiptHandle"])
    finally:
        bench.close()
    groups = services * 2
    return {
        "nodes": nodes,
        "services": services,
        "target_calls": target_calls,
        "target_calls_per_target_group": round(target_calls / groups, 2),
        "reconciles": reconciles,
        "hosts_messages_sent": messages_sent,
        "buckets": len(by_bucket),
        "bucket_seconds": bucket_seconds,
        "anchor_upstream": upstream_node_burst_calls(nodes, services, 2),
    }
