"""The sweeper end to end in one process: load balancers built by the real service reconciler in moto (mock_aws),
Services in the Kubernetes API emulator over HTTP (real client), first sights in a DynamoDB table, drift repairs
as messages in a FIFO queue. The clock is the only thing moved by hand (to cross the grace period)."""

from __future__ import annotations

import importlib.util
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
from kubernetes import client, config

from ccm.aws import faults, names
from ccm.aws import security_groups_model as sgm
from ccm.aws.clients import AwsClients
from ccm.aws.security_groups import SecurityGroups
from ccm.aws.table import ClusterTable
from ccm.aws.table_views import OrphanMarksTable
from ccm.config import Settings
from ccm.contracts.cloud import PassFlags
from ccm.contracts.cluster import Cluster
from ccm.contracts.messages import REPAIR, delta_for, parse_delta
from ccm.k8s.kube import Kube
from ccm.k8s.kubeconfig import from_kubeconfig
from ccm.sweeper import runtime as sweeper_runtime
from ccm.sweeper.runtime import RunReport, ServiceLister, Sweeper, SweeperSettings
from ccm.wiring import sweeper as sweeper_wiring
from ccm.wiring.services import build_service_runtime
from devstack.k8s_emulator import Emulator
from tests.integration.conftest import CLUSTER, World
from tests.integration.test_service_reconciler import Ctx, create_service, read

GRACE = 1800.0
TABLE = "members"


class Clock:
    def __init__(self) -> None:
        self.now = time.time()

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def emulator(tmp_path: Path) -> Iterator[Emulator]:
    emu = Emulator().start()
    emu.write_kubeconfig(str(tmp_path / "kubeconfig"))
    yield emu
    emu.stop()


