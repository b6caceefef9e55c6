"""A measurement world on the devstack parts: moto server seeded with a VPC and instances, the Kubernetes API
emulator with Nodes, the template's membership table and services queue, and the REAL service runtime built in
this process so every AWS call it makes is counted exactly (botocore hooks) and every Kubernetes request is in
the emulator's request log."""

from __future__ import annotations

import itertools
import os
import tempfile
import time
import uuid
from typing import Any

from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord
from kubernetes import client, config

from ccm.aws.clients import AwsClients
from ccm.aws.table import ClusterTable
from ccm.aws.table_views import MembershipTable
from ccm.batch import Deferred
from ccm.config import Settings
from ccm.contracts.messages import Delta, delta_for
from ccm.contracts.provider_id import provider_id_for
from ccm.k8s.kube import Kube
from ccm.k8s.kubeconfig import from_kubeconfig
from ccm.membership.nodes import MemberNodes
from ccm.membership.updater import MembershipUpdater
from ccm.service.reconciler import SyncFailed
from ccm.service.runtime import ServiceBatch
from ccm.wiring.services import build_service_runtime
from devstack.aws import client as aws_client
from devstack.aws import seed_world, start_moto_server
from devstack.aws_faithful import FaithfulSettings
from devstack.k8s_emulator import Emulator

REGION = "us-east-1"
CLUSTER = "bench"


