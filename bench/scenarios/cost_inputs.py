"""What the cost model counts from the code itself, not from its source text:

- `emitted_metrics()`: the real runtimes of the four functions (services, nodes, routes, sweeper, built by their
  composition roots in ccm.wiring) driven through one record of every kind the stated churn produces, against moto
  and the Kubernetes emulator (bench.world.BenchWorld); the EMF blobs they print are collected per situation
  (bench.emf.EmfCapture). A distinct (namespace, metric name, dimension names + values) is one CloudWatch metric.
- `logged_lines()`: the JSON log lines the same run printed at INFO and above (Lambda's default level), by service
  (POWERTOOLS_SERVICE_NAME): what the dashboard's Logs Insights widgets query (tests/template/test_dashboard.py).
- `item_sizes()`: the membership table's items as ccm.aws.table_views writes them, sized by DynamoDB's rules.
"""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from aws_lambda_powertools import Metrics
from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord

from bench.emf import EmfCapture

REGION = "us-east-1"
# Labels of an EKS managed node group's Node (what ccm.membership stores: all of them); the devstack's are fewer.
EKS_NODE_LABELS = {
    "kubernetes.io/hostname": "ip-10-0-137-204.ec2.internal",
    "kubernetes.io/os": "linux",
    "kubernetes.io/arch": "arm64",
    "beta.kubernetes.io/os": "linux",
    "beta.kubernetes.io/arch": "arm64",
    "beta.kubernetes.io/instance-type": "m7g.large",
    "node.kubernetes.io/instance-type": "m7g.large",
    "failure-domain.beta.kubernetes.io/region": "us-east-1",
    "failure-domain.beta.kubernetes.io/zone": "us-east-1a",
    "topology.kubernetes.io/region": "us-east-1",
    "topology.kubernetes.io/zone": "us-east-1a",
    "topology.k8s.aws/zone-id": "use1-az1",
    "eks.amazonaws.com/capacityType": "ON_DEMAND",
    "eks.amazonaws.com/nodegroup": "general-2026",
    "eks.amazonaws.com/nodegroup-image": "ami-0123456789abcdef0",
    "eks.amazonaws.com/sourceLaunchTemplateId": "lt-0123456789abcdef0",
    "eks.amazonaws.com/sourceLaunchTemplateVersion": "3",
    "k8s.io/cloud-provider-aws": "0123456789abcdef0123456789abcdef",
}


# -- DynamoDB item sizes ---------------------------------------------------------------------------------------
def attribute_size(value: dict[str, Any]) -> int:
    """Bytes of one attribute value (DynamoDB JSON), by the Developer Guide's "Item sizes and formats": strings
    are their UTF-8 bytes, numbers 1 byte per two significant digits + 1, booleans and null 1 byte, a map or list
    3 bytes + 1 per element + its elements (a map's element also its key)."""
    (kind, v), *_ = value.items()
    if kind == "S":
        return len(str(v).encode())
    if kind == "N":
        digits = str(v).lstrip("-").replace(".", "").strip("0") or "0"
        return (len(digits) + 1) // 2 + 1
    if kind in ("BOOL", "NULL"):
        return 1
    if kind == "M":
        return 3 + sum(len(k.encode()) + attribute_size(e) + 1 for k, e in v.items())
    if kind == "L":
        return 3 + sum(attribute_size(e) + 1 for e in v)
    raise ValueError(f"unsized type {kind}")


def item_size(item: dict[str, dict[str, Any]]) -> int:
    """An item's size: every attribute's name plus its value."""
    return sum(len(name.encode()) + attribute_size(value) for name, value in item.items())


class _Recorder:
    """Stands in for the DynamoDB client: keeps what the store writes, answers nothing else."""

    def __init__(self) -> None:
        self.items: list[dict[str, Any]] = []

    def client(self, _service: str) -> _Recorder:
        return self

    def put_item(self, **kwargs: Any) -> dict[str, Any]:
        self.items.append(kwargs["Item"])
        return {}

    def get_item(self, **_kwargs: Any) -> dict[str, Any]:
        return {}


def item_sizes() -> dict[str, int]:
    """Bytes of a member node item, a registered Service item and the seeded marker, written by the real store."""
    from ccm.aws.table import ClusterTable
    from ccm.aws.table_views import MembershipTable
    from ccm.contracts.store import MemberRecord

    recorder = _Recorder()
    store = MembershipTable(ClusterTable("members", recorder))  # type: ignore[arg-type]  # only its dynamodb calls
    record = MemberRecord("ip-10-0-137-204.ec2.internal", "i-0123456789abcdef0", EKS_NODE_LABELS, 123456789)
    store.write(record.name, record, 123456789)
    store.register_service("checkout-prod/checkout-api-public", str(uuid.uuid4()), {}, known_new=True)
    store.mark_seeded()
    node, service, marker = (item_size(i) for i in recorder.items)
    return {"node": node, "service": service, "seeded_marker": marker}