class Stack:
    def __init__(self, world: World, emulator: Emulator, kubeconfig: str) -> None:
        self.world = world
        for n in world.nodes():
            emulator.create(n)
        self.api_client = config.new_client_from_config(config_file=kubeconfig)
        self.core = client.CoreV1Api(self.api_client)
        self.lambda_api = from_kubeconfig(kubeconfig)  # what the functions use
        self.sqs = boto3.client("sqs", region_name="us-east-1")
        self.queue_url = self.sqs.create_queue(
            QueueName="svc.fifo", Attributes={"FifoQueue": "true", "VisibilityTimeout": "360"}
        )["QueueUrl"]
        ddb = boto3.client("dynamodb", region_name="us-east-1")
        ddb.create_table(
            TableName=TABLE,
            KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}, {"AttributeName": "sk", "KeyType": "RANGE"}],
            AttributeDefinitions=[
                {"AttributeName": "pk", "AttributeType": "S"},
                {"AttributeName": "sk", "AttributeType": "S"},
            ],
            BillingMode="PAY_PER_REQUEST",
        )
        self.ec2 = boto3.client("ec2", region_name="us-east-1")
        self.elbv2 = boto3.client("elbv2", region_name="us-east-1")
        # The node security group: cluster-tagged, no Service tag (so the reconciler adds node rules to it).
        self.node_sg = self.ec2.create_security_group(
            GroupName="nodes",
            Description="nodes",
            VpcId=world.vpc_id,
            TagSpecifications=[
                {"ResourceType": "security-group", "Tags": [{"Key": names.cluster_tag_key(CLUSTER), "Value": "owned"}]}
            ],
        )["GroupId"]
        settings = Settings(CLUSTER, world.vpc_id, default_lb_type="nlb")
        self.services = build_service_runtime(settings, Kube(self.lambda_api), world.clients)
        self.clock = Clock()

    def reconcile(self, svc: dict[str, Any], event: str = "ADDED") -> None:
        self.services.reconciler.reconcile(delta_for("Service", event, svc))

    def create(self, name: str = "web", **spec: Any) -> dict[str, Any]:
        # Source ranges: the LB gets a group of its own (k8s-elb-<lb>) for the sweeper to judge, besides the
        # cluster's shared backend group.
        spec.setdefault("loadBalancerSourceRanges", ["10.0.0.0/8"])
        svc = create_service(self.core, name, **spec)
        self.reconcile(svc)
        live = read(self.core, name)
        assert live is not None and live["status"]["loadBalancer"]["ingress"]
        return live

    def vanish(self, name: str = "web") -> None:
        """The Service goes while the controller is not looking: finalizer dropped by hand, then deleted."""
        self.core.patch_namespaced_service(name, "default", {"metadata": {"finalizers": None}})
        self.core.delete_namespaced_service(name, "default")
        assert read(self.core, name) is None

    def sweeper(self, dry_run: bool = False, clients: AwsClients | None = None) -> Sweeper:
        settings = SweeperSettings(
            Settings(CLUSTER, self.world.vpc_id, default_lb_type="nlb"), self.queue_url, TABLE, dry_run, GRACE
        )
        clients = clients or self.world.clients
        groups = SecurityGroups(clients, Cluster(CLUSTER, self.world.vpc_id))
        lister = ServiceLister(self.lambda_api)
        marks = OrphanMarksTable(ClusterTable(TABLE, clients))
        return Sweeper(settings, Kube(self.lambda_api), lister, clients, groups, marks, clock=self.clock)

    def sweep(self, dry_run: bool = False, after: float = 0.0) -> RunReport:
        self.clock.now += after
        return self.sweeper(dry_run).run()

    # -- what exists --------------------------------------------------------------------------------------------
    def lbs(self) -> set[str]:
        return {lb["LoadBalancerName"] for lb in self.elbv2.describe_load_balancers()["LoadBalancers"]}

    def tgs(self) -> set[str]:
        return {tg["TargetGroupName"] for tg in self.elbv2.describe_target_groups()["TargetGroups"]}

    def sgs(self) -> set[str]:
        """The VPC's groups but the default one and the cluster's shared groups (never the sweeper's to delete)."""
        groups = self.ec2.describe_security_groups(Filters=[{"Name": "vpc-id", "Values": [self.world.vpc_id]}])
        shared = {
            g["GroupName"] for g in groups["SecurityGroups"] if sgm.ROLE_TAG in {t["Key"] for t in g.get("Tags", [])}
        }
        return {g["GroupName"] for g in groups["SecurityGroups"]} - {"default"} - shared

    def messages(self) -> list[dict[str, Any]]:
        got = self.sqs.receive_message(
            QueueUrl=self.queue_url, MaxNumberOfMessages=10, MessageSystemAttributeNames=["All"]
        )
        return got.get("Messages", [])

    def events(self, reason: str) -> list[dict[str, Any]]:
        items = json.loads(self.core.list_namespaced_event("default", _preload_content=False).data)["items"]
        return [e for e in items if e["reason"] == reason]


@pytest.fixture
def stack(world: World, emulator: Emulator, tmp_path: Path) -> Stack:
    return Stack(world, emulator, str(tmp_path / "kubeconfig"))


def lb_name(svc: dict[str, Any]) -> str:
    return names.load_balancer_name(svc["metadata"]["uid"])


def actions(report: RunReport) -> dict[str, str]:
    return {f"{d['kind']}:{d['resource_name']}": d["action"] for d in report.decisions}


def test_an_orphaned_nlb_is_swept_after_the_grace_period_and_not_before(stack: Stack) -> None:
    svc = stack.create()
    name = lb_name(svc)
    tgs_before, sgs_before = stack.tgs(), stack.sgs()
    assert len(tgs_before) == 2 and f"k8s-elb-{name}" in sgs_before
    stack.vanish()

    first = stack.sweep()
    assert first.orphans == 4 and first.marked == 4 and first.deleted == 0
    assert set(actions(first).values()) == {"mark"}
    assert {d["reason"] for d in first.decisions} == {"service-gone"}
    assert stack.sweep(after=GRACE - 60).deleted == 0  # still inside the grace period: waits
    assert name in stack.lbs() and stack.tgs() == tgs_before

    done = stack.sweep(after=120)
    assert done.deleted == 4, done.decisions
    assert name not in stack.lbs()
    assert stack.tgs() == set()
    assert stack.sgs() == {"nodes"}  # the LB's own group went; the node group stays
    node_group = stack.ec2.describe_security_groups(GroupIds=[stack.node_sg])["SecurityGroups"][0]
    rules = sgm.rules_from_permissions(node_group["IpPermissions"])
    assert [r.description for r in rules] == [sgm.backend_rule_description(CLUSTER)]  # the shared rule stays
    assert (
        OrphanMarksTable(ClusterTable(TABLE, stack.world.clients)).load() == {}
    )  # nothing remembered about deleted resources
    again = stack.sweep(after=60)
    assert again.decisions == [] and again.deleted == 0  # idempotent


