"""The whole stack under the exact RBAC deploy/ ships: the emulator enforces the roles per token, the watcher runs as
its ServiceAccount, each Lambda as its own IAM role that its access entry maps to its own group
(serverless-ccm:<function>). A Service gets its load balancer, a new Node is initialised, routes are created and the
sweeper runs (each role is sufficient), nothing they did was refused, and verbs outside each role are (least
privilege per function: the routes function may not patch a Service, the sweeper may not delete a Node)."""

from __future__ import annotations

import json
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kubernetes
import pytest
from kubernetes.client.exceptions import ApiException

from ccm.doctor.access import LAMBDA_GROUPS
from ccm.doctor.facts import RoleKind
from ccm.node import model as m
from devstack.k8s_emulator import Emulator
from devstack.stack import Stack, StackConfig
from tests.deploy.conftest import kubectl_binary, rendered_text
from tests.e2e.helpers import A, create_lb_service, hostname
from tests.e2e.test_nodes import create_node, launch, provider_id, read_node
from tests.e2e.test_routes import condition, expected, pod_routes, safety_pass

WATCHER_USER = "system:serviceaccount:serverless-ccm:serverless-ccm-watcher"
# What an EKS access entry authenticates each function's role as; its group comes from its KubernetesGroups.
FUNCTIONS: dict[str, RoleKind] = {
    "ServiceReconcilerFunction": "services",
    "NodeReconcilerFunction": "nodes",
    "RouteReconcilerFunction": "routes",
    "SweeperFunction": "sweeper",
}
USERS = {kind: f"arn:aws:sts::123456789012:assumed-role/serverless-ccm-{kind}/devstack" for kind in FUNCTIONS.values()}
TOKENS = {"watcher-token": WATCHER_USER, **{f"{kind}-token": user for kind, user in USERS.items()}}


def install_deploy(tmp: Path) -> Any:
    def prepare(emu: Emulator) -> None:
        # As a cluster admin would: kubectl apply of the rendered overlay, then RBAC on.
        kubeconfig = emu.write_kubeconfig(str(tmp / "admin-kubeconfig"))
        proc = subprocess.run(
            [kubectl_binary(), "--kubeconfig", kubeconfig, "apply", "-f", "-"],
            input=rendered_text("overlays/irsa"),
            capture_output=True,
            text=True,
            timeout=60,
            env={"HOME": str(tmp), "PATH": "/usr/bin:/bin"},
        )
        assert proc.returncode == 0, proc.stderr
        emu.tokens.update(TOKENS)
        emu.enable_rbac({user: [LAMBDA_GROUPS[kind]] for kind, user in USERS.items()})

    return prepare


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    state_dir = tmp_path_factory.mktemp("devstack-rbac")
    config = StackConfig(
        state_dir=state_dir,
        concurrency=2,
        resync_seconds=3600,
        routes=True,  # the route reconciler runs too, under its own group
        prepare_emulator=install_deploy(state_dir),
        watcher_token="watcher-token",
        function_tokens={fn: f"{kind}-token" for fn, kind in FUNCTIONS.items()},
    )
    with Stack(config) as running:
        yield running


def core_as(kubeconfig: str) -> kubernetes.client.CoreV1Api:
    return kubernetes.client.CoreV1Api(kubernetes.config.new_client_from_config(config_file=kubeconfig))


def test_watcher_and_each_function_run_as_their_own_users(stack: Stack) -> None:
    assert stack.emulator is not None and stack.emulator.rbac is not None
    assert json.loads(Path(stack.watcher_kubeconfig).read_text())["users"][0]["user"]["token"] == "watcher-token"
    for fn, kind in FUNCTIONS.items():
        user = json.loads(Path(stack.function_kubeconfigs[fn]).read_text())["users"][0]["user"]
        assert user["token"] == f"{kind}-token", fn
    users = {e["user"] for e in stack.emulator.request_log.snapshot()}
    assert WATCHER_USER in users  # the watcher's initial lists


def test_service_gets_its_load_balancer(stack: Stack) -> None:
    svc = create_lb_service(stack, "rbac-web", [80])
    host = stack.wait_for(lambda: hostname(stack, "rbac-web"), timeout=60, what="LB hostname")
    assert host.endswith(".elb.amazonaws.com")
    live = core_as(stack.kubeconfig).read_namespaced_service("rbac-web", "default")
    assert "service.kubernetes.io/load-balancer-cleanup" in (live.metadata.finalizers or [])
    assert live.metadata.uid == svc["metadata"]["uid"]


