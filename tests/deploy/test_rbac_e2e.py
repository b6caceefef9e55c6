"""The whole stack under the exact RBAC deploy/ ships: the emulator enforces the roles per token, the watcher runs as
its ServiceAccount, the Lambdas as an IAM role that an access entry maps to the group serverless-ccm. A Service
gets its load balancer and a new Node is initialised (the roles are sufficient), nothing they did was refused,
and verbs outside the roles are (they are least privilege)."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kubernetes
import pytest
from kubernetes.client.exceptions import ApiException

from ccm.node import model as m
from devstack.k8s_emulator import Emulator
from devstack.stack import Stack, StackConfig
from tests.deploy.conftest import kubectl_binary, rendered_text
from tests.e2e.helpers import create_lb_service, hostname
from tests.e2e.test_nodes import create_node, launch, provider_id, read_node
from tests.e2e.test_routes import condition, expected, pod_routes

WATCHER_USER = "system:serviceaccount:serverless-ccm:serverless-ccm-watcher"
# What an EKS access entry authenticates a function's role as; its group comes from KubernetesGroups.
FUNCTIONS_USER = "arn:aws:sts::123456789012:assumed-role/serverless-ccm-reconcilers/devstack"
TOKENS = {"watcher-token": WATCHER_USER, "functions-token": FUNCTIONS_USER}


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
        emu.enable_rbac({FUNCTIONS_USER: ["serverless-ccm"]})

    return prepare


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    state_dir = tmp_path_factory.mktemp("devstack-rbac")
    config = StackConfig(
        state_dir=state_dir,
        concurrency=2,
        resync_seconds=3600,
        routes=True,  # the route reconciler runs under the same group
        prepare_emulator=install_deploy(state_dir),
        watcher_token="watcher-token",
        functions_token="functions-token",
    )
    with Stack(config) as running:
        yield running


def core_as(kubeconfig: str) -> kubernetes.client.CoreV1Api:
    return kubernetes.client.CoreV1Api(kubernetes.config.new_client_from_config(config_file=kubeconfig))


def test_watcher_and_functions_run_as_their_own_users(stack: Stack) -> None:
    assert stack.emulator is not None and stack.emulator.rbac is not None
    assert json.loads(Path(stack.watcher_kubeconfig).read_text())["users"][0]["user"]["token"] == "watcher-token"
    assert stack.lambda_environment()["KUBECONFIG"] == stack.functions_kubeconfig != stack.kubeconfig
    users = {e["user"] for e in stack.emulator.request_log.snapshot()}
    assert WATCHER_USER in users  # the watcher's initial lists


def test_service_gets_its_load_balancer(stack: Stack) -> None:
    svc = create_lb_service(stack, "rbac-web", [80])
    host = stack.wait_for(lambda: hostname(stack, "rbac-web"), timeout=60, what="LB hostname")
    assert host.endswith(".elb.amazonaws.com")
    live = core_as(stack.kubeconfig).read_namespaced_service("rbac-web", "default")
    assert "service.kubernetes.io/load-balancer-cleanup" in (live.metadata.finalizers or [])
    assert live.metadata.uid == svc["metadata"]["uid"]


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
    # The functions used the writes their role grants (so the check above covered them).
    writes = {(e["method"], e["path"].rsplit("/", 1)[-1]) for e in by_user[FUNCTIONS_USER] if e["method"] != "GET"}
    assert ("PATCH", "status") in writes and ("POST", "events") in writes, writes


def test_verbs_outside_the_roles_are_forbidden(stack: Stack) -> None:
    watcher = core_as(stack.watcher_kubeconfig)
    functions = core_as(stack.functions_kubeconfig)
    cases = [
        (lambda: watcher.delete_namespaced_service("rbac-web", "default"), "delete", "services", WATCHER_USER),
        (lambda: watcher.read_namespaced_service("rbac-web", "default"), "get", "services", WATCHER_USER),
        (lambda: functions.delete_namespaced_service("rbac-web", "default"), "delete", "services", FUNCTIONS_USER),
        (lambda: functions.create_namespace({"metadata": {"name": "x"}}), "create", "namespaces", FUNCTIONS_USER),
        (
            lambda: functions.list_namespaced_service_account("serverless-ccm"),
            "list",
            "serviceaccounts",
            FUNCTIONS_USER,
        ),
    ]
    for call, verb, resource, user in cases:
        with pytest.raises(ApiException) as err:
            call()
        status = json.loads(err.value.body)
        assert (err.value.status, status["reason"]) == (403, "Forbidden")
        assert f'User "{user}" cannot {verb} resource "{resource}"' in status["message"]
    assert read_service_exists(stack, "rbac-web")


def read_service_exists(stack: Stack, name: str) -> bool:
    return core_as(stack.kubeconfig).read_namespaced_service(name, "default").metadata.name == name