def test_dry_run_deletes_nothing_but_reports_what_it_would(stack: Stack) -> None:
    svc = stack.create()
    stack.vanish()
    stack.sweep(dry_run=True)
    report = stack.sweep(dry_run=True, after=GRACE + 60)
    assert report.deleted == 0 and report.orphans == 4
    assert set(actions(report).values()) == {"would-delete"}
    assert lb_name(svc) in stack.lbs() and len(stack.tgs()) == 2 and f"k8s-elb-{lb_name(svc)}" in stack.sgs()
    deletes = [op for op in report.aws_calls if op.split(":")[1].startswith("Delete")]
    assert deletes == []
    # Switching dry-run off deletes at once: the grace period already ran during the dry runs.
    assert stack.sweep(after=1).deleted == 4


def test_a_service_that_still_wants_its_lb_keeps_everything_and_is_not_requeued(stack: Stack) -> None:
    services = [stack.create(f"web{i}") for i in range(3)]
    resources_before = (stack.lbs(), stack.tgs(), stack.sgs())
    report = stack.sweep(after=GRACE * 10)
    assert report.orphans == 0 and report.deleted == 0 and report.requeued == 0
    assert set(actions(report).values()) == {"keep"}
    assert (stack.lbs(), stack.tgs(), stack.sgs()) == resources_before
    assert stack.messages() == []
    # Bounded calls: one LIST of Services; AWS reads batched, DescribeListeners once per NLB; no write at all.
    assert report.kube_calls == 1
    calls = report.aws_calls
    assert calls["elbv2:DescribeListeners"] == len(services)
    for op in (
        "resourcegroupstaggingapi:GetResources",
        "elbv2:DescribeLoadBalancers",
        "elbv2:DescribeTargetGroups",
        "dynamodb:Query",
    ):
        assert calls[op] == 1, (op, calls)
    assert not [op for op in calls if not op.split(":")[1].startswith(("Describe", "Get", "Query"))], calls
    # GetResources + DescribeLoadBalancers + N DescribeListeners + DescribeTargetGroups + DescribeSecurityGroups
    # (inventory) + DescribeSecurityGroups (node groups, for stale node rules) + Query (first sights).
    assert sum(calls.values()) == len(services) + 6, calls
    print(f"\nsweeper run over {len(services)} NLB Services: {sum(calls.values())} AWS calls {dict(calls)}")


def test_a_stale_target_group_is_deleted_and_the_service_told(stack: Stack) -> None:
    svc = stack.create()
    meta = svc["metadata"]
    tags = names.as_tag_list(names.resource_tags(CLUSTER, "default", "web", meta["uid"]))
    # What a health-check protocol change leaves when the reconciler crashes before its cleanup step.
    stack.elbv2.create_target_group(
        Name="k8s-default-web-stale00000", Protocol="TCP", Port=31000, VpcId=stack.world.vpc_id, Tags=tags
    )
    live_tgs = stack.tgs() - {"k8s-default-web-stale00000"}
    first = stack.sweep()
    assert actions(first)["targetgroup:k8s-default-web-stale00000"] == "mark"
    assert [d["reason"] for d in first.decisions if d["action"] == "mark"] == ["unreferenced"]
    report = stack.sweep(after=GRACE + 1)
    assert report.deleted == 1
    assert stack.tgs() == live_tgs and lb_name(svc) in stack.lbs()
    (event,) = stack.events("OrphanDeleted")
    assert event["type"] == "Normal" and "k8s-default-web-stale00000" in event["message"]
    assert event["involvedObject"]["uid"] == meta["uid"]


