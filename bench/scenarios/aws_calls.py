"""Exact AWS API calls per operation for an NLB Service with 2 TCP ports and 3 nodes (botocore hooks)."""

from __future__ import annotations

import time
from collections import Counter
from typing import Any

from bench.anchors import CLOUD_PROVIDER_AWS
from bench.world import BenchWorld
from ccm.aws.applied import FULL_READ_SECONDS
from ccm.aws.clients import CallCounter
from ccm.config import DEFAULT_LOAD_BALANCER_CLASS
from ccm.contracts.messages import parse_delta
from devstack.aws_faithful import FaithfulSettings
from watcher.config import DEFAULT_RESYNC_SECONDS as WATCHER_RESYNC_SECONDS

OUR_CLASS = DEFAULT_LOAD_BALANCER_CLASS  # the template's default loadBalancerClass
RESYNC_SECONDS = WATCHER_RESYNC_SECONDS  # the watcher's default --resync-seconds
FULL_READ_EVERY = round(FULL_READ_SECONDS / RESYNC_SECONDS)  # resyncs per full read (ccm.aws.applied)


def _lb(calls: dict[str, int]) -> int:
    """Load balancer and network calls (ELB, EC2, tagging): the scope of the cloud-provider-aws anchor. The
    membership table's DynamoDB calls have no counterpart there and are reported beside them."""
    return sum(n for op, n in calls.items() if not op.startswith("dynamodb:"))


def _ddb(calls: dict[str, int]) -> int:
    return sum(n for op, n in calls.items() if op.startswith("dynamodb:"))


def _summary(calls: dict[str, int]) -> dict[str, Any]:
    return {
        "total": sum(calls.values()),
        "mutating": CallCounter.mutating(calls),
        "by_operation": dict(sorted(calls.items())),
    }


