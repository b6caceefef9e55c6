"""The doctor end to end against moto (in-process): a well-prepared environment passes; each broken piece is found
and named with its fix; the CLI's exit code follows. RBAC is asked of the Kubernetes API emulator over HTTP with the
real kubernetes client (SubjectAccessReviews), with the manifests we ship (deploy/base, deploy/lambda-rbac) loaded
and RBAC enforced."""

from __future__ import annotations

import datetime
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import boto3
import pytest
import yaml
from moto import mock_aws

from ccm.doctor import cli
from ccm.doctor.findings import Finding, exit_code
from devstack.k8s_emulator import Emulator
from devstack.k8s_emulator.rbac import load_objects

REGION = "us-east-1"
CLUSTER = "prod"
TAG = f"kubernetes.io/cluster/{CLUSTER}"
REPO = Path(__file__).resolve().parents[2]


def _role(name: str) -> dict[str, Any]:
    trust = {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Principal": {"Service": "x"}, "Action": "a"}]}
    return {"Type": "AWS::IAM::Role", "Properties": {"RoleName": name, "AssumeRolePolicyDocument": trust}}


def _queue(name: str, dlq: str | None = None) -> dict[str, Any]:
    props: dict[str, Any] = {"QueueName": name, "FifoQueue": True, "SqsManagedSseEnabled": True}
    if dlq:
        props["RedrivePolicy"] = {"deadLetterTargetArn": {"Fn::GetAtt": [dlq, "Arn"]}, "maxReceiveCount": 5}
    return {"Type": "AWS::SQS::Queue", "Properties": props}


# The deployed stack's shape as far as the doctor reads it (outputs, parameters, resource types): moto cannot run
# the SAM transform, so this is template.yaml's Outputs/queues/roles in plain CloudFormation.
STACK_TEMPLATE = {
    "Parameters": {"VpcId": {"Type": "String"}, "KubeAuthMode": {"Type": "String"}, "EnableRoutes": {"Type": "String"}},
    "Resources": {
        "ServicesDLQ": _queue("prod-ccm-services-dlq.fifo"),
        "ServicesQueue": _queue("prod-ccm-services.fifo", "ServicesDLQ"),
        "NodesDLQ": _queue("prod-ccm-nodes-dlq.fifo"),
        "NodesQueue": _queue("prod-ccm-nodes.fifo", "NodesDLQ"),
        "ServiceReconcilerFunctionRole": _role("prod-services"),
        "NodeReconcilerFunctionRole": _role("prod-nodes"),
        "SweeperFunctionRole": _role("prod-sweeper"),
        "WatcherRole": _role("prod-watcher"),
    },
    "Outputs": {
        "ServicesQueueUrl": {"Value": {"Ref": "ServicesQueue"}},
        "ServicesDLQUrl": {"Value": {"Ref": "ServicesDLQ"}},
        "NodesQueueUrl": {"Value": {"Ref": "NodesQueue"}},
        "NodesDLQUrl": {"Value": {"Ref": "NodesDLQ"}},
        "ServiceReconcilerFunctionRoleArn": {"Value": {"Fn::GetAtt": ["ServiceReconcilerFunctionRole", "Arn"]}},
        "NodeReconcilerFunctionRoleArn": {"Value": {"Fn::GetAtt": ["NodeReconcilerFunctionRole", "Arn"]}},
    },
}


@dataclass
class Env:
    ec2: Any
    sqs: Any
    vpc: str
    public: list[str]
    private: list[str]
    node_sg: str

    def argv(self, *extra: str) -> list[str]:
        return ["--cluster", CLUSTER, "--region", REGION, "--stack", "ccm", *extra]


def put_heartbeat(minutes_ago: float = 1.0, queue: str = "prod-ccm-services.fifo") -> None:
    """What SQS publishes once the service reconciler processed (deleted) a watcher heartbeat from its queue."""
    boto3.client("cloudwatch", region_name=REGION).put_metric_data(
        Namespace="AWS/SQS",
        MetricData=[
            {
                "MetricName": "NumberOfMessagesDeleted",
                "Dimensions": [{"Name": "QueueName", "Value": queue}],
                "Timestamp": datetime.datetime.now(datetime.UTC) - datetime.timedelta(minutes=minutes_ago),
                "Value": 1.0,
                "Unit": "Count",
            }
        ],
    )


@pytest.fixture
def env(monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest) -> Iterator[Env]:
    """A prepared environment; its watcher's heartbeats arrive unless parametrized indirectly with False."""
    for key, value in {"AWS_ACCESS_KEY_ID": "t", "AWS_SECRET_ACCESS_KEY": "t", "AWS_DEFAULT_REGION": REGION}.items():
        monkeypatch.setenv(key, value)
    with mock_aws():
        ec2 = boto3.client("ec2", region_name=REGION)
        vpc = ec2.create_vpc(CidrBlock="10.0.0.0/16")["Vpc"]["VpcId"]
        igw = ec2.create_internet_gateway()["InternetGateway"]["InternetGatewayId"]
        ec2.attach_internet_gateway(InternetGatewayId=igw, VpcId=vpc)
        public_rt = ec2.create_route_table(VpcId=vpc)["RouteTable"]["RouteTableId"]
        ec2.create_route(RouteTableId=public_rt, DestinationCidrBlock="0.0.0.0/0", GatewayId=igw)
        private_rt = ec2.create_route_table(VpcId=vpc)["RouteTable"]["RouteTableId"]
        public, private = [], []
        for i, az in enumerate(("us-east-1a", "us-east-1b")):
            for kind, table, role, bucket in (
                ("pub", public_rt, "kubernetes.io/role/elb", public),
                ("priv", private_rt, "kubernetes.io/role/internal-elb", private),
            ):
                cidr = f"10.0.{i * 2 + (kind == 'priv')}.0/24"
                sid = ec2.create_subnet(VpcId=vpc, CidrBlock=cidr, AvailabilityZone=az)["Subnet"]["SubnetId"]
                ec2.associate_route_table(RouteTableId=table, SubnetId=sid)
                ec2.create_tags(Resources=[sid], Tags=[{"Key": role, "Value": "1"}, {"Key": TAG, "Value": "shared"}])
                bucket.append(sid)
        node_sg = ec2.create_security_group(GroupName="nodes", Description="nodes", VpcId=vpc)["GroupId"]
        ec2.create_tags(Resources=[node_sg], Tags=[{"Key": TAG, "Value": "owned"}])
        for sid in private:
            ec2.run_instances(
                ImageId="ami-12c6146b",
                MinCount=1,
                MaxCount=1,
                SubnetId=sid,
                SecurityGroupIds=[node_sg],
                TagSpecifications=[{"ResourceType": "instance", "Tags": [{"Key": TAG, "Value": "owned"}]}],
            )
        params = {"VpcId": vpc, "KubeAuthMode": "eks", "EnableRoutes": "false"}
        boto3.client("cloudformation", region_name=REGION).create_stack(
            StackName="ccm",
            TemplateBody=json.dumps(STACK_TEMPLATE),
            Parameters=[{"ParameterKey": k, "ParameterValue": v} for k, v in params.items()],
        )
        if getattr(request, "param", True):
            put_heartbeat()
        yield Env(ec2, boto3.client("sqs", region_name=REGION), vpc, public, private, node_sg)


def shipped_rbac() -> list[dict[str, Any]]:
    docs: list[dict[str, Any]] = []
    for path in (REPO / "deploy/base/rbac.yaml", REPO / "deploy/lambda-rbac/rbac.yaml"):
        docs += [d for d in yaml.safe_load_all(path.read_text()) if d]
    return docs


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Callable[[list[dict[str, Any]]], str]]:
    """Start the emulator with the given RBAC objects installed and enforced; returns an admin kubeconfig."""
    started: list[Emulator] = []

    def start(objects: list[dict[str, Any]]) -> str:
        emu = Emulator().start()
        started.append(emu)
        for stored, wanted in zip(load_objects(emu, objects), [o for o in objects if o], strict=True):
            if "status" in wanted:  # what the controllers would report (load_objects, like a POST, drops it)
                emu.update({**stored, "status": wanted["status"]}, subresource="status")
        emu.enable_rbac()
        return emu.write_kubeconfig(str(tmp_path / "kubeconfig"))

    yield start
    for emu in started:
        emu.stop()


