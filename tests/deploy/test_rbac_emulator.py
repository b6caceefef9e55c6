"""The emulator's RBAC authorizer: the decision rules, and the shipped roles enforced per token over HTTP with the
real kubernetes client (403 Status as the real API server words it)."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kubernetes
import pytest
from kubernetes.client.exceptions import ApiException

from ccm.doctor.access import LAMBDA_GROUPS
from ccm.k8s.kube import ApiError, Kube
from ccm.k8s.kubeconfig import from_kubeconfig
from devstack.k8s_emulator import Emulator
from devstack.k8s_emulator.rbac import Attributes, allowed, forbidden_message, load_objects, rule_allows, user_groups
from tests.deploy.conftest import render

WATCHER_USER = "system:serviceaccount:serverless-ccm:serverless-ccm-watcher"
# What EKS authenticates each function role as; its access entry gives it its own group (template.yaml).
FUNCTION_USERS = {kind: f"arn:aws:sts::111122223333:assumed-role/serverless-ccm-{kind}/fn" for kind in LAMBDA_GROUPS}
LAMBDA_USER = FUNCTION_USERS["services"]
Obj = dict[str, Any]


def attrs(verb: str, resource: str, namespace: str = "", name: str = "", group: str = "", **who: Any) -> Attributes:
    user = who.get("user", "u")
    return Attributes(user, user_groups(user, who.get("groups", ())), verb, group, resource, namespace, name)


# ---------------------------------------------------------------------- pure decisions


def test_rule_matching_verbs_groups_subresources_and_names() -> None:
    rule = {"apiGroups": [""], "resources": ["services"], "verbs": ["get", "patch"]}
    assert rule_allows(rule, attrs("patch", "services", "default", "web"))
    assert not rule_allows(rule, attrs("delete", "services", "default", "web"))
    assert not rule_allows(rule, attrs("patch", "services/status", "default", "web"))  # subresource is separate
    assert not rule_allows(rule, attrs("get", "leases", "default", "x", group="coordination.k8s.io"))
    assert rule_allows({**rule, "resources": ["services/*"]}, attrs("patch", "services/status", "d", "w"))
    assert rule_allows({**rule, "resources": ["*/status"]}, attrs("patch", "services/status", "d", "w"))
    assert rule_allows({**rule, "resources": ["*"], "verbs": ["*"]}, attrs("delete", "services/status", "d", "w"))
    named = {**rule, "resourceNames": ["web"]}
    assert rule_allows(named, attrs("get", "services", "d", "web"))
    assert not rule_allows(named, attrs("get", "services", "d", "db"))
    assert not rule_allows(named, attrs("list", "services", "d"))  # a list names no object


def test_bindings_subjects_and_scopes() -> None:
    role = {"metadata": {"name": "r"}, "rules": [{"apiGroups": [""], "resources": ["services"], "verbs": ["get"]}]}
    cluster_roles = {"r": role}
    roles = {("team", "r"): role}

    def binding(kind: str, subject: Obj, namespace: str | None = None, ref: str = "ClusterRole") -> Obj:
        meta: Obj = {"name": "b", **({"namespace": namespace} if namespace else {})}
        return {"kind": kind, "metadata": meta, "roleRef": {"kind": ref, "name": "r"}, "subjects": [subject]}

    group = {"kind": "Group", "name": "serverless-ccm"}
    by_group = [binding("ClusterRoleBinding", group)]
    member = attrs("get", "services", "default", "web", user="arn:x", groups=["serverless-ccm"])
    stranger = attrs("get", "services", "default", "web", user="arn:y")
    assert allowed(member, cluster_roles, roles, by_group, [])
    assert not allowed(stranger, cluster_roles, roles, by_group, [])
    # A service account subject matches its system:serviceaccount:<ns>:<name> user, not the same name elsewhere.
    sa = [binding("ClusterRoleBinding", {"kind": "ServiceAccount", "name": "w", "namespace": "ccm"})]
    assert allowed(attrs("get", "services", "x", "y", user="system:serviceaccount:ccm:w"), cluster_roles, roles, sa, [])
    assert not allowed(
        attrs("get", "services", "x", "y", user="system:serviceaccount:o:w"), cluster_roles, roles, sa, []
    )
    # A RoleBinding grants in its own namespace only, whether it refers to a Role or a ClusterRole.
    for ref in ("Role", "ClusterRole"):
        local = [binding("RoleBinding", group, "team", ref)]
        inside = attrs("get", "services", "team", "web", user="arn:x", groups=["serverless-ccm"])
        assert allowed(inside, cluster_roles, roles, [], local)
        assert not allowed(member, cluster_roles, roles, [], local)
    # system:masters bypasses RBAC, as on a real cluster.
    assert allowed(attrs("delete", "nodes", name="n", user="admin", groups=["system:masters"]), {}, {}, [], [])


def test_forbidden_message_is_worded_like_the_api_server() -> None:
    assert forbidden_message(attrs("delete", "services", "default", "web", user=WATCHER_USER)) == (
        f'services "web" is forbidden: User "{WATCHER_USER}" cannot delete resource "services" in API group "" '
        'in the namespace "default"'
    )
    assert forbidden_message(attrs("list", "deployments", group="apps", user="u")) == (
        'deployments.apps is forbidden: User "u" cannot list resource "deployments" in API group "apps" '
        "at the cluster scope"
    )
    assert 'cannot patch resource "nodes/status"' in forbidden_message(attrs("patch", "nodes/status", name="n"))


# ---------------------------------------------------------------------- over HTTP with the shipped roles


@pytest.fixture
def cluster(emu: Emulator) -> Iterator[Emulator]:
    """The emulator with deploy/ installed (as an admin would) and RBAC switched on."""
    load_objects(emu, render("overlays/irsa"))
    emu.tokens.update({"watcher-token": WATCHER_USER, **{f"{kind}-token": u for kind, u in FUNCTION_USERS.items()}})
    emu.enable_rbac({user: [LAMBDA_GROUPS[kind]] for kind, user in FUNCTION_USERS.items()})
    emu.create({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1"}})
    emu.create(
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": "web", "namespace": "default"},
            "spec": {"type": "LoadBalancer", "ports": [{"port": 80}]},
        }
    )
    yield emu


def core_for(emu: Emulator, tmp_path: Path, token: str | None) -> kubernetes.client.CoreV1Api:
    kubeconfig = emu.write_kubeconfig(str(tmp_path / f"kubeconfig-{token}"), token=token)
    return kubernetes.client.CoreV1Api(kubernetes.config.new_client_from_config(config_file=kubeconfig))


def refused(call: Any) -> Obj:
    with pytest.raises(ApiException) as err:
        call()
    assert err.value.status == 403, err.value
    status: Obj = json.loads(err.value.body)
    assert status["kind"] == "Status" and status["reason"] == "Forbidden" and status["code"] == 403
    return status


def test_a_resource_the_emulator_does_not_serve_is_authorised_before_it_is_not_found(
    cluster: Emulator, tmp_path: Path
) -> None:
    """kube-apiserver parses the path into request attributes (RequestInfoFactory) and authorises them before
    routing: a caller without the permission gets 403 for `pods/eviction` or a group nobody serves, one with it
    the 404 (here: the emulator serves neither)."""
    body = {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": "p", "namespace": "default"}}
    services = core_for(cluster, tmp_path, "services-token")
    status = refused(lambda: services.create_namespaced_pod_eviction("p", "default", body))
    assert status["message"] == (
        f'pods "p" is forbidden: User "{LAMBDA_USER}" cannot create resource "pods/eviction" in API group "" '
        'in the namespace "default"'
    )
    assert status["details"] == {"name": "p", "kind": "pods"}
    request = urllib.request.Request(
        cluster.url + "/apis/example.com/v1/widgets", headers={"Authorization": "Bearer watcher-token"}
    )
    with pytest.raises(urllib.error.HTTPError) as answer:
        urllib.request.urlopen(request)
    assert answer.value.code == 403 and json.loads(answer.value.read())["message"] == (
        f'widgets.example.com is forbidden: User "{WATCHER_USER}" cannot list resource "widgets" in API group '
        '"example.com" at the cluster scope'
    )
    admin = core_for(cluster, tmp_path, "admin-token")
    with pytest.raises(ApiException) as err:
        admin.create_namespaced_pod_eviction("p", "default", body)
    assert err.value.status == 404


def test_rbac_is_off_by_default(emu: Emulator, tmp_path: Path) -> None:
    anonymous = core_for(emu, tmp_path, None)
    emu.create({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1"}})
    anonymous.delete_node("n1")
    assert emu.get("nodes", None, "n1") is None


def test_watcher_token_can_list_and_watch_and_nothing_else(cluster: Emulator, tmp_path: Path) -> None:
    core = core_for(cluster, tmp_path, "watcher-token")
    assert [s.metadata.name for s in core.list_service_for_all_namespaces().items] == ["web"]
    assert [n.metadata.name for n in core.list_node().items] == ["n1"]
    events = list(kubernetes.watch.Watch().stream(core.list_node, timeout_seconds=1, resource_version="0"))
    assert [e["object"].metadata.name for e in events] == ["n1"]
    status = refused(lambda: core.delete_namespaced_service("web", "default"))
    assert status["message"] == (
        f'services "web" is forbidden: User "{WATCHER_USER}" cannot delete resource "services" in API group "" '
        'in the namespace "default"'
    )
    assert status["details"] == {"name": "web", "kind": "services"}
    refused(lambda: core.read_namespaced_service("web", "default"))  # list/watch only, not even get
    refused(lambda: core.patch_node("n1", {"metadata": {"labels": {"x": "y"}}}))
    refused(lambda: core.list_namespaced_service_account("serverless-ccm"))
    assert cluster.get("services", "default", "web") is not None
    log = [e for e in cluster.request_log.snapshot() if e["user"] == WATCHER_USER]
    assert [e["status"] for e in log] == [200, 200, 200, 403, 403, 403, 403]
    # EndpointSlices of all namespaces (the ENDPOINTS hints of ip target-mode Services): list and watch only.
    discovery = kubernetes.client.DiscoveryV1Api(core.api_client)
    assert discovery.list_endpoint_slice_for_all_namespaces().items == []
    assert (
        list(kubernetes.watch.Watch().stream(discovery.list_endpoint_slice_for_all_namespaces, timeout_seconds=1)) == []
    )
    status = refused(lambda: discovery.delete_collection_namespaced_endpoint_slice("default"))
    assert 'cannot deletecollection resource "endpointslices" in API group "discovery.k8s.io"' in status["message"]


def test_service_reconciler_group_gets_exactly_its_verbs(cluster: Emulator, tmp_path: Path) -> None:
    core = core_for(cluster, tmp_path, "services-token")
    merge = {"_content_type": "application/merge-patch+json"}
    svc = core.read_namespaced_service("web", "default")
    core.patch_namespaced_service("web", "default", {"metadata": {"finalizers": ["x/y"]}}, **merge)
    core.patch_namespaced_service_status(
        "web", "default", {"status": {"loadBalancer": {"ingress": [{"hostname": "h"}]}}}, **merge
    )
    core.create_namespaced_event(
        "default",
        {"metadata": {"name": "e1"}, "involvedObject": {"kind": "Service", "name": "web", "namespace": "default"}},
    )
    assert svc.metadata.name == "web" and [n.metadata.name for n in core.list_node().items] == ["n1"]
    status = refused(lambda: core.delete_namespaced_service("web", "default"))
    assert f'User "{LAMBDA_USER}" cannot delete resource "services"' in status["message"]
    refused(lambda: core.patch_node_status("n1", {"status": {"addresses": []}}, **merge))  # the nodes function's
    refused(lambda: core.delete_node("n1"))
    refused(lambda: core.list_service_for_all_namespaces())  # the sweeper's
    refused(lambda: core.create_namespace({"metadata": {"name": "evil"}}))
    refused(lambda: core.list_namespaced_event("default"))
    assert cluster.get("nodes", None, "n1") is not None


def test_service_reconciler_group_serves_ip_targets_with_exactly_its_pod_verbs(
    cluster: Emulator, tmp_path: Path
) -> None:
    """ccm.k8s.endpoints as the service reconciler's user: the Service's EndpointSlices, its gated pods by name and
    by selector, the readiness-gate condition on pods/status; and no other function's group may do any of it."""
    gate = "target-health.ccm.aws/web"
    cluster.create(
        {
            "apiVersion": "discovery.k8s.io/v1",
            "kind": "EndpointSlice",
            "metadata": {"name": "web-1", "namespace": "default", "labels": {"kubernetes.io/service-name": "web"}},
            "addressType": "IPv4",
            "endpoints": [{"addresses": ["10.0.0.10"], "conditions": {"ready": False}}],
            "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}],
        }
    )
    for i in range(5):
        cluster.create(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": f"web-{i}", "namespace": "default", "labels": {"app": "web"}},
                "spec": {
                    "containers": [{"name": "app", "image": "app:1"}],
                    "readinessGates": [{"conditionType": gate}],
                },
            }
        )

    def kube(kind: str) -> Kube:
        token = f"{kind}-token"
        return Kube(from_kubeconfig(cluster.write_kubeconfig(str(tmp_path / f"kube-{kind}"), token=token)))

    services = kube("services")
    assert [s["metadata"]["name"] for s in services.list_endpoint_slices("default", "web")] == ["web-1"]
    assert set(services.pods_by_name("default", ["web-0"], {"app": "web"})) == {"web-0"}  # GET by name
    assert len(services.pods_by_name("default", [f"web-{i}" for i in range(5)], {"app": "web"})) == 5  # LIST
    uid = services.pods_by_name("default", ["web-1"])["web-1"]["metadata"]["uid"]
    written = services.patch_pod_condition("default", "web-1", uid, {"type": gate, "status": "False"})
    assert written is not None and gate in {c["type"] for c in written["status"]["conditions"]}
    assert {e["status"] for e in cluster.request_log.snapshot() if e["user"] == LAMBDA_USER} == {200}
    for kind in ("nodes", "routes", "sweeper"):
        other = kube(kind)
        for call in (
            lambda other=other: other.list_endpoint_slices("default", "web"),
            lambda other=other: other.pods_by_name("default", ["web-0"]),
            lambda other=other: other.pods_by_name("default", [f"web-{i}" for i in range(5)], {"app": "web"}),
            lambda other=other: other.patch_pod_condition("default", "web-1", uid, {"type": gate, "status": "True"}),
        ):
            with pytest.raises(ApiError) as err:
                call()
            assert err.value.status == 403, kind
    core = core_for(cluster, tmp_path, "services-token")
    refused(lambda: core.delete_namespaced_pod("web-0", "default"))  # reads pods, writes only the gate's status
    refused(lambda: core.patch_namespaced_pod("web-0", "default", {"metadata": {"labels": {"x": "y"}}}))
    assert cluster.get("pods", "default", "web-0") is not None


