"""Resource registry and the discovery / OpenAPI documents derived from it."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import Any

SERVER_VERSION: dict[str, str] = {
    "major": "1",
    "minor": "32",
    "gitVersion": "v1.32.0",
    "gitCommit": "70d3cc986aa8221cd1dfb1121852688902d3bf53",
    "gitTreeState": "clean",
    "buildDate": "2024-12-11T17:59:15Z",
    "goVersion": "go1.23.3",
    "compiler": "gc",
    "platform": "linux/amd64",
}

_ALL_VERBS = ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"]
_SUB_VERBS = ["get", "patch", "update"]


@dataclass(frozen=True)
class Resource:
    group: str
    version: str
    plural: str
    singular: str
    kind: str
    namespaced: bool
    short_names: tuple[str, ...] = ()
    has_status: bool = False
    # Both Event APIs share one storage (as in the real server); objects are kept in core/v1 shape.
    storage: str = ""
    # DELETE answers with the object (services) rather than a Status (most other types).
    return_deleted_object: bool = False
    allow_create_on_update: bool = False
    # Extra field-selector labels besides metadata.name / metadata.namespace.
    field_labels: frozenset[str] = field(default_factory=frozenset)

    @property
    def group_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def api_version(self) -> str:
        return self.group_version

    @property
    def list_kind(self) -> str:
        return self.kind + "List"

    @property
    def store_key(self) -> str:
        return self.storage or self.plural

    @property
    def base_path(self) -> str:
        return f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"


_EVENT_FIELDS = frozenset(
    {
        "involvedObject.kind",
        "involvedObject.namespace",
        "involvedObject.name",
        "involvedObject.uid",
        "involvedObject.apiVersion",
        "involvedObject.resourceVersion",
        "involvedObject.fieldPath",
        "reason",
        "reportingComponent",
        "source",
        "type",
    }
)

RESOURCES: list[Resource] = [
    Resource(
        "",
        "v1",
        "namespaces",
        "namespace",
        "Namespace",
        False,
        ("ns",),
        has_status=True,
        field_labels=frozenset({"status.phase"}),
    ),
    Resource(
        "",
        "v1",
        "services",
        "service",
        "Service",
        True,
        ("svc",),
        has_status=True,
        return_deleted_object=True,
        allow_create_on_update=True,
    ),
    Resource(
        "",
        "v1",
        "nodes",
        "node",
        "Node",
        False,
        ("no",),
        has_status=True,
        field_labels=frozenset({"spec.unschedulable"}),
    ),
    Resource(
        "",
        "v1",
        "events",
        "event",
        "Event",
        True,
        ("ev",),
        storage="events",
        allow_create_on_update=True,
        field_labels=_EVENT_FIELDS,
    ),
    Resource(
        "events.k8s.io",
        "v1",
        "events",
        "event",
        "Event",
        True,
        ("ev",),
        storage="events",
        allow_create_on_update=True,
        field_labels=_EVENT_FIELDS,
    ),
    Resource("coordination.k8s.io", "v1", "leases", "lease", "Lease", True, (), allow_create_on_update=True),
    # Pods: validation, defaulting and graceful deletion as the pod registry does (pod_validation.py); no kubelet
    # or scheduler in the emulator (devstack.k8s_world plays them). The pod registry returns the deleted object.
    Resource(
        "",
        "v1",
        "pods",
        "pod",
        "Pod",
        True,
        ("po",),
        has_status=True,
        return_deleted_object=True,
        field_labels=frozenset(
            {
                "spec.nodeName",
                "spec.restartPolicy",
                "spec.schedulerName",
                "spec.serviceAccountName",
                "status.phase",
                "status.podIP",
                "status.nominatedNodeName",
                "spec.hostNetwork",
            }
        ),
    ),
    # discovery.k8s.io/v1 EndpointSlices (validation: endpointslice_validation.py); devstack.endpointslices plays
    # kube-controller-manager's EndpointSlice controller.
    Resource("discovery.k8s.io", "v1", "endpointslices", "endpointslice", "EndpointSlice", True),
    # Stored without controllers: enough for `kubectl apply` of deploy/ and for the RBAC authorizer (rbac.py),
    # which reads the role and binding objects from the store.
    Resource("", "v1", "serviceaccounts", "serviceaccount", "ServiceAccount", True, ("sa",)),
    Resource("", "v1", "configmaps", "configmap", "ConfigMap", True, ("cm",)),
    # Stored as given (no token controller: a test fills a service-account-token Secret, as kube-controller-manager
    # would); lets the RBAC authorizer refuse get/list of Secrets to identities that must not read them.
    Resource("", "v1", "secrets", "secret", "Secret", True, ()),
    Resource("apps", "v1", "deployments", "deployment", "Deployment", True, ("deploy",), has_status=True),
    Resource(
        "policy",
        "v1",
        "poddisruptionbudgets",
        "poddisruptionbudget",
        "PodDisruptionBudget",
        True,
        ("pdb",),
        has_status=True,
    ),
    Resource("networking.k8s.io", "v1", "networkpolicies", "networkpolicy", "NetworkPolicy", True, ("netpol",)),
    Resource("rbac.authorization.k8s.io", "v1", "clusterroles", "clusterrole", "ClusterRole", False),
    Resource(
        "rbac.authorization.k8s.io", "v1", "clusterrolebindings", "clusterrolebinding", "ClusterRoleBinding", False
    ),
    Resource("rbac.authorization.k8s.io", "v1", "roles", "role", "Role", True),
    Resource("rbac.authorization.k8s.io", "v1", "rolebindings", "rolebinding", "RoleBinding", True),
]

GROUPS: list[tuple[str, str]] = [
    ("events.k8s.io", "v1"),
    ("coordination.k8s.io", "v1"),
    ("discovery.k8s.io", "v1"),
    ("apps", "v1"),
    ("policy", "v1"),
    ("networking.k8s.io", "v1"),
    ("rbac.authorization.k8s.io", "v1"),
]


def find(group: str, version: str, plural: str) -> Resource | None:
    for res in RESOURCES:
        if res.group == group and res.version == version and res.plural == plural:
            return res
    return None


def for_object(api_version: str, kind: str) -> Resource | None:
    group, _, version = api_version.rpartition("/")
    for res in RESOURCES:
        if res.group == group and res.version == version and res.kind == kind:
            return res
    return None


def by_plural(plural: str) -> Resource | None:
    """Core-group resource first, so ``events`` means core/v1 Events."""
    for res in RESOURCES:
        if res.plural == plural:
            return res
    return None


def group_versions() -> set[tuple[str, str]]:
    return {(r.group, r.version) for r in RESOURCES}


def api_versions(server_address: str) -> dict[str, Any]:
    return {
        "kind": "APIVersions",
        "versions": ["v1"],
        "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": server_address}],
    }


def api_group_list() -> dict[str, Any]:
    groups = []
    for name, version in GROUPS:
        gv = {"groupVersion": f"{name}/{version}", "version": version}
        groups.append({"name": name, "versions": [gv], "preferredVersion": gv})
    return {"kind": "APIGroupList", "apiVersion": "v1", "groups": groups}


def api_group(name: str) -> dict[str, Any] | None:
    for group, version in GROUPS:
        if group == name:
            gv = {"groupVersion": f"{group}/{version}", "version": version}
            return {"kind": "APIGroup", "apiVersion": "v1", "name": group, "versions": [gv], "preferredVersion": gv}
    return None


def resource_list(group: str, version: str) -> dict[str, Any]:
    resources: list[dict[str, Any]] = []
    for res in RESOURCES:
        if res.group != group or res.version != version:
            continue
        entry: dict[str, Any] = {
            "name": res.plural,
            "singularName": res.singular,
            "namespaced": res.namespaced,
            "kind": res.kind,
            "verbs": _ALL_VERBS,
        }
        if res.short_names:
            entry["shortNames"] = list(res.short_names)
        resources.append(entry)
        if res.has_status:
            resources.append(
                {
                    "name": f"{res.plural}/status",
                    "singularName": "",
                    "namespaced": res.namespaced,
                    "kind": res.kind,
                    "verbs": _SUB_VERBS,
                }
            )
    return {
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": f"{group}/{version}" if group else version,
        "resources": resources,
    }


def _openapi_key(group: str, version: str) -> str:
    return f"apis/{group}/{version}" if group else f"api/{version}"


def _operation(res: Resource, verb: str) -> dict[str, Any]:
    # kubectl only inspects PATCH operations: their GVK extension and whether "fieldValidation"
    # is a parameter decides that it may leave validation to the server (no client-side schema).
    return {
        "operationId": f"{verb}{res.kind}",
        "parameters": [
            {"name": "fieldValidation", "in": "query", "schema": {"type": "string", "uniqueItems": True}},
            {"name": "fieldManager", "in": "query", "schema": {"type": "string", "uniqueItems": True}},
            {"name": "dryRun", "in": "query", "schema": {"type": "string", "uniqueItems": True}},
        ],
        "responses": {"200": {"description": "OK"}},
        "x-kubernetes-action": verb,
        "x-kubernetes-group-version-kind": {"group": res.group, "version": res.version, "kind": res.kind},
    }


def openapi_v3_doc(group: str, version: str) -> dict[str, Any]:
    paths: dict[str, Any] = {}
    for res in RESOURCES:
        if res.group != group or res.version != version:
            continue
        prefix = res.base_path + ("/namespaces/{namespace}" if res.namespaced else "")
        paths[f"{prefix}/{res.plural}"] = {"post": _operation(res, "post")}
        item = {
            "get": _operation(res, "get"),
            "put": _operation(res, "put"),
            "patch": _operation(res, "patch"),
            "delete": _operation(res, "delete"),
        }
        paths[f"{prefix}/{res.plural}/{{name}}"] = item
        if res.has_status:
            paths[f"{prefix}/{res.plural}/{{name}}/status"] = {"patch": _operation(res, "patch")}
    return {
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes", "version": SERVER_VERSION["gitVersion"]},
        "paths": paths,
        "components": {"schemas": {}},
    }


def openapi_v3_index() -> dict[str, Any]:
    paths: dict[str, Any] = {}
    for group, version in sorted(group_versions()):
        key = _openapi_key(group, version)
        digest = hashlib.sha256(json.dumps(openapi_v3_doc(group, version), sort_keys=True).encode()).hexdigest()
        paths[key] = {"serverRelativeURL": f"/openapi/v3/{key}?hash={digest[:32].upper()}"}
    return {"paths": paths}


def openapi_v3_lookup(key: str) -> dict[str, Any] | None:
    for group, version in group_versions():
        if _openapi_key(group, version) == key:
            return openapi_v3_doc(group, version)
    return None
