"""Merge, JSON and strategic-merge patch, both as functions and through the API."""

from __future__ import annotations

import kubernetes
import pytest
from kubernetes.client.rest import ApiException

from devstack.k8s_emulator.patch import PatchError, json_patch, merge_patch, strategic_merge_patch

from .conftest import Raw, service_body

MERGE = "application/merge-patch+json"
JSON = "application/json-patch+json"
SMP = "application/strategic-merge-patch+json"


def test_merge_patch_null_deletes_and_lists_replace() -> None:
    doc = {"a": {"b": 1, "c": 2}, "l": [1, 2]}
    assert merge_patch(doc, {"a": {"b": None, "d": 3}, "l": [3]}) == {"a": {"c": 2, "d": 3}, "l": [3]}
    assert doc == {"a": {"b": 1, "c": 2}, "l": [1, 2]}  # input untouched


def test_json_patch_operations() -> None:
    doc = {"a": [1, 2], "b": {"c~d": 1, "e/f": 2}}
    out = json_patch(
        doc,
        [
            {"op": "add", "path": "/a/-", "value": 3},
            {"op": "add", "path": "/a/0", "value": 0},
            {"op": "replace", "path": "/b/c~0d", "value": 9},
            {"op": "remove", "path": "/b/e~1f"},
            {"op": "copy", "from": "/a/0", "path": "/z"},
            {"op": "move", "from": "/z", "path": "/y"},
            {"op": "test", "path": "/y", "value": 0},
        ],
    )
    assert out == {"a": [0, 1, 2, 3], "b": {"c~d": 9}, "y": 0}
    with pytest.raises(PatchError):
        json_patch(doc, [{"op": "test", "path": "/a/0", "value": 42}])
    with pytest.raises(PatchError):
        json_patch(doc, [{"op": "remove", "path": "/nope"}])


def test_smp_merge_keys_and_directives() -> None:
    svc = {
        "metadata": {"finalizers": ["a", "b"], "labels": {"x": "1", "y": "2"}},
        "spec": {"ports": [{"port": 80, "name": "http"}, {"port": 443, "name": "https"}], "externalIPs": ["1.1.1.1"]},
        "status": {
            "conditions": [{"type": "A", "status": "True"}, {"type": "B", "status": "False"}],
            "loadBalancer": {"ingress": [{"ip": "1.2.3.4"}, {"ip": "5.6.7.8"}]},
        },
    }
    patch = {
        "metadata": {"finalizers": ["c"], "$deleteFromPrimitiveList/finalizers": ["a"], "labels": {"x": None}},
        "spec": {"ports": [{"port": 443, "name": "tls"}, {"port": 80, "$patch": "delete"}], "externalIPs": ["2.2.2.2"]},
        "status": {
            "conditions": [{"type": "B", "status": "True"}, {"type": "C", "status": "Unknown"}],
            "loadBalancer": {"ingress": [{"hostname": "lb.example.com"}]},
        },
    }
    out = strategic_merge_patch(svc, patch, "Service")
    # Upstream order (strategicpatch normalizeElementOrder): an item the server did not have goes first.
    assert out["metadata"] == {"finalizers": ["c", "b"], "labels": {"y": "2"}}
    assert out["spec"]["ports"] == [{"port": 443, "name": "tls"}]
    assert out["spec"]["externalIPs"] == ["2.2.2.2"]  # atomic list
    assert out["status"]["conditions"] == [
        {"type": "A", "status": "True"},
        {"type": "B", "status": "True"},
        {"type": "C", "status": "Unknown"},
    ]
    assert out["status"]["loadBalancer"]["ingress"] == [{"hostname": "lb.example.com"}]


def test_smp_replace_directive_and_set_element_order() -> None:
    doc = {"status": {"conditions": [{"type": "A"}, {"type": "B"}]}, "metadata": {"finalizers": ["x", "y"]}}
    out = strategic_merge_patch(doc, {"status": {"conditions": [{"$patch": "replace"}, {"type": "Z"}]}}, "Service")
    assert out["status"]["conditions"] == [{"type": "Z"}]
    out = strategic_merge_patch(doc, {"metadata": {"$setElementOrder/finalizers": ["y", "x"]}}, "Service")
    assert out["metadata"]["finalizers"] == ["y", "x"]
    out = strategic_merge_patch(doc, {"status": {"$patch": "replace", "phase": "x"}}, "Service")
    assert out["status"] == {"phase": "x"}