def test_nodes_group_gets_exactly_its_verbs(cluster: Emulator, tmp_path: Path) -> None:
    core = core_for(cluster, tmp_path, "nodes-token")
    merge = {"_content_type": "application/merge-patch+json"}
    core.patch_node_status("n1", {"status": {"addresses": [{"type": "InternalIP", "address": "10.0.0.1"}]}}, **merge)
    core.patch_node("n1", {"metadata": {"labels": {"x": "y"}}}, **merge)
    assert core.read_node("n1").metadata.labels == {"x": "y"}
    refused(lambda: core.replace_node("n1", core.read_node("n1")))  # patch yes, update no
    refused(lambda: core.delete_collection_node())
    refused(lambda: core.read_namespaced_service("web", "default"))  # no Service access at all
    refused(lambda: core.patch_namespaced_service("web", "default", {"metadata": {"labels": {"a": "b"}}}, **merge))
    core.delete_node("n1")  # granted: terminated instances' Nodes are deleted
    assert cluster.get("nodes", None, "n1") is None


def test_routes_and_sweeper_groups_cannot_touch_the_other_kind(cluster: Emulator, tmp_path: Path) -> None:
    merge = {"_content_type": "application/merge-patch+json"}
    routes, sweeper = core_for(cluster, tmp_path, "routes-token"), core_for(cluster, tmp_path, "sweeper-token")
    assert [n.metadata.name for n in routes.list_node().items] == ["n1"]
    routes.patch_node_status("n1", {"status": {"conditions": []}}, **merge)
    status = refused(lambda: routes.patch_namespaced_service("web", "default", {"metadata": {}}, **merge))
    assert f'User "{FUNCTION_USERS["routes"]}" cannot patch resource "services"' in status["message"]
    refused(lambda: routes.patch_node("n1", {"metadata": {"labels": {"x": "y"}}}, **merge))
    refused(lambda: routes.delete_node("n1"))
    assert [s.metadata.name for s in sweeper.list_service_for_all_namespaces().items] == ["web"]
    status = refused(lambda: sweeper.delete_node("n1"))
    assert f'User "{FUNCTION_USERS["sweeper"]}" cannot delete resource "nodes"' in status["message"]
    refused(lambda: sweeper.list_node())
    refused(lambda: sweeper.patch_namespaced_service("web", "default", {"metadata": {}}, **merge))
    assert cluster.get("nodes", None, "n1") is not None


def test_unknown_and_anonymous_callers_only_see_public_paths(cluster: Emulator, tmp_path: Path) -> None:
    anonymous = core_for(cluster, tmp_path, "no-such-token")
    refused(lambda: anonymous.list_node())
    assert kubernetes.client.VersionApi(anonymous.api_client).get_code().git_version.startswith("v1.")
    admin = core_for(cluster, tmp_path, "admin-token")
    admin.delete_namespaced_service("web", "default")  # system:masters