def shipped_watcher(env: Env, ready: int = 2, overlay: bool = True) -> list[dict[str, Any]]:
    """deploy/base's namespace and Deployment as `kubectl kustomize` renders them (the generated ConfigMap's name
    has a hash suffix), the queue URLs set to the stack's as an overlay does; `ready` pods reported ready."""
    base = REPO / "deploy/base"
    namespace = yaml.safe_load((base / "namespace.yaml").read_text())
    deployment = yaml.safe_load((base / "deployment.yaml").read_text())
    generated = "serverless-ccm-watcher-5f8b2m9k4t"
    [container] = deployment["spec"]["template"]["spec"]["containers"]
    container["envFrom"] = [{"configMapRef": {"name": generated}}]
    literals = yaml.safe_load((base / "kustomization.yaml").read_text())["configMapGenerator"][0]["literals"]
    data = dict(literal.split("=", 1) for literal in literals)
    if overlay:
        for setting, queue in (("SERVICES", "prod-ccm-services.fifo"), ("NODES", "prod-ccm-nodes.fifo")):
            data[f"WATCHER_{setting}_QUEUE_URL"] = env.sqs.get_queue_url(QueueName=queue)["QueueUrl"]
    config_map = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": generated, "namespace": "serverless-ccm"},
        "data": data,
    }
    replicas = deployment["spec"]["replicas"]
    deployment["status"] = {"replicas": replicas, "readyReplicas": ready, "availableReplicas": ready}
    return [namespace, config_map, deployment]