def test_an_ip_service_reads_its_endpointslices_under_the_services_group(stack: Stack) -> None:
    """nlb-target-type ip: the service reconciler lists the Service's EndpointSlices (discovery.k8s.io) with its own
    group's grant."""
    assert stack.emulator is not None
    create_lb_service(stack, "rbac-ip", [80], {A + "type": "nlb", A + "nlb-target-type": "ip"})
    stack.wait_for(lambda: hostname(stack, "rbac-ip"), timeout=60, what="LB hostname of the ip Service")
    lists = [
        e
        for e in stack.emulator.request_log.snapshot()
        if e["method"] == "GET"
        and e["path"].split("?")[0] == "/apis/discovery.k8s.io/v1/namespaces/default/endpointslices"
    ]
    assert lists and {(e["user"], e["status"]) for e in lists} == {(USERS["services"], 200)}, lists


def test_tainted_node_is_initialised(stack: Stack) -> None:
    inst = launch(stack)
    name = inst["PrivateDnsName"]
    create_node(stack, name)
    node = stack.wait_for(
        lambda: (n := read_node(stack, name)) and not m.has_taint(n, m.UNINITIALIZED_TAINT) and n,
        timeout=60,
        what="uninitialized taint removed",
    )
    assert node["spec"]["providerID"] == provider_id(inst)


def test_pod_cidr_routes_are_created_and_nodes_marked_routed(stack: Stack) -> None:
    assert stack.world is not None
    instances = {i: inst.instance_id for i, inst in enumerate(stack.world.instances)}
    stack.wait_for(lambda: pod_routes(stack) == expected(stack, instances), timeout=60, what="pod CIDR routes")
    first = stack.world.node_objects()[0]["metadata"]["name"]
    routed = stack.wait_for(lambda: condition(stack, first), timeout=30, what="NetworkUnavailable condition")
    assert (routed["status"], routed["reason"]) == ("False", "RouteCreated")


def test_the_sweeper_runs_under_its_own_group(stack: Stack) -> None:
    assert stack.runner is not None
    scheduled = {"version": "0", "id": str(uuid.uuid4()), "detail-type": "Scheduled Event", "source": "aws.events"}
    swept = stack.runner.invoke("SweeperFunction", {**scheduled, "time": time.strftime("%Y-%m-%dT%H:%M:%SZ")})
    assert swept is not None and "error" not in swept and swept["response"]["failed"] == 0, swept
    assert swept["response"]["kube_calls"] >= 1


def test_the_routes_and_sweeper_functions_post_their_events_under_their_own_groups(stack: Stack) -> None:
    """The events grants of the routes and sweeper groups are exercised: a route that cannot be made (its instance
    terminated) is a FailedToCreateRoute Warning on the Node, a listener moved by hand is a DriftRepaired Warning on
    the Service, each posted by its function's own user and naming it as the source."""
    assert stack.world is not None and stack.runner is not None and stack.emulator is not None
    admin = core_as(stack.kubeconfig)

    def events(namespace: str, reason: str) -> list[Any]:
        return [e for e in admin.list_namespaced_event(namespace).items if e.reason == reason]

    victim = stack.world.instances[-1]
    node = stack.world.node_objects()[-1]["metadata"]["name"]
    stack.aws("ec2").terminate_instances(InstanceIds=[victim.instance_id])
    safety_pass(stack)
    (failed,) = stack.wait_for(lambda: events("default", "FailedToCreateRoute"), timeout=60, what="route Warning")
    assert (failed.involved_object.kind, failed.involved_object.name) == ("Node", node)
    assert failed.source.component == "serverless-ccm/route-controller"

    svc = admin.read_namespaced_service("rbac-web", "default")
    elbv2 = stack.aws("elbv2")
    lb_name = ("a" + svc.metadata.uid.replace("-", ""))[:32]
    lb_arn = elbv2.describe_load_balancers(Names=[lb_name])["LoadBalancers"][0]["LoadBalancerArn"]
    (listener,) = [ls for ls in elbv2.describe_listeners(LoadBalancerArn=lb_arn)["Listeners"] if ls["Port"] == 80]
    elbv2.modify_listener(ListenerArn=listener["ListenerArn"], Port=8080)
    scheduled = {"version": "0", "id": str(uuid.uuid4()), "detail-type": "Scheduled Event", "source": "aws.events"}
    swept = stack.runner.invoke("SweeperFunction", {**scheduled, "time": time.strftime("%Y-%m-%dT%H:%M:%SZ")})
    assert swept is not None and swept["response"]["requeued"] >= 1, swept
    (drift,) = events("default", "DriftRepaired")
    assert (drift.involved_object.name, drift.source.component) == ("rbac-web", "serverless-ccm/sweeper")

    posted = {
        (e["user"], e["status"])
        for e in stack.emulator.request_log.snapshot()
        if e["method"] == "POST" and e["path"].endswith("/events")
    }
    assert {(USERS["routes"], 201), (USERS["sweeper"], 201)} <= posted