class BenchWorld:
    def __init__(self, nodes: int = 3, lb_type: str = "nlb", faithful: FaithfulSettings | None = None) -> None:
        self.moto, self.endpoint = start_moto_server(faithful=faithful)
        env = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_REGION": REGION}
        env["AWS_ENDPOINT_URL"] = self.endpoint  # the runtime's clients find the local AWS like in the devstack
        self._saved_env = {k: os.environ.get(k) for k in env}
        os.environ.update(env)
        self.world = seed_world(self.endpoint, REGION, CLUSTER, nodes=nodes)
        self.emulator = Emulator(bookmark_interval=30).start()
        self.kubeconfig = self.emulator.write_kubeconfig(tempfile.mktemp(prefix="bench-kubeconfig-"))
        for node in self.world.node_objects():
            node["metadata"].pop("uid", None)
            node["metadata"].pop("resourceVersion", None)
            self.emulator.create(node)
        self.api_client = config.new_client_from_config(config_file=self.kubeconfig)
        self.core = client.CoreV1Api(self.api_client)
        self.clients = AwsClients(region=REGION)
        self.table = self._create_table()
        self.cluster_table = ClusterTable(self.table, self.clients)
        self.store = MembershipTable(self.cluster_table)
        self.sqs = aws_client("sqs", self.endpoint, REGION)
        self.queue_url = self.sqs.create_queue(
            QueueName=f"bench-{uuid.uuid4().hex[:8]}.fifo", Attributes={"FifoQueue": "true"}
        )["QueueUrl"]
        self.runtime = build_service_runtime(
            Settings(CLUSTER, self.world.vpc_id, default_lb_type=lb_type),
            Kube(from_kubeconfig(self.kubeconfig)),
            self.clients,
            self.cluster_table,
        )
        # Steady state: the table is seeded (once per cluster, by the first reconcile or the nodes Lambda).
        MemberNodes(Kube(from_kubeconfig(self.kubeconfig)), self.store).records()

    def _create_table(self) -> str:
        name = f"bench-members-{uuid.uuid4().hex[:8]}"
        aws_client("dynamodb", self.endpoint, REGION).create_table(
            TableName=name,
            KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}, {"AttributeName": "sk", "KeyType": "RANGE"}],
            AttributeDefinitions=[
                {"AttributeName": "pk", "AttributeType": "S"},
                {"AttributeName": "sk", "AttributeType": "S"},
            ],
            BillingMode="PAY_PER_REQUEST",
        )
        return name

    def close(self) -> None:
        self.emulator.stop()
        self.moto.stop()
        for key, value in self._saved_env.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value

    # -- Kubernetes -------------------------------------------------------------------------------------------
    def create_service(
        self,
        name: str,
        ports: list[int],
        namespace: str = "default",
        annotations: dict[str, str] | None = None,
        load_balancer_class: str | None = None,
        source_ranges: list[str] | None = None,
    ) -> dict[str, Any]:
        body: dict[str, Any] = {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": name, "namespace": namespace, "annotations": annotations or {}},
            "spec": {"type": "LoadBalancer", "ports": [{"name": f"p{p}", "port": p} for p in ports]},
        }
        if load_balancer_class:
            body["spec"]["loadBalancerClass"] = load_balancer_class
        if source_ranges:
            body["spec"]["loadBalancerSourceRanges"] = source_ranges
        created: dict[str, Any] = self.emulator.create(body)
        return created

    def service(self, name: str, namespace: str = "default") -> dict[str, Any]:
        svc: dict[str, Any] | None = self.emulator.get("services", namespace, name)
        assert svc is not None
        return svc

    def add_node(self) -> dict[str, Any]:
        """A new running instance and its (initialised) Node."""
        ec2 = self.clients.client("ec2")
        subnet = next(iter(self.world.private_subnets.values()))
        inst = ec2.run_instances(ImageId="ami-12c6146b", MinCount=1, MaxCount=1, SubnetId=subnet)["Instances"][0]
        az = inst["Placement"]["AvailabilityZone"]
        node = {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": inst["PrivateDnsName"], "labels": {"topology.kubernetes.io/zone": az}},
            "spec": {"providerID": provider_id_for(az, inst["InstanceId"])},
            "status": {"conditions": [{"type": "Ready", "status": "True"}]},
        }
        created: dict[str, Any] = self.emulator.create(node)
        return created

    # -- running the real runtime -----------------------------------------------------------------------------
    def reconcile(self, delta: Delta, receive_count: int = 1) -> dict[str, int]:
        """One record through ServiceRuntime.handle_record; returns the AWS calls it made."""
        now_ms = str(int(time.time() * 1000))
        record = SQSRecord(
            {
                "messageId": str(uuid.uuid4()),
                "receiptHandle": "bench",
                "body": delta.to_body(),
                "attributes": {
                    "ApproximateReceiveCount": str(receive_count),
                    "SentTimestamp": now_ms,
                    "MessageGroupId": delta.group_id,
                    "MessageDeduplicationId": delta.deduplication_id,
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
        )
        self.runtime.handle_record(record, ServiceBatch(creations=1))  # alone, as in its own batch: no burst
        return dict(self.clients.counter.thread_calls())

    def reconcile_until_done(self, delta: Delta, wait: float, timeout: float = 60.0) -> list[dict[str, int]]:
        """As the queue does: a pass asking to come back later (RetryError: AWS still holds the deleted LB's
        security group) is repeated, `wait` seconds later, with the next receive count. The calls of each pass."""
        passes: list[dict[str, int]] = []
        deadline = time.monotonic() + timeout
        for attempt in itertools.count(1):
            try:
                passes.append(self.reconcile(delta, receive_count=attempt))
                return passes
            except (SyncFailed, Deferred) as err:
                passes.append(dict(self.clients.counter.thread_calls()))
                # A wait on AWS comes back as Deferred (ccm.retry); anything else is a failure of the scenario.
                if not isinstance(err, Deferred) or time.monotonic() > deadline:
                    raise
                time.sleep(wait)
        raise AssertionError("unreachable")

    def updater(self, clock: Any = time.time, bucket_seconds: int = 15) -> MembershipUpdater:
        return MembershipUpdater(
            self.store, self.clients.queue(self.queue_url), bucket_seconds=bucket_seconds, clock=clock
        )

    def delta(self, kind: str, event_type: str, obj: dict[str, Any]) -> Delta:
        return delta_for(kind, event_type, obj)
