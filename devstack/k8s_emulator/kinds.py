"""Per-kind create/update hooks, and the events.k8s.io/v1 <-> core/v1 Event conversion."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any, Final

from . import defaults, endpointslice_validation, pod_validation
from .errors import FieldError, forbidden, invalid, invalid_error, required
from .resources import Resource
from .validation import dns1123_subdomain, qualified_name, validate_metadata

Obj = dict[str, Any]
Siblings = Callable[[], list[Obj]]

NAME_RULES = {
    "Service": "dns1035",
    "Namespace": "dns1123label",
    "Node": "dns1123subdomain",
    "Event": "path",
    "Lease": "dns1123subdomain",
    # RBAC objects only need a valid path segment (names like "system:controller:x" are common).
    "ClusterRole": "path",
    "ClusterRoleBinding": "path",
    "Role": "path",
    "RoleBinding": "path",
}

# events.k8s.io/v1 field -> core/v1 field (the real server stores one type and converts).
_EVENT_RENAMES = [
    ("regarding", "involvedObject"),
    ("note", "message"),
    ("reportingController", "reportingComponent"),
    ("deprecatedSource", "source"),
    ("deprecatedFirstTimestamp", "firstTimestamp"),
    ("deprecatedLastTimestamp", "lastTimestamp"),
    ("deprecatedCount", "count"),
]


def to_storage(res: Resource, obj: Obj) -> Obj:
    if res.group != "events.k8s.io":
        return obj
    out = copy.deepcopy(obj)
    for new, old in _EVENT_RENAMES:
        if new in out:
            out[old] = out.pop(new)
    out["apiVersion"], out["kind"] = "v1", "Event"
    return out


def from_storage(res: Resource, obj: Obj) -> Obj:
    if res.group != "events.k8s.io":
        return obj
    out = copy.deepcopy(obj)
    for new, old in _EVENT_RENAMES:
        if old in out:
            value = out.pop(old)
            if value not in (None, {}, "", 0) or new == "note":
                out[new] = value
    out["apiVersion"], out["kind"] = "events.k8s.io/v1", "Event"
    return out


def _validate_event(res: Resource, event: Obj) -> list[FieldError]:
    """Mirrors ValidateEventCreate: legacy checks for every request, strict ones for events.k8s.io/v1."""
    errs: list[FieldError] = []
    ns = (event.get("metadata") or {}).get("namespace", "")
    involved = event.get("involvedObject") or {}
    is_v1 = res.group == "events.k8s.io"
    controller_field = "reportingController" if is_v1 else "reportingComponent"
    # A null namespace decodes to "" in Go: accepted like an absent one (cluster-scoped objects such as Nodes).
    involved_ns = involved.get("namespace") or ""
    if not event.get("eventTime"):
        if involved_ns == "":
            if ns not in ("", "default"):
                errs.append(invalid("involvedObject.namespace", "", "does not match event.namespace"))
        elif involved_ns != ns:
            errs.append(invalid("involvedObject.namespace", involved_ns, "does not match event.namespace"))
    else:
        if involved_ns == "" and ns not in ("default", "kube-system"):
            errs.append(invalid("involvedObject.namespace", "", "does not match event.namespace"))
        controller = event.get("reportingComponent")
        if not controller:
            errs.append(required(controller_field))
        elif (msg := qualified_name(controller)) is not None:
            errs.append(invalid(controller_field, controller, msg))
        if not event.get("reportingInstance"):
            errs.append(required("reportingInstance"))
        if not event.get("action"):
            errs.append(required("action"))
        if not event.get("reason"):
            errs.append(required("reason"))
        if len(str(event.get("message") or "")) > 1024:
            errs.append(invalid("note" if is_v1 else "message", "...", "can have at most 1024 characters"))
    if not is_v1:
        return errs
    # Strict validation only applies to creation through events.k8s.io/v1.
    name = (event.get("metadata") or {}).get("name", "")
    if name and (msg := dns1123_subdomain(name)) is not None:
        errs.append(invalid("metadata.name", name, msg))
    if not event.get("eventTime"):
        errs.append(required("eventTime"))
    if event.get("type") not in ("Normal", "Warning"):
        errs.append(invalid("type", "", f"has invalid value: {event.get('type') or ''}"))
    for stored, v1_name in (
        ("firstTimestamp", "deprecatedFirstTimestamp"),
        ("lastTimestamp", "deprecatedLastTimestamp"),
        ("count", "deprecatedCount"),
    ):
        if event.get(stored):
            errs.append(invalid(v1_name, "", "needs to be unset"))
    source = event.get("source") or {}
    if source.get("component") or source.get("host"):
        errs.append(invalid("deprecatedSource", "", "needs to be unset"))
    return errs


def _validate_node_update(node: Obj, old: Obj) -> list[FieldError]:
    """ValidateNodeUpdate: providerID and podCIDRs may only go from unset to a value (the node IPAM and cloud
    controllers rely on it)."""
    errs: list[FieldError] = []
    spec, old_spec = node.get("spec") or {}, old.get("spec") or {}
    if old_spec.get("providerID") and old_spec.get("providerID") != spec.get("providerID"):
        errs.append(forbidden("spec.providerID", 'node updates may not change providerID except from "" to valid'))
    old_cidrs = old_spec.get("podCIDRs") or []
    if old_cidrs and list(spec.get("podCIDRs") or []) != list(old_cidrs):
        errs.append(forbidden("spec.podCIDRs", 'node updates may not change podCIDR except from "" to valid'))
    return errs


def _validate(res: Resource, obj: Obj, old: Obj | None) -> None:
    meta = obj.get("metadata") or {}
    errs = validate_metadata(meta, NAME_RULES.get(res.kind, "dns1123subdomain"))
    if old is not None:
        added = set(meta.get("finalizers") or []) - set((old.get("metadata") or {}).get("finalizers") or [])
        if (old.get("metadata") or {}).get("deletionTimestamp") and added:
            errs.append(
                invalid(
                    "metadata.finalizers",
                    sorted(added),
                    "no new finalizers can be added if the object is being deleted",
                )
            )
    if res.kind == "Event" and old is None:
        errs += _validate_event(res, obj)
    if res.kind == "Node" and old is not None:
        errs += _validate_node_update(obj, old)
    if res.kind == "Pod":
        errs += pod_validation.validate_spec(obj)
        if old is not None:
            errs += pod_validation.validate_update(obj, old)
    if res.kind == "EndpointSlice":
        errs += endpointslice_validation.validate(obj, old)
    if res.kind == "Lease":
        duration = (obj.get("spec") or {}).get("leaseDurationSeconds")
        if duration is not None and (not isinstance(duration, int) or duration <= 0):
            errs.append(invalid("spec.leaseDurationSeconds", duration, "must be greater than 0"))
    if errs:
        raise invalid_error(res.kind, res.group, meta.get("name", ""), errs)


def prepare_create(res: Resource, obj: Obj, siblings: Siblings, families: tuple[str, ...] = ("IPv4",)) -> None:
    if res.kind == "Namespace":
        name = obj["metadata"].get("name", "")
        obj["metadata"].setdefault("labels", {})["kubernetes.io/metadata.name"] = name
        obj["spec"] = {"finalizers": ["kubernetes"]}
        obj["status"] = {"phase": "Active"}
    if res.kind == "Pod":
        pod_validation.prepare_create(obj)
    if res.kind == "EndpointSlice":
        endpointslice_validation.apply_defaults(obj)
    _validate(res, obj, None)
    if res.kind == "Service":
        defaults.prepare_create(obj, siblings(), families)
    if res.kind == "Node":
        _taint_not_ready(obj)
    omit_empty(res, obj)


NOT_READY_TAINT: Final = {"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule"}


def _taint_not_ready(node: Obj) -> None:
    """Admission plugin TaintNodesByCondition (on by default): every Node is created with the not-ready NoSchedule
    taint, whatever its conditions say; it stays until something removes it (the node lifecycle controller, once
    the node is Ready)."""
    taints = node.setdefault("spec", {}).setdefault("taints", [])
    if not any(t.get("key") == NOT_READY_TAINT["key"] and t.get("effect") == "NoSchedule" for t in taints):
        taints.append(dict(NOT_READY_TAINT))


def prepare_update(
    res: Resource,
    new: Obj,
    old: Obj,
    siblings: Siblings,
    subresource: str | None,
    families: tuple[str, ...] = ("IPv4",),
) -> Obj:
    """Returns the object to store. ``new`` already carries the system metadata of ``old``."""
    if subresource == "status":
        if res.kind in _STATUS_KEEPS_METADATA:
            # serviceStatusStrategy / nodeStatusStrategy / namespaceStatusStrategy.PrepareForUpdate only put the old
            # spec back: metadata changes sent to /status are kept (and validated like any metadata update).
            result = {k: copy.deepcopy(v) for k, v in new.items() if k in ("metadata", "status", "apiVersion", "kind")}
            result.update({k: copy.deepcopy(v) for k, v in old.items() if k not in result and k != "status"})
            result["status"] = copy.deepcopy(new.get("status") or {})
            if res.kind == "Namespace":
                result["metadata"].setdefault("labels", {})["kubernetes.io/metadata.name"] = new["metadata"]["name"]
            _validate(res, result, old)
        else:
            # Only status is taken from the request; everything else stays as stored.
            result = copy.deepcopy(old)
            result["status"] = copy.deepcopy(new.get("status") or {})
        if res.kind == "Service":
            defaults.validate_status(result)
        if res.kind == "Pod":
            errs = pod_validation.validate_status(result, old)
            if errs:
                raise invalid_error(res.kind, res.group, result["metadata"].get("name", ""), errs)
        return omit_empty(res, result)
    if res.has_status:
        new["status"] = copy.deepcopy(old.get("status"))
        if new["status"] is None:
            new.pop("status")
    if res.kind == "Namespace":
        new["metadata"].setdefault("labels", {})["kubernetes.io/metadata.name"] = new["metadata"]["name"]
        new["spec"] = copy.deepcopy(old.get("spec") or {})
    if res.kind == "Pod":
        pod_validation.apply_defaults(new)
    if res.kind == "EndpointSlice":
        endpointslice_validation.apply_defaults(new)
    _validate(res, new, old)
    if res.kind == "Service":
        defaults.prepare_update(new, old, siblings(), families)
    return omit_empty(res, new)


# Kinds whose status strategy keeps metadata changes (the others, e.g. apps/v1, are not modelled that far).
_STATUS_KEEPS_METADATA = frozenset({"Service", "Node", "Namespace", "Pod"})
# `omitempty` lists and maps of the Go types: an empty one is not stored or returned (`finalizers: []` reads back
# as absent, as from the real server). Structs such as Service status.loadBalancer are never omitted.
_OMIT_EMPTY: dict[str, tuple[tuple[str, ...], ...]] = {
    "*": (
        ("metadata", "finalizers"),
        ("metadata", "labels"),
        ("metadata", "annotations"),
        ("metadata", "ownerReferences"),
    ),
    "Service": (
        ("spec", "ports"),
        ("spec", "selector"),
        ("spec", "externalIPs"),
        ("spec", "loadBalancerSourceRanges"),
        ("status", "loadBalancer", "ingress"),
        ("status", "conditions"),
    ),
    "Pod": (
        ("spec", "readinessGates"),
        ("spec", "tolerations"),
        ("spec", "nodeSelector"),
        ("status", "conditions"),
        ("status", "podIPs"),
        ("status", "containerStatuses"),
    ),
    "Node": (
        ("spec", "taints"),
        ("spec", "podCIDRs"),
        ("status", "conditions"),
        ("status", "addresses"),
        ("status", "images"),
        ("status", "volumesAttached"),
        ("status", "volumesInUse"),
    ),
}


def omit_empty(res: Resource, obj: Obj) -> Obj:
    for path in (*_OMIT_EMPTY["*"], *_OMIT_EMPTY.get(res.kind, ())):
        parent: Any = obj
        for part in path[:-1]:
            parent = parent.get(part) if isinstance(parent, dict) else None
        if isinstance(parent, dict) and path[-1] in parent and parent[path[-1]] in ([], {}, None):
            del parent[path[-1]]
    return obj