def findings_of(env: Env, *extra: str) -> list[Finding]:
    findings, _ = cli.run(env.argv(*extra))
    return findings


def by_check(findings: list[Finding], prefix: str) -> list[Finding]:
    return [f for f in findings if f.check.startswith(prefix)]


def test_a_well_prepared_environment_passes(env: Env, cluster: Callable[[list[dict[str, Any]]], str]) -> None:
    findings = findings_of(env, "--kubeconfig", cluster(shipped_rbac() + shipped_watcher(env)))
    failing = [f for f in findings if f.status in ("fail", "warn")]
    assert failing == [], failing
    assert exit_code(findings) == 0
    assert {f.status for f in by_check(findings, "subnets")} == {"ok"}
    assert env.node_sg in by_check(findings, "node-security-group")[0].message
    assert {f.check for f in findings if f.status == "ok"} >= {
        "stack",
        "queue.ServicesQueue",
        "queue.ServicesDLQ",
        "queue.NodesQueue",
        "queue.NodesDLQ",
        "rbac.group.services",
        "rbac.group.nodes",
        "rbac.group.sweeper",
        "rbac.serviceaccount",
        "watcher.pods",
        "watcher.ServicesQueueUrl",
        "watcher.NodesQueueUrl",
        "watcher.LoadBalancerClass",
        "watcher.ServicesWithoutClass",
        "watcher.heartbeat",
    }
    assert not by_check(findings, "rbac.group.routes")  # EnableRoutes=false: no routes function, no check
    # moto implements neither IAM policy simulation nor EKS access entries: reported, never failed
    assert {f.status for f in by_check(findings, "iam.")} == {"unknown"}
    assert {f.check for f in by_check(findings, "iam.")} == {"iam.services", "iam.nodes", "iam.sweeper", "iam.watcher"}
    assert {f.status for f in by_check(findings, "access-entry")} == {"unknown"}


def test_untagged_role_subnets_are_reported_with_the_tag_command(env: Env) -> None:
    env.ec2.delete_tags(Resources=env.public, Tags=[{"Key": "kubernetes.io/role/elb"}])
    [public] = by_check(findings_of(env, "--no-kube"), "subnets.public")
    assert public.status == "warn" and "lowest-ID fallback" in public.message
    assert public.fix.startswith(
        f"aws ec2 create-tags --resources {' '.join(sorted(env.public))} --tags Key=kubernetes.io/role/elb,Value=1"
    )


