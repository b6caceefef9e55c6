"""CRUD semantics through the real kubernetes client and raw HTTP."""

from __future__ import annotations

import kubernetes
import pytest
from kubernetes.client.rest import ApiException

from devstack.k8s_emulator import Emulator

from .conftest import Raw, service_body


def test_load_kube_config_and_discovery(emu: Emulator, kubeconfig: str) -> None:
    kubernetes.config.load_kube_config(config_file=kubeconfig)
    version = kubernetes.client.VersionApi().get_code()
    assert version.git_version == "v1.32.0"
    groups = {g.name for g in kubernetes.client.ApisApi().get_api_versions().groups}
    assert groups == {
        "events.k8s.io",
        "coordination.k8s.io",
        "discovery.k8s.io",
        "apps",
        "policy",
        "rbac.authorization.k8s.io",
        "networking.k8s.io",
    }
    names = {r.name for r in kubernetes.client.CoreV1Api().get_api_resources().resources}
    assert {"namespaces", "services", "services/status", "nodes", "nodes/status", "events"} <= names
    namespaces = {n.metadata.name for n in kubernetes.client.CoreV1Api().list_namespace().items}
    assert namespaces == {"default", "kube-system"}


def test_create_sets_metadata_and_resource_versions_increase(core: kubernetes.client.CoreV1Api) -> None:
    first = core.create_namespaced_service("default", service_body("a"))
    second = core.create_namespaced_service("default", service_body("b"))
    assert first.metadata.uid and first.metadata.uid != second.metadata.uid
    assert first.metadata.generation == 1
    assert first.metadata.creation_timestamp is not None
    assert int(second.metadata.resource_version) > int(first.metadata.resource_version)
    listed = core.list_namespaced_service("default")
    assert int(listed.metadata.resource_version) >= int(second.metadata.resource_version)
    assert sorted(s.metadata.name for s in listed.items) == ["a", "b"]
    got = core.read_namespaced_service("a", "default")
    assert got.metadata.resource_version == first.metadata.resource_version


def test_already_exists_and_not_found(core: kubernetes.client.CoreV1Api) -> None:
    core.create_namespaced_service("default", service_body("dup"))
    with pytest.raises(ApiException) as exc:
        core.create_namespaced_service("default", service_body("dup"))
    assert exc.value.status == 409
    assert '"reason":"AlreadyExists"' in exc.value.body.replace(" ", "")
    with pytest.raises(ApiException) as exc:
        core.read_namespaced_service("missing", "default")
    assert exc.value.status == 404
    with pytest.raises(ApiException) as exc:
        core.create_namespaced_service("nope", service_body("x"))
    assert exc.value.status == 404
    assert 'namespaces \\"nope\\" not found' in exc.value.body or 'namespaces "nope" not found' in exc.value.body


def test_generate_name(core: kubernetes.client.CoreV1Api) -> None:
    body = service_body("ignored")
    body["metadata"] = {"generateName": "gen-"}
    created = core.create_namespaced_service("default", body)
    assert created.metadata.name.startswith("gen-") and len(created.metadata.name) == len("gen-") + 5
    assert created.metadata.generate_name == "gen-"


def test_put_with_stale_resource_version_conflicts(core: kubernetes.client.CoreV1Api) -> None:
    svc = core.create_namespaced_service("default", service_body("web"))
    svc.metadata.labels["v"] = "1"
    updated = core.replace_namespaced_service("web", "default", svc)  # svc still carries the old RV
    assert updated.metadata.labels["v"] == "1"
    assert int(updated.metadata.resource_version) > int(svc.metadata.resource_version)
    svc.metadata.labels["v"] = "2"
    with pytest.raises(ApiException) as exc:
        core.replace_namespaced_service("web", "default", svc)
    assert exc.value.status == 409
    assert "the object has been modified" in exc.value.body


def test_patch_with_stale_resource_version_conflicts(core: kubernetes.client.CoreV1Api) -> None:
    svc = core.create_namespaced_service("default", service_body("web"))
    old_rv = svc.metadata.resource_version
    core.patch_namespaced_service("web", "default", {"metadata": {"labels": {"x": "1"}}})
    with pytest.raises(ApiException) as exc:
        core.patch_namespaced_service("web", "default", {"metadata": {"resourceVersion": old_rv, "labels": {"x": "2"}}})
    assert exc.value.status == 409
    current = core.read_namespaced_service("web", "default")
    ok = core.patch_namespaced_service(
        "web", "default", {"metadata": {"resourceVersion": current.metadata.resource_version, "labels": {"x": "3"}}}
    )
    assert ok.metadata.labels["x"] == "3"


def test_generation_bumps_only_on_spec_change(core: kubernetes.client.CoreV1Api) -> None:
    core.create_namespaced_service("default", service_body("web"))
    labelled = core.patch_namespaced_service("web", "default", {"metadata": {"labels": {"a": "b"}}})
    assert labelled.metadata.generation == 1
    changed = core.patch_namespaced_service("web", "default", {"spec": {"sessionAffinity": "ClientIP"}})
    assert changed.metadata.generation == 2


def test_noop_update_does_not_bump_resource_version(core: kubernetes.client.CoreV1Api, emu: Emulator) -> None:
    svc = core.create_namespaced_service("default", service_body("web"))
    same = core.patch_namespaced_service("web", "default", {"metadata": {"labels": {"app": "web"}}})
    assert same.metadata.resource_version == svc.metadata.resource_version


