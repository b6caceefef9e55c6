"""metadata.managedFields on every write, as kube-apiserver's field manager keeps them: who (fieldManager, else the
User-Agent's product), how (Update, Apply), on what (subresource), when, and which fields (FieldsV1)."""

from __future__ import annotations

import time

import kubernetes

from devstack.k8s_emulator import Emulator
from devstack.k8s_emulator.managed_fields import from_fields_v1

from .conftest import Raw, service_body

SVC = "/api/v1/namespaces/default/services"
MERGE = "application/merge-patch+json"


def entries(obj: dict) -> dict[tuple[str, str, str], dict]:
    return {(e["manager"], e["operation"], e.get("subresource", "")): e for e in obj["metadata"]["managedFields"]}


def test_every_write_names_its_manager_operation_and_fields(raw: Raw, emu: Emulator) -> None:
    lb = service_body("web", type="LoadBalancer")
    status, _, svc = raw.request("POST", SVC, lb, headers={"User-Agent": "kubectl/v1.32.0 (linux)"})
    assert status == 201
    (created,) = svc["metadata"]["managedFields"]
    assert created["manager"] == "kubectl"  # the User-Agent up to its first "/"
    assert (created["operation"], created["apiVersion"], created["fieldsType"]) == ("Update", "v1", "FieldsV1")
    assert time.strptime(created["time"], "%Y-%m-%dT%H:%M:%SZ")
    assert ("spec", "ports") in from_fields_v1(created["fieldsV1"])
    assert not any(path[0] in ("status", "apiVersion", "kind") for path in from_fields_v1(created["fieldsV1"]))

    ingress = {"status": {"loadBalancer": {"ingress": [{"hostname": "lb.example.com"}]}}}
    status, _, svc = raw.request("PATCH", f"{SVC}/web/status", ingress, MERGE, headers={"User-Agent": "serverless-ccm"})
    mine = entries(svc)[("serverless-ccm", "Update", "status")]
    assert from_fields_v1(mine["fieldsV1"]) == {("status", "loadBalancer", "ingress")}

    labels = {"metadata": {"labels": {"team": "a"}}}
    status, _, svc = raw.request("PATCH", f"{SVC}/web?fieldManager=platform", labels, MERGE)
    assert from_fields_v1(entries(svc)[("platform", "Update", "")]["fieldsV1"]) == {("metadata", "labels", "team")}
    assert len(svc["metadata"]["managedFields"]) == 3

    # A write that changes nothing changes no entry (and, like etcd, not the resourceVersion).
    again = raw.request("PATCH", f"{SVC}/web?fieldManager=platform", labels, MERGE)[2]
    assert again["metadata"]["managedFields"] == svc["metadata"]["managedFields"]

    # A field another Update manager sets moves to it; an entry left owning nothing goes.
    raw.request("PATCH", f"{SVC}/web?fieldManager=other", {"metadata": {"labels": {"team": "b"}}}, MERGE)
    svc = emu.get("services", "default", "web")
    assert ("platform", "Update", "") not in entries(svc)
    assert from_fields_v1(entries(svc)[("other", "Update", "")]["fieldsV1"]) == {("metadata", "labels", "team")}


def test_server_side_apply_is_an_apply_entry(raw: Raw) -> None:
    body = service_body("web")
    status, _, svc = raw.request("PATCH", f"{SVC}/web?fieldManager=gitops", body, "application/apply-patch+yaml")
    assert status == 201
    assert [(e["manager"], e["operation"]) for e in svc["metadata"]["managedFields"]] == [("gitops", "Apply")]


def test_the_official_client_is_named_by_its_user_agent(core: kubernetes.client.CoreV1Api) -> None:
    svc = core.create_namespaced_service("default", service_body("web"))
    assert [m.manager for m in svc.metadata.managed_fields] == ["OpenAPI-Generator"]