def test_a_managed_security_group_whose_lb_is_gone_is_deleted(stack: Stack) -> None:
    svc = stack.create()
    name = lb_name(svc)
    # The reconciler deleted LB and target groups, then crashed before the group (and the Service is gone).
    lb_arn = stack.elbv2.describe_load_balancers(Names=[name])["LoadBalancers"][0]["LoadBalancerArn"]
    stack.elbv2.delete_load_balancer(LoadBalancerArn=lb_arn)
    for tg in stack.elbv2.describe_target_groups()["TargetGroups"]:
        stack.elbv2.delete_target_group(TargetGroupArn=tg["TargetGroupArn"])
    stack.vanish()
    stack.sweep()
    report = stack.sweep(after=GRACE + 1)
    assert actions(report) == {f"securitygroup:k8s-elb-{name}": "delete"}
    assert stack.sgs() == {"nodes"}


def test_a_listener_edited_by_hand_requeues_the_service_and_the_reconciler_repairs_it(stack: Stack) -> None:
    svc = stack.create()
    lb_arn = stack.elbv2.describe_load_balancers(Names=[lb_name(svc)])["LoadBalancers"][0]["LoadBalancerArn"]
    (listener,) = [ls for ls in stack.elbv2.describe_listeners(LoadBalancerArn=lb_arn)["Listeners"] if ls["Port"] == 80]
    stack.elbv2.modify_listener(ListenerArn=listener["ListenerArn"], Port=8080)

    report = stack.sweep()
    assert report.requeued == 1 and report.deleted == 0
    (message,) = stack.messages()
    delta = parse_delta(message["Body"])
    assert (delta.kind, delta.type, delta.key, delta.uid) == ("Service", "SYNC", "default/web", svc["metadata"]["uid"])
    assert delta.object[REPAIR] is True  # the reconcile reads AWS in full, never trusts its checkpoint
    assert message["Attributes"]["MessageGroupId"] == "default/web"
    (event,) = stack.events("DriftRepaired")
    assert event["type"] == "Warning" and "listener 80 missing" in event["message"]

    # The reconciler, given that very delta, converges the LB; the next run finds nothing to repair.
    stack.services.reconciler.reconcile(delta, PassFlags(thorough=True))
    ports = {ls["Port"] for ls in stack.elbv2.describe_listeners(LoadBalancerArn=lb_arn)["Listeners"]}
    assert ports == {80, 443}
    stack.sqs.delete_message(QueueUrl=stack.queue_url, ReceiptHandle=message["ReceiptHandle"])
    assert stack.sweep(after=1).requeued == 0


def test_a_deleted_target_group_is_drift(stack: Stack) -> None:
    svc = stack.create()
    lb_arn = stack.elbv2.describe_load_balancers(Names=[lb_name(svc)])["LoadBalancers"][0]["LoadBalancerArn"]
    listener = stack.elbv2.describe_listeners(LoadBalancerArn=lb_arn)["Listeners"][0]
    stack.elbv2.delete_listener(ListenerArn=listener["ListenerArn"])  # AWS refuses to delete a group in use
    stack.elbv2.delete_target_group(TargetGroupArn=listener["DefaultActions"][0]["TargetGroupArn"])
    report = stack.sweep()
    assert report.requeued == 1
    (event,) = stack.events("DriftRepaired")
    assert "missing" in event["message"]