# -- custom metrics, from what the runtimes print ------------------------------------------------------------
def sqs_record(body: str, group_id: str, receive_count: int = 1) -> dict[str, Any]:
    now_ms = str(int(time.time() * 1000))
    return {
        "messageId": str(uuid.uuid4()),
        "receiptHandle": "bench",
        "body": body,
        "attributes": {
            "ApproximateReceiveCount": str(receive_count),
            "SentTimestamp": now_ms,
            "MessageGroupId": group_id,
            "MessageDeduplicationId": str(uuid.uuid4()),
            "ApproximateFirstReceiveTimestamp": now_ms,
            "SenderId": "bench",
            "SequenceNumber": "1",
        },
        "messageAttributes": {},
        "md5OfBody": "",
        "eventSource": "aws:sqs",
        "eventSourceARN": f"arn:aws:sqs:{REGION}:123456789012:bench.fifo",
        "awsRegion": REGION,
    }


def _scheduled() -> str:
    return json.dumps(
        {"version": "0", "id": str(uuid.uuid4()), "detail-type": "Scheduled Event", "source": "aws.events",
         "time": time.strftime("%Y-%m-%dT%H:%M:%SZ"), "detail": {}}
    )  # fmt: skip


@dataclass
class _Context:
    """The part of the Lambda context the runtimes read."""

    def get_remaining_time_in_millis(self) -> int:
        return 600_000


class _Handler(logging.Handler):
    """One Powertools logger's lines, formatted by its own formatter (the JSON Lambda ingests), at INFO and above
    as Lambda's default ApplicationLogLevel keeps them."""

    def __init__(self, formatter: logging.Formatter, into: list[dict[str, Any]], sizes: LogLines) -> None:
        super().__init__(logging.INFO)
        self.setFormatter(formatter)
        self.into = into
        self.sizes = sizes

    def emit(self, record: logging.LogRecord) -> None:
        line = self.format(record)
        self.into.append(json.loads(line))
        self.sizes.count(len(line.encode()) + 1)  # the newline too


class LogLines:
    """The JSON lines the functions' Powertools loggers print, by service (the logger's name)."""

    def __init__(self) -> None:
        self.by_service: dict[str, list[dict[str, Any]]] = {}
        self.bytes = self.lines = 0
        self._lock = threading.Lock()

    def count(self, size: int) -> None:
        with self._lock:
            self.bytes += size
            self.lines += 1

    @contextlib.contextmanager
    def attached(self, *loggers: Any) -> Iterator[None]:
        """Listen to these Powertools Loggers while inside, and to the library's standard `logging` lines (the
        drivers' `ccm.*` loggers), which Lambda's runtime ingests too, as its own JSON (_LambdaRuntimeFormat)."""
        handlers: list[tuple[logging.Logger, logging.Handler]] = [
            (
                logging.getLogger(lg.name),
                _Handler(lg.registered_formatter, self.by_service.setdefault(lg.name, []), self),
            )
            for lg in loggers
        ]
        library = logging.getLogger("ccm")
        handlers.append((library, _Handler(_LambdaRuntimeFormat(), self.by_service.setdefault("ccm", []), self)))
        # As Lambda's root logger at ApplicationLogLevel INFO, whatever level an earlier in-process run (the
        # devstack's Lambda environment sets the root's) left on these loggers or their parents.
        levels = [(std, std.level) for std, _ in handlers]
        for std, handler in handlers:
            std.setLevel(logging.INFO)
            std.addHandler(handler)
        try:
            yield
        finally:
            for std, level in levels:
                std.setLevel(level)
            for std, handler in handlers:
                std.removeHandler(handler)


class _LambdaRuntimeFormat(logging.Formatter):
    """A standard-library line as the Lambda Python runtime writes it with LogFormat JSON (its documented keys:
    timestamp, level, message, logger, requestId)."""

    def format(self, record: logging.LogRecord) -> str:
        return json.dumps(
            {
                "timestamp": "2026-01-01T00:00:00.000Z",
                "level": record.levelname,
                "message": record.getMessage(),
                "logger": record.name,
                "requestId": str(uuid.UUID(int=0)),
            }
        )