def test_missing_node_security_group_fails_and_exits_1(env: Env, capsys: pytest.CaptureFixture[str]) -> None:
    env.ec2.delete_tags(Resources=[env.node_sg], Tags=[{"Key": TAG}])
    [verdict] = by_check(findings_of(env, "--no-kube"), "node-security-group")
    assert verdict.status == "fail"
    # the instances are found by their own cluster tag: the fix names their (only) group
    assert verdict.fix.startswith(f"aws ec2 create-tags --resources {env.node_sg} --tags Key={TAG},Value=owned")
    # the real entry point: --json output, exit code 1 (RBAC skipped: no cluster here)
    assert cli.main(env.argv("--json", "--no-kube")) == 1
    report = json.loads(capsys.readouterr().out)
    assert report["exitCode"] == 1
    assert any(f["check"] == "node-security-group" and f["status"] == "fail" for f in report["findings"])


def test_dlq_with_messages_warns_with_the_redrive_command(env: Env) -> None:
    url = env.sqs.get_queue_url(QueueName="prod-ccm-services-dlq.fifo")["QueueUrl"]
    env.sqs.send_message(QueueUrl=url, MessageBody="{}", MessageGroupId="default/web", MessageDeduplicationId="1")
    findings = findings_of(env, "--no-kube")
    [dlq] = by_check(findings, "queue.ServicesDLQ")
    assert dlq.status == "warn" and dlq.message.startswith("1 message(s) in the dead-letter queue")
    assert (
        "aws sqs start-message-move-task --source-arn arn:aws:sqs:us-east-1:123456789012:prod-ccm-services-dlq.fifo"
        in (dlq.fix)
    )
    assert exit_code(findings) == 0  # a warning, not a failure


def test_rbac_missing_a_verb_fails_and_names_the_manifest(
    env: Env, cluster: Callable[[list[dict[str, Any]]], str]
) -> None:
    objects = shipped_rbac()
    nodes = next(o for o in objects if o["kind"] == "ClusterRole" and o["metadata"]["name"] == "serverless-ccm:nodes")
    nodes["rules"] = [r for r in nodes["rules"] if r["resources"] != ["nodes/status"]]
    findings = findings_of(env, "--kubeconfig", cluster(objects))
    [group] = by_check(findings, "rbac.group.nodes")
    assert group.status == "fail" and group.message.endswith("may not: patch nodes/status")
    assert group.message.startswith("group serverless-ccm:nodes")
    assert group.fix == "kubectl apply -k deploy/lambda-rbac"
    assert {f.status for f in by_check(findings, "rbac.group.services")} == {"ok"}
    assert exit_code(findings) == 1


def test_a_grant_in_the_wrong_api_group_fails_the_watcher_and_the_service_reconciler(
    env: Env, cluster: Callable[[list[dict[str, Any]]], str]
) -> None:
    """EndpointSlices granted in the core group (apiGroups [""]) instead of discovery.k8s.io: the reviews carry the
    group, so both subjects that need them fail, named as kubectl spells the resource."""
    objects = shipped_rbac()
    for role in (o for o in objects if o["kind"] == "ClusterRole"):
        for rule in role["rules"]:
            if rule["apiGroups"] == ["discovery.k8s.io"]:
                rule["apiGroups"] = [""]
    findings = findings_of(env, "--kubeconfig", cluster(objects + shipped_watcher(env)))
    [services] = by_check(findings, "rbac.group.services")
    assert services.status == "fail" and services.message.endswith("may not: list endpointslices.discovery.k8s.io")
    [watcher] = by_check(findings, "rbac.serviceaccount")
    assert watcher.status == "fail"
    assert watcher.message.endswith(
        "may not: list endpointslices.discovery.k8s.io, watch endpointslices.discovery.k8s.io"
    )
    assert {f.status for f in by_check(findings, "rbac.group.nodes")} == {"ok"}


def test_a_function_group_bound_to_another_functions_role_warns(
    env: Env, cluster: Callable[[list[dict[str, Any]]], str]
) -> None:
    """One shared group (as before per-function RBAC): each function may do what the others need."""
    objects = shipped_rbac()
    binding = next(
        o for o in objects if o["kind"] == "ClusterRoleBinding" and o["metadata"]["name"] == "serverless-ccm:nodes"
    )
    binding["subjects"].append(
        {"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": "serverless-ccm:sweeper"}
    )
    findings = findings_of(env, "--kubeconfig", cluster(objects))
    [sweeper] = by_check(findings, "rbac.group.sweeper")
    assert sweeper.status == "warn" and "may also: list nodes, delete nodes, patch nodes" in sweeper.message
    assert {f.status for f in by_check(findings, "rbac.group.nodes")} == {"ok"}