@pytest.mark.parametrize(
    ("live", "patch", "expected"),
    [
        # A new item goes before the server-only item it is compared with, i.e. first here; not appended.
        (["a", "b", "c"], ["d"], ["d", "a", "b", "c"]),
        # A patched item keeps its place among the server's items.
        (["a", "b", "c"], ["b"], ["a", "b", "c"]),
        # Patch items keep the patch's order; server-only ones the server's, interleaved by server order.
        (["a", "b", "c"], ["c", "a"], ["b", "c", "a"]),
        (["a", "b", "c"], ["d", "a"], ["d", "a", "b", "c"]),
        (["a", "b", "c"], ["b", "d"], ["a", "b", "d", "c"]),
    ],
)
def test_smp_list_order_is_upstream(live: list[str], patch: list[str], expected: list[str]) -> None:
    # k8s.io/apimachinery/pkg/util/strategicpatch mergeSlice -> normalizeElementOrder -> mergeSortedSlice; the same
    # for primitive (set) lists and lists with a merge key.
    out = strategic_merge_patch({"metadata": {"finalizers": live}}, {"metadata": {"finalizers": patch}}, "Service")
    assert out["metadata"]["finalizers"] == expected
    ports = {"spec": {"ports": [{"port": ord(x), "name": x} for x in live]}}
    out = strategic_merge_patch(ports, {"spec": {"ports": [{"port": ord(x), "name": x} for x in patch]}}, "Service")
    assert [p["name"] for p in out["spec"]["ports"]] == expected


def test_node_taints_are_atomic_addresses_merge_by_type() -> None:
    node = {
        "spec": {"taints": [{"key": "a", "effect": "NoSchedule"}, {"key": "b", "effect": "NoSchedule"}]},
        "status": {"addresses": [{"type": "InternalIP", "address": "10.0.0.1"}, {"type": "Hostname", "address": "h"}]},
    }
    out = strategic_merge_patch(
        node,
        {
            "spec": {"taints": [{"key": "c", "effect": "NoExecute"}]},
            "status": {"addresses": [{"type": "InternalIP", "address": "10.0.0.2"}]},
        },
        "Node",
    )
    assert out["spec"]["taints"] == [{"key": "c", "effect": "NoExecute"}]
    assert out["status"]["addresses"] == [
        {"type": "InternalIP", "address": "10.0.0.2"},
        {"type": "Hostname", "address": "h"},
    ]


def test_smp_finalizers_through_api(core: kubernetes.client.CoreV1Api) -> None:
    core.create_namespaced_service("default", service_body("web"))
    out = core.patch_namespaced_service("web", "default", {"metadata": {"finalizers": ["a.io/one"]}})
    out = core.patch_namespaced_service("web", "default", {"metadata": {"finalizers": ["b.io/two"]}})
    assert out.metadata.finalizers == ["b.io/two", "a.io/one"]  # upstream puts the new one first
    out = core.patch_namespaced_service(
        "web", "default", {"metadata": {"$deleteFromPrimitiveList/finalizers": ["a.io/one"]}}
    )
    assert out.metadata.finalizers == ["b.io/two"]