@dataclass
class Emitted:
    capture: EmfCapture
    by_situation: dict[str, set[tuple[str, str, tuple[str, ...]]]]
    logs: LogLines = field(default_factory=LogLines)
    # situation -> [records, log bytes, log lines]: the JSON log lines and the EMF blobs its records printed
    log_sizes: dict[str, list[int]] = field(default_factory=dict)

    @contextlib.contextmanager
    def situation(self, name: str, metrics: Metrics, service: str, records: int = 1) -> Iterator[None]:
        """Everything emitted inside is attributed to `name`; a failure the situation provokes is expected."""
        metrics.clear_metrics()
        self.capture.reset()
        log_bytes, log_lines = self.logs.bytes, self.logs.lines
        with contextlib.redirect_stdout(self.capture):
            with contextlib.suppress(Exception):
                yield
            metrics.flush_metrics()
        sizes = self.log_sizes.setdefault(name, [0, 0, 0])
        sizes[0] += records
        sizes[1] += self.logs.bytes - log_bytes + self.capture.bytes
        sizes[2] += self.logs.lines - log_lines + self.capture.lines
        # Every blob carries the `service` dimension in Lambda (POWERTOOLS_SERVICE_NAME, set by the template and
        # checked by tests/template/test_dashboard.py); here it is unset, so it is named from the function.
        keys = {(ns, n, (f"service={service}", *(d for d in dims if d != "service")))
                for ns, n, dims in self.capture.metric_keys}  # fmt: skip
        self.by_situation.setdefault(name, set()).update(keys)


def _joining_node(bench: Any) -> dict[str, Any]:
    """A Node as a kubelet registers it with the external cloud provider: tainted, no providerID yet."""
    ec2 = bench.clients.client("ec2")
    subnet = next(iter(bench.world.private_subnets.values()))
    inst = ec2.run_instances(ImageId="ami-12c6146b", MinCount=1, MaxCount=1, SubnetId=subnet)["Instances"][0]
    taint = {"key": "node.cloudprovider.kubernetes.io/uninitialized", "value": "true", "effect": "NoSchedule"}
    created: dict[str, Any] = bench.emulator.create(
        {"apiVersion": "v1", "kind": "Node",
         "metadata": {"name": inst["PrivateDnsName"], "labels": {"kubernetes.io/hostname": inst["PrivateDnsName"]}},
         "spec": {"taints": [taint]}, "status": {"conditions": [{"type": "Ready", "status": "True"}]}}
    )  # fmt: skip
    return created


def emitted_metrics() -> dict[str, list[str]]:
    """situation -> the metrics it publishes, as "namespace/name[dimension=value,...]"."""
    return _run()[0]


def logged_lines() -> dict[str, list[dict[str, Any]]]:
    """service -> the JSON log lines its runtime printed at INFO and above, over the same situations."""
    return _run()[1]


def log_sizes() -> dict[str, dict[str, float]]:
    """situation -> bytes and lines a record of it logs (INFO and above, EMF blobs included) as printed here.
    Lambda adds the context keys Powertools injects to each line (cost.LAMBDA_CONTEXT_BYTES)."""
    return _run()[2]