def test_nothing_the_watcher_or_functions_did_was_refused(stack: Stack) -> None:
    assert stack.runner is not None and stack.emulator is not None
    stack.runner.drain(30)
    log = stack.emulator.request_log.snapshot()
    by_user = {user: [e for e in log if e["user"] == user] for user in TOKENS.values()}
    assert all(by_user.values()), {u: len(e) for u, e in by_user.items()}
    refused = [
        (e["user"], e["method"], e["path"])
        for entries in by_user.values()
        for e in entries
        if e["status"] in (401, 403)
    ]
    assert refused == []

    # Each function used the calls its own role grants, as its own user (so the check above covered them).
    services = {(e["method"], e["path"].split("?")[0]) for e in by_user[USERS["services"]]}
    assert any(m == "PATCH" and p.endswith("/services/rbac-web/status") for m, p in services), services
    assert any(m == "PATCH" and p.endswith("/services/rbac-web") for m, p in services), services
    nodes = {(e["method"], e["path"].split("?")[0]) for e in by_user[USERS["nodes"]]}
    assert any(m == "PATCH" and "/api/v1/nodes/" in p and not p.endswith("/status") for m, p in nodes), nodes
    routes = {(e["method"], e["path"].split("?")[0]) for e in by_user[USERS["routes"]]}
    assert any(m == "PATCH" and p.endswith("/status") for m, p in routes), routes
    assert not any("/services" in p for _, p in routes), routes
    sweeper = {(e["method"], e["path"].split("?")[0]) for e in by_user[USERS["sweeper"]]}
    assert ("GET", "/api/v1/services") in sweeper and not any("/nodes" in p for _, p in sweeper), sweeper


def test_verbs_outside_each_role_are_forbidden(stack: Stack) -> None:
    watcher = core_as(stack.watcher_kubeconfig)
    fn = {kind: core_as(stack.function_kubeconfigs[f]) for f, kind in FUNCTIONS.items()}
    merge = {"_content_type": "application/merge-patch+json"}
    node = stack.world.node_objects()[0]["metadata"]["name"]  # type: ignore[union-attr]
    label = {"metadata": {"labels": {"x": "y"}}}
    cases = [
        (lambda: watcher.delete_namespaced_service("rbac-web", "default"), "delete", "services", WATCHER_USER),
        (lambda: watcher.read_namespaced_service("rbac-web", "default"), "get", "services", WATCHER_USER),
        (lambda: fn["services"].delete_namespaced_service("rbac-web", "default"), "delete", "services", "services"),
        (lambda: fn["services"].delete_node(node), "delete", "nodes", "services"),
        (lambda: fn["services"].create_namespace({"metadata": {"name": "x"}}), "create", "namespaces", "services"),
        (
            lambda: fn["routes"].patch_namespaced_service("rbac-web", "default", label, **merge),
            "patch",
            "services",
            "routes",
        ),
        (lambda: fn["routes"].patch_node(node, label, **merge), "patch", "nodes", "routes"),
        (lambda: fn["sweeper"].delete_node(node), "delete", "nodes", "sweeper"),
        (
            lambda: fn["sweeper"].patch_namespaced_service("rbac-web", "default", label, **merge),
            "patch",
            "services",
            "sweeper",
        ),
        (
            lambda: fn["nodes"].patch_namespaced_service("rbac-web", "default", label, **merge),
            "patch",
            "services",
            "nodes",
        ),
        (lambda: fn["nodes"].list_namespaced_service_account("serverless-ccm"), "list", "serviceaccounts", "nodes"),
        # Pods: only the service reconciler reads them (`ip` targets) and writes only their readiness-gate status.
        (lambda: fn["services"].delete_namespaced_pod("web-0", "default"), "delete", "pods", "services"),
        (lambda: fn["services"].patch_namespaced_pod("web-0", "default", label, **merge), "patch", "pods", "services"),
        (
            lambda: fn["nodes"].patch_namespaced_pod_status("web-0", "default", {}, **merge),
            "patch",
            "pods/status",
            "nodes",
        ),
        (lambda: fn["routes"].list_namespaced_pod("default"), "list", "pods", "routes"),
        (lambda: fn["sweeper"].read_namespaced_pod("web-0", "default"), "get", "pods", "sweeper"),
        (lambda: watcher.list_pod_for_all_namespaces(), "list", "pods", WATCHER_USER),
    ]
    for call, verb, resource, who in cases:
        user = USERS.get(who, who)
        with pytest.raises(ApiException) as err:
            call()
        status = json.loads(err.value.body)
        assert (err.value.status, status["reason"]) == (403, "Forbidden")
        assert f'User "{user}" cannot {verb} resource "{resource}"' in status["message"]
    assert read_service_exists(stack, "rbac-web")
    assert core_as(stack.kubeconfig).read_node(node).metadata.labels.get("x") is None


def read_service_exists(stack: Stack, name: str) -> bool:
    return core_as(stack.kubeconfig).read_namespaced_service(name, "default").metadata.name == name