def test_put_name_mismatch_is_bad_request(raw: Raw, core: kubernetes.client.CoreV1Api) -> None:
    core.create_namespaced_service("default", service_body("web"))
    status, _, body = raw.request("PUT", "/api/v1/namespaces/default/services/web", service_body("other"))
    assert status == 400 and body["reason"] == "BadRequest"


def test_put_creates_missing_service_like_real_server(raw: Raw) -> None:
    status, _, body = raw.request("PUT", "/api/v1/namespaces/default/services/fresh", service_body("fresh"))
    assert status == 201 and body["spec"]["clusterIP"].startswith("10.96.")


def test_delete_returns_object_for_services_and_status_for_nodes(core: kubernetes.client.CoreV1Api) -> None:
    core.create_namespaced_service("default", service_body("web"))
    deleted = core.delete_namespaced_service("web", "default")
    deleted = deleted if isinstance(deleted, dict) else core.api_client.sanitize_for_serialization(deleted)
    assert deleted["kind"] == "Service" and deleted["metadata"]["name"] == "web"
    core.create_node({"metadata": {"name": "n1"}})
    status = core.delete_node("n1")
    assert status["kind"] == "Status" and status["status"] == "Success" and status["details"]["name"] == "n1"
    with pytest.raises(ApiException) as exc:
        core.delete_node("n1")
    assert exc.value.status == 404


def test_delete_precondition(raw: Raw, core: kubernetes.client.CoreV1Api) -> None:
    core.create_namespaced_service("default", service_body("web"))
    status, _, body = raw.request(
        "DELETE", "/api/v1/namespaces/default/services/web", {"preconditions": {"uid": "not-the-uid"}}
    )
    assert status == 409 and "Precondition failed" in body["message"]


def test_list_all_namespaces_and_unknown_paths(raw: Raw, core: kubernetes.client.CoreV1Api) -> None:
    core.create_namespace({"metadata": {"name": "team"}})
    core.create_namespaced_service("default", service_body("a"))
    core.create_namespaced_service("team", service_body("b"))
    everything = core.list_service_for_all_namespaces()
    assert sorted((s.metadata.namespace, s.metadata.name) for s in everything.items) == [
        ("default", "a"),
        ("team", "b"),
    ]
    status, _, body = raw.request("GET", "/api/v1/replicationcontrollers")
    assert status == 404 and body["kind"] == "Status"
    status, _, body = raw.request("POST", "/api/v1/services", service_body("c"))
    assert status == 405


def test_list_items_omit_type_meta_like_real_server(raw: Raw, core: kubernetes.client.CoreV1Api) -> None:
    core.create_namespaced_service("default", service_body("a"))
    _, _, body = raw.request("GET", "/api/v1/namespaces/default/services")
    assert body["kind"] == "ServiceList" and body["apiVersion"] == "v1"
    assert "kind" not in body["items"][0]


def test_namespace_deletion_cascades(core: kubernetes.client.CoreV1Api, emu: Emulator) -> None:
    core.create_namespace({"metadata": {"name": "doomed"}})
    core.create_namespaced_service("doomed", service_body("a"))
    assert emu.get("namespaces", None, "doomed")["metadata"]["labels"]["kubernetes.io/metadata.name"] == "doomed"
    core.delete_namespace("doomed")
    assert emu.get("namespaces", None, "doomed") is None
    assert emu.get("services", "doomed", "a") is None


def test_direct_store_access(emu: Emulator, core: kubernetes.client.CoreV1Api) -> None:
    created = emu.create(service_body("seeded"))
    assert created["spec"]["clusterIP"].startswith("10.96.")
    assert core.read_namespaced_service("seeded", "default").spec.cluster_ip == created["spec"]["clusterIP"]
    emu.create({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "node-1"}})
    node = emu.get("nodes", None, "node-1")
    assert node is not None and node["metadata"]["uid"]
    assert emu.get("services", "default", "absent") is None


def test_concurrent_creates_are_serialised(emu: Emulator) -> None:
    import threading

    raw = Raw(emu)
    results: list[tuple[int, dict]] = []
    lock = threading.Lock()

    def worker(n: int) -> None:
        for i in range(8):
            status, _, body = raw.request(
                "POST", "/api/v1/namespaces/default/services", service_body(f"s{n}-{i}", type="NodePort")
            )
            with lock:
                results.append((status, body))

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(20)
    assert [s for s, _ in results] == [201] * 48
    rvs = [int(b["metadata"]["resourceVersion"]) for _, b in results]
    node_ports = [b["spec"]["ports"][0]["nodePort"] for _, b in results]
    ips = [b["spec"]["clusterIP"] for _, b in results]
    assert len(set(rvs)) == len(set(node_ports)) == len(set(ips)) == 48


def test_delete_collection_by_label(raw: Raw, emu: Emulator) -> None:
    for name, tier in [("a", "x"), ("b", "x"), ("c", "y")]:
        body = service_body(name)
        body["metadata"]["labels"] = {"tier": tier}
        emu.create(body)
    status, _, body = raw.request("DELETE", "/api/v1/namespaces/default/services?labelSelector=tier%3Dx")
    assert status == 200 and sorted(i["metadata"]["name"] for i in body["items"]) == ["a", "b"]
    assert [s["metadata"]["name"] for s in emu.list("services", "default")] == ["c"]