def test_patch_content_types_over_http(raw: Raw, core: kubernetes.client.CoreV1Api) -> None:
    core.create_namespaced_service("default", service_body("web"))
    path = "/api/v1/namespaces/default/services/web"
    status, _, body = raw.request("PATCH", path, {"metadata": {"labels": {"app": None, "k": "v"}}}, MERGE)
    assert status == 200 and body["metadata"]["labels"] == {"k": "v"}
    status, _, body = raw.request(
        "PATCH", path, [{"op": "add", "path": "/metadata/annotations", "value": {"a": "b"}}], JSON
    )
    assert status == 200 and body["metadata"]["annotations"] == {"a": "b"}
    status, _, body = raw.request("PATCH", path, [{"op": "test", "path": "/metadata/name", "value": "x"}], JSON)
    assert status == 422
    status, _, body = raw.request("PATCH", path, {"spec": {"ports": [{"port": 81, "name": "alt"}]}}, SMP)
    # Ports merge by "port": 80 stays, 81 is added (first, as upstream orders it); two ports now need names, so
    # this is invalid.
    assert status == 422 and "spec.ports[1].name" in body["message"]
    status, _, body = raw.request(
        "PATCH", path, {"spec": {"ports": [{"port": 80, "name": "http"}, {"port": 81, "name": "alt"}]}}, SMP
    )
    assert status == 200 and [p["port"] for p in body["spec"]["ports"]] == [80, 81]
    status, _, body = raw.request("PATCH", path, {"x": 1}, "text/plain")
    assert status == 415
    status, _, body = raw.request("PATCH", path, b"{not json", MERGE)
    assert status == 400


def test_json_patch_with_resource_version_test(core: kubernetes.client.CoreV1Api) -> None:
    svc = core.create_namespaced_service("default", service_body("web"))
    core.patch_namespaced_service("web", "default", {"metadata": {"labels": {"bump": "1"}}})
    with pytest.raises(ApiException) as exc:
        core.patch_namespaced_service(
            "web",
            "default",
            [
                {"op": "replace", "path": "/metadata/resourceVersion", "value": svc.metadata.resource_version},
                {"op": "add", "path": "/metadata/labels/z", "value": "1"},
            ],
        )
    assert exc.value.status == 409


def test_a_uid_in_a_patch_is_no_precondition_but_an_immutable_field(
    raw: Raw, core: kubernetes.client.CoreV1Api
) -> None:
    """kube-apiserver 1.28: a PATCH carries no UID precondition (the patch handler builds its updated-object info
    without an object), so another UID in the body is applied and refused by ValidateObjectMetaUpdate: 422 Invalid,
    `metadata.uid: ... field is immutable`, on the object and on its status. A PUT's UID is a precondition: 409."""
    svc = core.create_namespaced_service("default", service_body("web"))
    path = "/api/v1/namespaces/default/services/web"
    for target in (path, path + "/status"):
        status, _, body = raw.request("PATCH", target, {"metadata": {"uid": "other-uid"}}, MERGE)
        assert status == 422, body
        assert body["reason"] == "Invalid"
        assert (
            body["message"] == 'Service "web" is invalid: metadata.uid: Invalid value: "other-uid": field is immutable'
        )
        assert body["details"]["causes"] == [
            {
                "reason": "FieldValueInvalid",
                "message": 'Invalid value: "other-uid": field is immutable',
                "field": "metadata.uid",
            }
        ]
    status, _, body = raw.request("PATCH", path, {"metadata": {"uid": svc.metadata.uid, "labels": {"a": "b"}}}, MERGE)
    assert status == 200  # the same UID changes nothing
    live = raw.request("GET", path)[2]
    live["metadata"]["uid"] = "other-uid"
    status, _, body = raw.request("PUT", path, live)
    assert status == 409 and "Precondition failed: UID in precondition" in body["message"]


@pytest.mark.parametrize("ctype", [MERGE, JSON, SMP, "text/plain"])
def test_a_create_or_replace_sent_as_a_patch_type_is_unsupported(raw: Raw, ctype: str) -> None:
    """NegotiateInputSerializer: POST and PUT take the serializers' media types only; a patch type is 415."""
    accepted = "application/json, application/yaml, application/vnd.kubernetes.protobuf"
    status, _, body = raw.request("POST", "/api/v1/namespaces/default/services", service_body("web"), ctype)
    assert (status, body["reason"]) == (415, "UnsupportedMediaType")
    assert (
        body["message"]
        == f"the body of the request was in an unknown format - accepted media types include: {accepted}"
    )
    status, _, _ = raw.request("POST", "/api/v1/namespaces/default/services", service_body("web"))
    assert status == 201
    live = raw.request("GET", "/api/v1/namespaces/default/services/web")[2]
    status, _, body = raw.request("PUT", "/api/v1/namespaces/default/services/web", live, ctype)
    assert status == 415
