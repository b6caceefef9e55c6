"""SubjectAccessReview (`POST /apis/authorization.k8s.io/v1/subjectaccessreviews`): "may this user, with these
groups, do this verb on this resource?", answered with the emulator's own RBAC decision (`rbac.allowed` over the
Role/ClusterRole/binding objects in the store). The doctor's RBAC check asks it exactly as it asks a real cluster.

As on the real server the review is evaluated for the user and groups given in the spec (no groups are added).
Without RBAC enforcement (`Emulator.enable_rbac()` not called) every review is allowed: an AlwaysAllow authoriser.
Non-resource reviews (`nonResourceAttributes`) are allowed: the emulator opens those paths to everyone.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from . import resources
from .api import Response
from .errors import ApiError
from .rbac import Attributes, allowed

if TYPE_CHECKING:
    from .emulator import Emulator

PATH = "/apis/authorization.k8s.io/v1/subjectaccessreviews"
Obj = dict[str, Any]


def _objects(emulator: Emulator, plural: str) -> list[Obj]:
    res = next(r for r in resources.RESOURCES if r.group == "rbac.authorization.k8s.io" and r.plural == plural)
    with emulator.store.lock:
        return list(emulator.store.objects.get(res.store_key, {}).values())


def decide(emulator: Emulator, spec: Obj) -> tuple[bool, str]:
    attributes = spec.get("resourceAttributes")
    if not attributes or emulator.rbac is None:
        return True, "RBAC not enforced" if emulator.rbac is None else "non-resource request"
    resource = str(attributes.get("resource", ""))
    if attributes.get("subresource"):
        resource += f"/{attributes['subresource']}"
    attrs = Attributes(
        str(spec.get("user", "")),
        tuple(spec.get("groups") or ()),
        str(attributes.get("verb", "")),
        str(attributes.get("group", "")),
        resource,
        str(attributes.get("namespace", "")),
        str(attributes.get("name", "")),
    )
    cluster_roles = {o["metadata"]["name"]: o for o in _objects(emulator, "clusterroles")}
    roles = {(o["metadata"]["namespace"], o["metadata"]["name"]): o for o in _objects(emulator, "roles")}
    ok = allowed(
        attrs, cluster_roles, roles, _objects(emulator, "clusterrolebindings"), _objects(emulator, "rolebindings")
    )
    return ok, "allowed by RBAC" if ok else "no RBAC rule allows it"


def review(emulator: Emulator, body: bytes) -> Response:
    try:
        obj = json.loads(body or b"{}")
    except ValueError as err:
        raise ApiError(400, f"invalid JSON: {err}", "BadRequest") from err
    spec = obj.get("spec") or {}
    if not spec.get("user") and not spec.get("groups"):
        raise ApiError(422, "at least one of user or group must be specified", "Invalid")
    ok, reason = decide(emulator, spec)
    status: Obj = {"allowed": ok, "reason": reason}  # RBAC never denies explicitly: no "denied"
    return Response(
        201, {"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview", "spec": spec, "status": status}
    )