@functools.cache
def _run() -> tuple[dict[str, list[str]], dict[str, list[dict[str, Any]]], dict[str, dict[str, float]]]:
    from bench.world import CLUSTER, BenchWorld
    from ccm.aws.security_groups import SecurityGroups
    from ccm.aws.table import ClusterTable
    from ccm.aws.table_views import OrphanMarksTable
    from ccm.batch import NO_FACTS, Deferred
    from ccm.config import Settings
    from ccm.contracts.cluster import Cluster
    from ccm.contracts.messages import heartbeat_for
    from ccm.k8s.kube import Kube
    from ccm.k8s.kubeconfig import from_kubeconfig
    from ccm.node import runtime as node_rt
    from ccm.node.events import ec2_state_change_body
    from ccm.route import runtime as route_rt
    from ccm.route.kube import RouteKube
    from ccm.route.plan import parse_cluster_cidrs
    from ccm.service import runtime as service_rt
    from ccm.sweeper import runtime as sweeper_rt
    from ccm.wiring.nodes import build_node_runtime
    from ccm.wiring.routes import build_route_runtime
    from devstack.aws_faithful import FaithfulSettings

    bench = BenchWorld(nodes=3, faithful=FaithfulSettings(sg_release_seconds=2.0, eventual_consistency=False))
    out = Emitted(EmfCapture(), {})
    listening = contextlib.ExitStack()
    try:
        runtimes = (service_rt, node_rt, route_rt, sweeper_rt)
        listening.enter_context(out.logs.attached(*(rt.logger for rt in runtimes)))
        vpc = bench.world.vpc_id
        settings = Settings(CLUSTER, vpc, region=REGION, default_lb_type="nlb", membership_table=bench.table,
                            services_queue_url=bench.queue_url, sweeper_table=bench.table)  # fmt: skip
        svc_metrics, service = service_rt.metrics, "service-reconciler"

        alone = service_rt.ServiceBatch(creations=1)  # each record as in its own batch: no burst

        def handle(body: str, group: str) -> None:
            bench.runtime.handle_record(SQSRecord(sqs_record(body, group)), alone)

        created = bench.create_service("cost", [80, 443])
        with out.situation("service_change", svc_metrics, service):
            bench.reconcile(bench.delta("Service", "ADDED", created))
        with out.situation("resync", svc_metrics, service):
            bench.reconcile(bench.delta("Service", "SYNC", bench.service("cost")))
        with out.situation("heartbeat", svc_metrics, service):
            bench.reconcile(heartbeat_for("bench", time.time() - 1, 60))
        with out.situation("failure", svc_metrics, service, records=2):
            handle("not a delta", "bad")
            typo = {"service.beta.kubernetes.io/aws-load-balancer-healthcheck-interval": "often"}
            bench.reconcile(bench.delta("Service", "ADDED", bench.create_service("typo", [80], annotations=typo)))

        nodes = build_node_runtime(settings, Kube(from_kubeconfig(bench.kubeconfig)), bench.clients)
        node_metrics, node_service = node_rt.metrics, "node-reconciler"
        node = _joining_node(bench)
        with out.situation("node_change", node_metrics, node_service):
            nodes.handle_record(SQSRecord(sqs_record(bench.delta("Node", "ADDED", node).to_body(), "n")), NO_FACTS)
        node = bench.emulator.get("nodes", "", node["metadata"]["name"]) or node
        past = time.time() - 60  # a coalescing bucket already over: its HOSTS message is processed at once
        bench.updater(clock=lambda: past).on_node_delta(bench.delta("Node", "ADDED", bench.add_node()))
        hosts = bench.sqs.receive_message(QueueUrl=bench.queue_url, MaxNumberOfMessages=10).get("Messages", [])
        # The nodes Lambda's own HOSTS message (its bucket still open) is deferred to the bucket's end; the one of
        # the bucket already over is processed: that is the record measured.
        with out.situation("host_update", svc_metrics, service):
            for message in hosts:
                with contextlib.suppress(Deferred):
                    bench.runtime.handle_record(SQSRecord(sqs_record(message["Body"], "h", 2)), alone)
        instance = (node.get("spec") or {}).get("providerID", "aws:///us-east-1a/i-0123456789abcdef0").rsplit("/")[-1]
        with out.situation("ec2_event", node_metrics, node_service):
            nodes.handle_record(SQSRecord(sqs_record(ec2_state_change_body(instance, "running", "e1"), "e")), NO_FACTS)
        with out.situation("safety_pass", node_metrics, node_service):
            nodes.handle_record(SQSRecord(sqs_record(_scheduled(), "pass")), NO_FACTS)
        with out.situation("failure", node_metrics, node_service):
            nodes.handle_record(SQSRecord(sqs_record("not a message", "bad")), NO_FACTS)

        route_settings = route_rt.RouteSettings(CLUSTER, vpc, parse_cluster_cidrs(["10.244.0.0/16"]))
        routes = build_route_runtime(route_settings, RouteKube(from_kubeconfig(bench.kubeconfig)), bench.clients)
        route_metrics, route_service = route_rt.metrics, "route-reconciler"
        # The first pass creates the routes (triggered by a Node delta too: its end-to-end latency), the next none.
        node_trigger = sqs_record(bench.delta("Node", "MODIFIED", node).to_body(), "routes")
        for situation, records in (("route_change", [node_trigger]), ("route_pass", [])):
            with out.situation(situation, route_metrics, route_service, records=len(records) + 1):
                routes.handle_batch({"Records": [*records, sqs_record(_scheduled(), "routes")]}, _Context())

        sweeper = sweeper_rt.Sweeper(
            sweeper_rt.SweeperSettings.of(settings),
            Kube(from_kubeconfig(bench.kubeconfig)),
            sweeper_rt.ServiceLister(from_kubeconfig(bench.kubeconfig)),
            bench.clients,
            SecurityGroups(bench.clients, Cluster(CLUSTER, vpc)),
            OrphanMarksTable(ClusterTable(bench.table, bench.clients)),
        )
        with out.situation("sweep", sweeper_rt.metrics, "sweeper"):
            sweeper.run()
    finally:
        listening.close()
        bench.close()
    metrics = {
        s: sorted(f"{ns}/{name}[{','.join(dims)}]" for ns, name, dims in keys) for s, keys in out.by_situation.items()
    }
    sizes = {s: {"bytes": b / n, "lines": lines / n} for s, (n, b, lines) in out.log_sizes.items() if n}
    return metrics, out.logs.by_service, sizes