def test_before_deploy_needs_no_stack_and_checks_route_tables_when_asked(env: Env) -> None:
    findings, text = cli.run(
        ["--cluster", CLUSTER, "--region", REGION, "--before-deploy", "--vpc-id", env.vpc, "--routes"]
    )
    [tables] = by_check(findings, "route-tables")
    assert tables.status == "fail" and f"Key={TAG},Value=owned" in tables.fix
    assert not by_check(findings, "iam") and not by_check(findings, "queue")
    assert "FAIL    route-tables" in text and text.rstrip().endswith("-> FAILED")


def test_missing_stack_fails_after_deploy(env: Env) -> None:
    findings, _ = cli.run(
        ["--cluster", CLUSTER, "--region", REGION, "--stack", "nope", "--vpc-id", env.vpc, "--no-kube"]
    )
    [stack] = by_check(findings, "stack")
    assert stack.status == "fail" and "does not exist" in stack.message


def test_rbac_is_unknown_without_a_reachable_cluster(env: Env, tmp_path: Path) -> None:
    findings = findings_of(env, "--kubeconfig", str(tmp_path / "missing"))
    [rbac] = by_check(findings, "rbac")
    assert rbac.status == "unknown" and "--kubeconfig" in rbac.fix
    assert exit_code(findings) == 0


@pytest.mark.parametrize("env", [False], indirect=True)  # no heartbeat in the window
def test_a_watcher_not_ready_on_placeholder_queues_and_silent_fails_each_check(
    env: Env, cluster: Callable[[list[dict[str, Any]]], str], capsys: pytest.CaptureFixture[str]
) -> None:
    kubeconfig = cluster(shipped_rbac() + shipped_watcher(env, ready=1, overlay=False))
    findings = {f.check: f for f in findings_of(env, "--kubeconfig", kubeconfig)}
    pods, services, beat = findings["watcher.pods"], findings["watcher.ServicesQueueUrl"], findings["watcher.heartbeat"]
    assert pods.status == "fail" and pods.message.endswith("1 of 2 pod(s) ready")
    assert "kubectl -n serverless-ccm describe deployment serverless-ccm-watcher" in pods.fix
    stack_url = env.sqs.get_queue_url(QueueName="prod-ccm-services.fifo")["QueueUrl"]
    assert services.status == "fail" and "111122223333/CLUSTER-ccm-services.fifo" in services.message
    assert f"WATCHER_SERVICES_QUEUE_URL={stack_url}" in services.fix
    assert findings["watcher.NodesQueueUrl"].status == "fail"
    assert beat.status == "fail" and "no watcher heartbeat" in beat.message
    assert cli.main(env.argv("--json", "--kubeconfig", kubeconfig)) == 1
    assert json.loads(capsys.readouterr().out)["exitCode"] == 1


@pytest.mark.parametrize("env", [False], indirect=True)
def test_only_heartbeats_inside_the_window_count_and_a_missing_deployment_fails(
    env: Env, cluster: Callable[[list[dict[str, Any]]], str]
) -> None:
    put_heartbeat(minutes_ago=30)  # the watcher went silent 30 minutes ago
    findings = {f.check: f for f in findings_of(env, "--kubeconfig", cluster(shipped_rbac()))}
    assert findings["watcher.heartbeat"].status == "fail"
    assert findings["watcher.pods"].status == "fail" and "not found" in findings["watcher.pods"].message
    # The fix re-renders the overlay from the stack (deploy/base alone would drop the identity settings) ...
    assert findings["watcher.pods"].fix == "scripts/install-watcher --stack ccm"
    # ... or names the overlay the watcher was applied from.
    given = findings_of(env, "--kubeconfig", cluster(shipped_rbac()), "--overlay", ".serverless-ccm/ccm")
    assert {f.check: f for f in given}["watcher.pods"].fix == "kubectl apply -k .serverless-ccm/ccm"
    put_heartbeat(queue="prod-ccm-nodes.fifo")  # another queue's deletions say nothing of the watcher's heartbeats
    assert {f.check: f for f in findings_of(env, "--no-kube")}["watcher.heartbeat"].status == "fail"
    put_heartbeat()
    assert {f.check: f for f in findings_of(env, "--no-kube")}["watcher.heartbeat"].status == "ok"


