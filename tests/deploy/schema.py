"""A minimal structural schema for the kinds deploy/ ships: what the API server would reject, checked offline.

Not the OpenAPI schema (not available offline): required fields, types, names, known apiVersion/kind, and the
cross-field rules that break a Deployment or a PDB silently (selector vs. pod labels, probe ports).
"""

from __future__ import annotations

import re
from typing import Any

Obj = dict[str, Any]

# apiVersion/kind -> namespaced?
KNOWN: dict[tuple[str, str], bool] = {
    ("v1", "Namespace"): False,
    ("v1", "ServiceAccount"): True,
    ("v1", "ConfigMap"): True,
    ("v1", "Service"): True,
    ("monitoring.coreos.com/v1", "ServiceMonitor"): True,
    ("apps/v1", "Deployment"): True,
    ("policy/v1", "PodDisruptionBudget"): True,
    ("networking.k8s.io/v1", "NetworkPolicy"): True,
    ("rbac.authorization.k8s.io/v1", "ClusterRole"): False,
    ("rbac.authorization.k8s.io/v1", "ClusterRoleBinding"): False,
    ("rbac.authorization.k8s.io/v1", "Role"): True,
    ("rbac.authorization.k8s.io/v1", "RoleBinding"): True,
}
_DNS1123 = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_RBAC_KINDS = ("ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding")
_VERBS = {"get", "list", "watch", "create", "update", "patch", "delete", "deletecollection", "*"}


def errors(obj: Obj) -> list[str]:
    """Everything wrong with one object (empty when it is well-formed)."""
    api_kind = (obj.get("apiVersion", ""), obj.get("kind", ""))
    if api_kind not in KNOWN:
        return [f"unknown apiVersion/kind {api_kind}"]
    meta = obj.get("metadata") or {}
    name = meta.get("name", "")
    where = f"{api_kind[1]}/{name}"
    errs: list[str] = []
    if not name:
        errs.append(f"{where}: metadata.name is required")
    elif api_kind[1] in _RBAC_KINDS:
        if "/" in name or name in (".", ".."):
            errs.append(f"{where}: name must be a valid path segment")
    elif not (_DNS1123_LABEL if api_kind[1] == "Namespace" else _DNS1123).match(name) or len(name) > 253:
        errs.append(f"{where}: name is not a DNS-1123 name")
    if KNOWN[api_kind] != bool(meta.get("namespace")):
        errs.append(f"{where}: namespace {'missing' if KNOWN[api_kind] else 'set on a cluster-scoped object'}")
    for field in ("labels", "annotations"):
        values = meta.get(field) or {}
        if not all(isinstance(v, str) for v in values.values()):
            errs.append(f"{where}: metadata.{field} values must be strings")
    check = _CHECKS.get(api_kind[1])
    return errs + ([f"{where}: {e}" for e in check(obj)] if check else [])


def _deployment(obj: Obj) -> list[str]:
    errs: list[str] = []
    spec = obj.get("spec") or {}
    selector = (spec.get("selector") or {}).get("matchLabels") or {}
    template = spec.get("template") or {}
    pod_labels = (template.get("metadata") or {}).get("labels") or {}
    if not selector:
        errs.append("spec.selector.matchLabels is required")
    if any(pod_labels.get(k) != v for k, v in selector.items()):
        errs.append("spec.selector does not match spec.template.metadata.labels")
    containers = (template.get("spec") or {}).get("containers") or []
    if not containers:
        errs.append("spec.template.spec.containers is required")
    for c in containers:
        if not c.get("name") or not c.get("image"):
            errs.append("every container needs name and image")
        ports = {p.get("name") for p in c.get("ports") or []} | {p.get("containerPort") for p in c.get("ports") or []}
        for probe in ("livenessProbe", "readinessProbe", "startupProbe"):
            http = (c.get(probe) or {}).get("httpGet")
            if http is not None and http.get("port") not in ports:
                errs.append(f"{c.get('name')}.{probe} targets port {http.get('port')!r} the container does not expose")
    for tsc in (template.get("spec") or {}).get("topologySpreadConstraints") or []:
        if not {"maxSkew", "topologyKey", "whenUnsatisfiable"} <= set(tsc):
            errs.append("topologySpreadConstraints need maxSkew, topologyKey and whenUnsatisfiable")
    return errs


def _pdb(obj: Obj) -> list[str]:
    spec = obj.get("spec") or {}
    errs = [] if (spec.get("selector") or {}).get("matchLabels") else ["spec.selector.matchLabels is required"]
    if ("minAvailable" in spec) == ("maxUnavailable" in spec):
        errs.append("exactly one of minAvailable and maxUnavailable")
    return errs


def _role(obj: Obj) -> list[str]:
    errs: list[str] = []
    for i, rule in enumerate(obj.get("rules") or []):
        if not rule.get("verbs") or not set(rule["verbs"]) <= _VERBS:
            errs.append(f"rules[{i}].verbs missing or unknown: {rule.get('verbs')}")
        if "apiGroups" not in rule or not rule.get("resources"):
            errs.append(f"rules[{i}] needs apiGroups and resources")
    return errs


def _binding(obj: Obj) -> list[str]:
    ref = obj.get("roleRef") or {}
    errs = []
    if ref.get("apiGroup") != "rbac.authorization.k8s.io" or ref.get("kind") not in ("ClusterRole", "Role"):
        errs.append(f"roleRef is not a Role/ClusterRole: {ref}")
    if not ref.get("name"):
        errs.append("roleRef.name is required")
    subjects = obj.get("subjects") or []
    if not subjects:
        errs.append("subjects is empty")
    for s in subjects:
        if s.get("kind") not in ("User", "Group", "ServiceAccount") or not s.get("name"):
            errs.append(f"bad subject {s}")
        if s.get("kind") == "ServiceAccount" and not s.get("namespace"):
            errs.append(f"ServiceAccount subject {s.get('name')} needs a namespace")
    return errs


def _configmap(obj: Obj) -> list[str]:
    data = obj.get("data") or {}
    return [] if all(isinstance(v, str) for v in data.values()) else ["data values must be strings"]


def _network_policy(obj: Obj) -> list[str]:
    spec = obj.get("spec") or {}
    errs = [] if isinstance(spec.get("podSelector"), dict) else ["spec.podSelector is required"]
    if not set(spec.get("policyTypes") or []) <= {"Ingress", "Egress"}:
        errs.append(f"policyTypes: {spec.get('policyTypes')}")
    for rule in spec.get("ingress") or []:
        for port in rule.get("ports") or []:
            if port.get("protocol", "TCP") not in ("TCP", "UDP", "SCTP") or not isinstance(port.get("port"), int | str):
                errs.append(f"bad port {port}")
    return errs


_CHECKS = {
    "Deployment": _deployment,
    "NetworkPolicy": _network_policy,
    "PodDisruptionBudget": _pdb,
    "ClusterRole": _role,
    "Role": _role,
    "ClusterRoleBinding": _binding,
    "RoleBinding": _binding,
    "ConfigMap": _configmap,
}