def measure(lb_type: str) -> dict[str, Any]:
    """create / no-op resync / node added / delete for one Service with 2 TCP ports and 3 nodes."""
    # AWS as it answers, with its security-group hold after a deleted LB shortened to 2 s: the delete is the pass
    # that deletes the LB (AWS refuses the group: DependencyViolation, retried) plus the retry after the hold. Reads
    # are consistent at once, so the counts do not depend on this machine's speed.
    bench = BenchWorld(
        nodes=3, lb_type=lb_type, faithful=FaithfulSettings(sg_release_seconds=2.0, eventual_consistency=False)
    )
    took: dict[str, float] = {}

    def timed(op: str, delta: Any, receive_count: int = 1) -> dict[str, int]:
        started = time.monotonic()
        calls = bench.reconcile(delta, receive_count=receive_count)
        took[op] = round((time.monotonic() - started) * 1000, 1)
        return calls

    try:
        # A warm execution environment: what is paid once per environment (subnet and node-group discovery, the
        # shared security groups) is paid by an earlier Service, and reported apart.
        first = timed("create_cold_environment", bench.delta("Service", "ADDED", bench.create_service("warm", [80])))
        ours = bench.create_service("ours", [80, 443], load_balancer_class=OUR_CLASS)
        create_ours = timed("create_our_class", bench.delta("Service", "ADDED", ours))
        # Source ranges other than 0.0.0.0/0 need a frontend group of the LB's own.
        ranged = bench.create_service("ranged", [80, 443], load_balancer_class=OUR_CLASS, source_ranges=["10.0.0.0/8"])
        create_ranged = timed("create_source_ranges", bench.delta("Service", "ADDED", ranged))
        svc = bench.create_service("calls", [80, 443])
        create = timed("create", bench.delta("Service", "ADDED", svc))
        svc = bench.service("calls")
        noop = timed("noop", bench.delta("Service", "SYNC", svc))  # the periodic drift-repair resync
        duplicate = bench.reconcile(bench.delta("Service", "MODIFIED", svc))  # a duplicate delivery
        # The full read-and-repair a resync runs once its checkpoint is due (and every retry runs).
        full_read = bench.reconcile(bench.delta("Service", "SYNC", svc), receive_count=2)

        node = bench.add_node()
        now = time.time() - 60  # a bucket already over: the HOSTS message is processed at once
        updater = bench.updater(clock=lambda: now)
        bench.clients.counter.reset_thread()
        updater.on_node_delta(bench.delta("Node", "ADDED", node))
        node_side = dict(bench.clients.counter.thread_calls())
        messages = bench.sqs.receive_message(QueueUrl=bench.queue_url, MaxNumberOfMessages=10)["Messages"]
        add_node = timed("add_node", parse_delta(messages[0]["Body"]), receive_count=2)

        bench.emulator.delete("services", "default", "calls")
        started, wait = time.monotonic(), 2.5
        passes = bench.reconcile_until_done(bench.delta("Service", "MODIFIED", bench.service("calls")), wait=wait)
        took["delete"] = round((time.monotonic() - started - wait * (len(passes) - 1)) * 1000, 1)  # work, not waits
        delete = dict(sum((Counter(p) for p in passes), Counter()))
        # The DELETED event of our own delete comes back once the finalizer is gone.
        gone = bench.delta("Service", "DELETED", svc)
        echo = bench.reconcile(gone)
    finally:
        bench.close()
    return {
        "create": _lb(create),
        "create_our_class": _lb(create_ours),
        "create_cold_environment": _lb(first),
        "create_source_ranges": _lb(create_ranged),
        "noop": _lb(noop),
        "add_node": _lb(add_node),
        "delete": _lb(delete),
        "delete_echo": _lb(echo),
        "delete_passes": len(passes),  # AWS holds the group until the deleted LB's network interfaces let go
        "delete_retry_pass": _lb(passes[-1]) if len(passes) > 1 else 0,  # each retry while AWS holds the group
        "mutating_noop": CallCounter.mutating(noop),
        "noop_duplicate_delivery": _lb(duplicate),
        "noop_full_read": _lb(full_read),
        "full_read_every": FULL_READ_EVERY,
        # A resync's average: one read, and once in FULL_READ_EVERY resyncs the full read instead.
        "noop_average": round(1 + (_lb(full_read) - 1) / FULL_READ_EVERY, 2),
        "dynamodb": {
            "create": _ddb(create),
            "noop": _ddb(noop),
            "add_node": _ddb(add_node) + _ddb(node_side),
            "delete": _ddb(delete),
        },
        "add_node_nodes_lambda": sum(node_side.values()),
        # one single-threaded run against moto in this process, no injected latency: the work besides AWS's own
        "duration_ms": took,
        "detail": {
            "create": _summary(create),
            "create_our_class": _summary(create_ours),
            "create_cold_environment": _summary(first),
            "create_source_ranges": _summary(create_ranged),
            "delete_echo": _summary(echo),
            "noop": _summary(noop),
            "noop_duplicate_delivery": _summary(duplicate),
            "noop_full_read": _summary(full_read),
            "add_node": _summary(add_node),
            "add_node_nodes_lambda": _summary(node_side),
            "delete": _summary(delete),
        },
    }


def run() -> dict[str, Any]:
    return {
        "nlb": measure("nlb"),
        "clb": measure("clb"),
        "anchor": CLOUD_PROVIDER_AWS,
        "notes": "Counts of ELB, EC2 and tagging API calls (the anchor's scope); the membership table's DynamoDB "
        "calls are under <type>.dynamodb. create = a claimed Service (no loadBalancerClass: one read, since "
        "cloud-provider-aws names its LBs alike), create_our_class = our loadBalancerClass (created without "
        "looking), create_source_ranges = our class with its own frontend group, all in a warm execution "
        "environment; create_cold_environment = the first create of an environment (subnet discovery, the shared "
        "security groups and their node rule). noop = a periodic SYNC or a duplicate delivery, read against the "
        "checkpoint (ccm.aws.applied); noop_full_read = the full read-and-repair it makes once in full_read_every "
        "resyncs (and on every retry); noop_average = their mean. delete = every pass of the delete (delete_passes), "
        "delete_echo = the DELETED event of our own delete.",
    }