def test_the_emulator_answers_subject_access_reviews_like_a_cluster(tmp_path: Path) -> None:
    """The endpoint the doctor relies on: allowed per RBAC when enforced, everything allowed when not."""
    from ccm.doctor.facts import RbacRule
    from ccm.doctor.gather import kube_access_checker

    emu = Emulator().start()
    try:
        check = kube_access_checker(emu.write_kubeconfig(str(tmp_path / "kubeconfig")))
        assert check("someone", ["nobody"], RbacRule("delete", "nodes"))  # RBAC off: AlwaysAllow
        load_objects(emu, shipped_rbac())
        emu.enable_rbac()
        watcher = "system:serviceaccount:serverless-ccm:serverless-ccm-watcher"
        assert check(watcher, [], RbacRule("watch", "nodes"))
        assert not check(watcher, [], RbacRule("get", "nodes"))
        assert check("arn:fn", ["serverless-ccm:services"], RbacRule("patch", "services", "status"))
        assert not check("arn:fn", ["serverless-ccm:services"], RbacRule("update", "services", "status"))
        assert not check("arn:fn", ["serverless-ccm:routes"], RbacRule("patch", "services", "status"))
        assert not check("arn:fn", ["serverless-ccm:sweeper"], RbacRule("delete", "nodes"))
        assert not check("arn:fn", ["other"], RbacRule("patch", "services", "status"))
        # The API group is part of the question, as on kube-apiserver: the same resource name in the core group is
        # another resource, which nothing grants.
        slices = RbacRule("list", "endpointslices", group="discovery.k8s.io")
        assert check(watcher, [], slices) and check(
            watcher, [], RbacRule("watch", "endpointslices", group=slices.group)
        )
        assert not check(watcher, [], RbacRule("list", "endpointslices"))
        assert check("arn:fn", ["serverless-ccm:services"], slices)
        assert not check("arn:fn", ["serverless-ccm:services"], RbacRule("watch", "endpointslices", group=slices.group))
        assert not check("arn:fn", ["serverless-ccm:services"], RbacRule("list", "endpointslices", group="apps"))
        assert check("arn:fn", ["serverless-ccm:services"], RbacRule("patch", "pods", "status"))
        assert not check("arn:fn", ["serverless-ccm:services"], RbacRule("patch", "pods"))
        assert not check("arn:fn", ["serverless-ccm:nodes"], RbacRule("patch", "pods", "status"))
    finally:
        emu.stop()


def test_a_profile_dropped_by_parameter_overrides_is_caught(env: Env, tmp_path: Path) -> None:
    """`sam deploy --config-env self-managed --parameter-overrides ...` replaced the profile's list: the stack was
    deployed with KubeAuthMode=eks although the profile says kubeconfig-secret. The doctor names it and exits 1."""
    samconfig = tmp_path / "samconfig.toml"
    samconfig.write_text(
        "version = 0.1\n[self-managed.deploy.parameters]\n"
        'parameter_overrides = "KubeAuthMode=\\"kubeconfig-secret\\" EnableRoutes=\\"false\\""\n'
        "[eks.deploy.parameters]\n"
        'parameter_overrides = "KubeAuthMode=\\"eks\\" EnableRoutes=\\"false\\""\n'
    )
    findings = findings_of(env, "--samconfig", str(samconfig), "--config-env", "self-managed")
    [profile] = by_check(findings, "samconfig.profile")
    assert profile.status == "fail" and "KubeAuthMode: profile 'kubeconfig-secret', stack 'eks'" in profile.message
    assert exit_code(findings) == 1
    [profile] = by_check(findings_of(env, "--samconfig", str(samconfig), "--config-env", "eks"), "samconfig.profile")
    assert profile.status == "ok"