def test_nothing_without_our_cluster_tag_is_ever_touched(stack: Stack) -> None:
    subnets = [s["SubnetId"] for s in stack.ec2.describe_subnets()["Subnets"] if s["VpcId"] == stack.world.vpc_id]
    gone = {"namespace": "default", "name": "gone", "uid": "11111111-2222-3333-4444-555555555555"}
    service_tags = {names.SERVICE_NAME_TAG: "default/gone", names.SERVICE_UID_TAG: gone["uid"]}
    foreign = names.as_tag_list({**service_tags, names.cluster_tag_key("other-cluster"): "owned"})
    shared = names.as_tag_list({**service_tags, names.cluster_tag_key(CLUSTER): "shared"})
    untagged = names.as_tag_list(service_tags)
    for lb, tags in (("untagged-lb", untagged), ("foreign-lb", foreign), ("shared-lb", shared)):
        stack.elbv2.create_load_balancer(Name=lb, Type="network", Subnets=subnets, Tags=tags)
    stack.elbv2.create_target_group(Name="foreign-tg", Protocol="TCP", Port=1, VpcId=stack.world.vpc_id, Tags=foreign)
    stack.ec2.create_security_group(
        GroupName="foreign-sg",
        Description="x",
        VpcId=stack.world.vpc_id,
        TagSpecifications=[{"ResourceType": "security-group", "Tags": foreign}],
    )
    before = (stack.lbs(), stack.tgs(), stack.sgs())
    for after in (0, GRACE, GRACE):
        report = stack.sweep(after=after)
        assert report.decisions == [] and report.orphans == 0
    assert (stack.lbs(), stack.tgs(), stack.sgs()) == before
    assert "nodes" in stack.sgs()  # cluster-tagged, but no Service's


def test_the_lambda_handler_runs_one_sweep_and_logs_its_figures_without_zero_metrics(
    stack: Stack, capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    stack.create()
    stack.vanish()
    spec = importlib.util.spec_from_file_location("sweeper_app", Path(__file__).parents[2] / "functions/sweeper/app.py")
    assert spec is not None and spec.loader is not None
    app = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(app)
    previous = sweeper_wiring.runtime.instance
    sweeper_wiring.runtime.instance = stack.sweeper()
    try:
        sweeper_runtime.metrics.clear_metrics()  # earlier runs in this process added metrics nobody flushed
        capsys.readouterr()
        summary = app.lambda_handler({"source": "aws.events", "detail-type": "Scheduled Event"}, Ctx())
    finally:
        sweeper_wiring.runtime.instance = previous
    assert (summary["orphans"], summary["marked"], summary["deleted"]) == (4, 4, 0)
    emf = [json.loads(line) for line in capsys.readouterr().out.splitlines() if '"_aws"' in line]
    # deletions and re-enqueued drift only when non-zero (each metric-hour is billed): none in this run
    assert not [k for doc in emf for k in doc if k.startswith(("Sweeper", "Aws"))]
    # orphans found and AWS writes: fields of the run's INFO line, which the dashboard's Logs Insights widget reads
    (done,) = [vars(r) for r in caplog.records if r.getMessage() == "sweep done" and r.levelname == "INFO"]
    assert (done["orphans"], done["deleted"], done["requeued"]) == (4, 0, 0)
    assert done["mutating_calls"] == done["aws_calls"]["dynamodb:PutItem"] == 4  # the four marks written


def test_a_failing_delete_does_not_stop_the_run_and_the_next_run_finishes(
    stack: Stack, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    svc = stack.create()
    stack.vanish()
    stack.sweep()
    stack.clock.now += GRACE + 60
    # The Lambda "dies" right after AWS deleted the LB: the error is raised out of that action only.
    plan = tmp_path / "faults.json"
    faults.arm(plan, {"elasticloadbalancing:DeleteLoadBalancer": 1})
    monkeypatch.setenv(faults.ENV_VAR, str(plan))
    with pytest.raises(RuntimeError, match="1 sweeper actions failed"):
        stack.sweeper(clients=AwsClients(region="us-east-1")).run()
    assert lb_name(svc) not in stack.lbs() and stack.tgs() == set() and stack.sgs() == {"nodes"}
    assert (
        len(OrphanMarksTable(ClusterTable(TABLE, stack.world.clients)).load()) == 1
    )  # the LB's first sight: not yet forgotten
    report = stack.sweep(after=60)
    assert report.failed == 0 and report.decisions == []
    assert OrphanMarksTable(ClusterTable(TABLE, stack.world.clients)).load() == {}
