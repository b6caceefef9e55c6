"""RBAC authorisation like the real API server's, from the Role/ClusterRole/(Cluster)RoleBinding objects in the store.

Off unless ``Emulator.enable_rbac()`` is called, so tests that do not care keep full access. Authentication stays
where it is (``Emulator.tokens`` / ``token_validator``: token -> username); this module adds the username -> groups
mapping an authenticator would return (an EKS access entry's ``KubernetesGroups``, a service account's implicit
groups) and decides each request:

    rbac = emu.enable_rbac({"arn:aws:sts::1:assumed-role/fn/x": ["serverless-ccm"]})
    emu.tokens["fn-token"] = "arn:aws:sts::1:assumed-role/fn/x"
    load_objects(emu, yaml.safe_load_all(rendered))   # the ClusterRoles/Bindings of deploy/

Members of ``system:masters`` (the default admin user is one) bypass RBAC, as on a real cluster. Non-resource URLs
(discovery, /version, /openapi) are open to authenticated users, as the default ``system:discovery`` binding does.
A refusal is the real server's 403 Status: reason Forbidden, ``User "u" cannot <verb> resource "<r>" ...``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from . import resources
from .api import Response, parse_route
from .errors import ApiError
from .store import Store

if TYPE_CHECKING:
    from .emulator import Emulator

Obj = dict[str, Any]

SUPERUSER_GROUP = "system:masters"
ANONYMOUS = "system:anonymous"
PUBLIC_PATHS = frozenset({"/healthz", "/livez", "/readyz", "/version"})
_METHOD_VERBS = {"POST": "create", "PUT": "update", "PATCH": "patch", "DELETE": "delete"}


@dataclass(frozen=True)
class Attributes:
    """What RBAC decides on: who, which verb, on what (resource requests only)."""

    user: str
    groups: tuple[str, ...]
    verb: str
    api_group: str
    resource: str  # "services" or "services/status"
    namespace: str  # "" at the cluster scope
    name: str  # "" for collections


# ---------------------------------------------------------------------- pure decisions


def user_groups(user: str, extra: Sequence[str] = ()) -> tuple[str, ...]:
    """The groups an authenticator attaches: configured ones, service-account ones, authenticated/unauthenticated."""
    if user == ANONYMOUS:
        return ("system:unauthenticated",)
    groups = list(extra)
    if user.startswith("system:serviceaccount:"):
        namespace = user.split(":")[2]
        groups += ["system:serviceaccounts", f"system:serviceaccounts:{namespace}"]
    return (*groups, "system:authenticated")


# k8s.io/apiserver requestinfo.go: namespace subresources (`namespaces/<ns>/status`), not resources of their own.
_NAMESPACE_SUBRESOURCES = frozenset({"status", "finalize"})


def _unserved_attributes(
    user: str, groups: tuple[str, ...], method: str, path: str, query: Mapping[str, str]
) -> Attributes | None:
    """A resource request the emulator does not serve (`pods/eviction`, a group it lacks), parsed as the real
    server's RequestInfoFactory does from the path alone: it is authorised before routing, so a user without
    the permission gets 403, not the 404 a permitted one gets."""
    parts = [s for s in path.split("/") if s]
    if parts[:1] == ["api"] and len(parts) >= 3:
        group, rest = "", parts[2:]
    elif parts[:1] == ["apis"] and len(parts) >= 4:
        group, rest = parts[1], parts[3:]
    else:
        return None  # discovery or not under an API prefix: a non-resource request
    watch = rest[0] == "watch"
    if watch:
        rest = rest[1:]
    namespace = ""
    if rest[:1] == ["namespaces"] and len(rest) > 1:
        namespace = rest[1]
        if len(rest) > 2 and rest[2] not in _NAMESPACE_SUBRESOURCES:
            rest = rest[2:]
    if not rest:
        return None
    resource = rest[0] + (f"/{rest[2]}" if len(rest) >= 3 else "")
    name = rest[1] if len(rest) >= 2 else ""
    watch = watch or query.get("watch") in ("1", "true", "True")
    if method == "GET":
        verb = "watch" if watch else ("get" if name else "list")
    elif method == "DELETE" and not name:
        verb = "deletecollection"
    else:
        verb = _METHOD_VERBS.get(method, method.lower())
    return Attributes(user, groups, verb, group, resource, namespace, name)


def request_attributes(
    user: str, groups: tuple[str, ...], method: str, path: str, query: Mapping[str, str]
) -> Attributes | None:
    """None for a non-resource request (discovery, /version, paths outside the API prefixes)."""
    try:
        route = parse_route(path)
    except ApiError:
        return _unserved_attributes(user, groups, method, path, query)
    if isinstance(route, Response):
        return None
    is_watch = route.legacy_watch or query.get("watch") in ("1", "true", "True")
    if method == "GET":
        verb = "watch" if is_watch else ("get" if route.name else "list")
    elif method == "DELETE" and not route.name:
        verb = "deletecollection"
    else:
        verb = _METHOD_VERBS.get(method, method.lower())
    res = route.res
    resource = res.plural + (f"/{route.subresource}" if route.subresource else "")
    return Attributes(user, groups, verb, res.group, resource, route.namespace or "", route.name or "")


def _resource_matches(patterns: Iterable[str], resource: str) -> bool:
    base, _, sub = resource.partition("/")
    for pattern in patterns:
        if pattern in ("*", resource):
            return True
        if sub and pattern in (f"{base}/*", f"*/{sub}"):
            return True
    return False


def rule_allows(rule: Obj, attrs: Attributes) -> bool:
    verbs = rule.get("verbs") or []
    if "*" not in verbs and attrs.verb not in verbs:
        return False
    groups = rule.get("apiGroups") or []
    if "*" not in groups and attrs.api_group not in groups:
        return False
    if not _resource_matches(rule.get("resources") or [], attrs.resource):
        return False
    names = rule.get("resourceNames") or []
    return not names or attrs.name in names


def subject_matches(subject: Obj, attrs: Attributes, binding_namespace: str) -> bool:
    kind, name = subject.get("kind"), subject.get("name")
    if kind == "User":
        return bool(name == attrs.user)
    if kind == "Group":
        return name in attrs.groups
    if kind == "ServiceAccount":
        namespace = subject.get("namespace") or binding_namespace
        return attrs.user == f"system:serviceaccount:{namespace}:{name}"
    return False


def allowed(
    attrs: Attributes,
    cluster_roles: Mapping[str, Obj],
    roles: Mapping[tuple[str, str], Obj],
    cluster_bindings: Iterable[Obj],
    bindings: Iterable[Obj],
) -> bool:
    """RBAC is additive: allowed if any rule of any role bound to the user (or one of its groups) allows it."""
    if SUPERUSER_GROUP in attrs.groups:
        return True
    for binding in cluster_bindings:
        if _bound(binding, attrs, "") and _role_allows(binding, "", attrs, cluster_roles, roles):
            return True
    for binding in bindings:
        namespace = binding["metadata"].get("namespace", "")
        # A RoleBinding grants inside its own namespace only, even when it refers to a ClusterRole.
        if namespace != attrs.namespace or not attrs.namespace:
            continue
        if _bound(binding, attrs, namespace) and _role_allows(binding, namespace, attrs, cluster_roles, roles):
            return True
    return False


def _bound(binding: Obj, attrs: Attributes, namespace: str) -> bool:
    return any(subject_matches(s, attrs, namespace) for s in binding.get("subjects") or [])


def _role_allows(
    binding: Obj,
    namespace: str,
    attrs: Attributes,
    cluster_roles: Mapping[str, Obj],
    roles: Mapping[tuple[str, str], Obj],
) -> bool:
    ref = binding.get("roleRef") or {}
    if ref.get("kind") == "ClusterRole":
        role = cluster_roles.get(ref.get("name", ""))
    else:
        role = roles.get((namespace, ref.get("name", "")))
    return role is not None and any(rule_allows(rule, attrs) for rule in role.get("rules") or [])


def forbidden_message(attrs: Attributes) -> str:
    """The real server's wording (k8s.io/apiserver's forbidden() + the RBAC authorizer's reason)."""
    qualified = attrs.resource.split("/")[0] + (f".{attrs.api_group}" if attrs.api_group else "")
    subject = f'{qualified} "{attrs.name}"' if attrs.name else qualified
    scope = f'in the namespace "{attrs.namespace}"' if attrs.namespace else "at the cluster scope"
    return (
        f'{subject} is forbidden: User "{attrs.user}" cannot {attrs.verb} resource "{attrs.resource}" '
        f'in API group "{attrs.api_group}" {scope}'
    )


# ---------------------------------------------------------------------- edge: the store and the server


class Rbac:
    """Per-request authoriser over the RBAC objects currently in ``store``."""

    def __init__(self, store: Store, users: Mapping[str, Sequence[str]] | None = None) -> None:
        self.store = store
        self.users: dict[str, tuple[str, ...]] = {name: tuple(groups) for name, groups in (users or {}).items()}

    def _objects(self, plural: str) -> list[Obj]:
        res = next(r for r in resources.RESOURCES if r.group == "rbac.authorization.k8s.io" and r.plural == plural)
        with self.store.lock:
            return list(self.store.objects.get(res.store_key, {}).values())

    def authorize(self, user: str, method: str, path: str, query: Mapping[str, str]) -> None:
        """Raises the 403 ApiError the real server would answer with; returns if the request may go on."""
        groups = user_groups(user, self.users.get(user, ()))
        attrs = request_attributes(user, groups, method, path, query)
        if attrs is None:
            if user != ANONYMOUS or path.rstrip("/") in PUBLIC_PATHS:
                return
            raise ApiError(403, f'forbidden: User "{user}" cannot {method.lower()} path "{path}"', "Forbidden")
        cluster_roles = {o["metadata"]["name"]: o for o in self._objects("clusterroles")}
        roles = {(o["metadata"]["namespace"], o["metadata"]["name"]): o for o in self._objects("roles")}
        if allowed(attrs, cluster_roles, roles, self._objects("clusterrolebindings"), self._objects("rolebindings")):
            return
        details: Obj = {"name": attrs.name, "kind": attrs.resource.split("/")[0]}
        if attrs.api_group:
            details["group"] = attrs.api_group
        raise ApiError(403, forbidden_message(attrs), "Forbidden", details)


def load_objects(emulator: Emulator, objects: Iterable[Obj | None]) -> list[Obj]:
    """Create (or replace) each object, as a cluster admin applying manifests would (RBAC is not consulted)."""
    stored: list[Obj] = []
    for obj in objects:
        if not obj:
            continue
        res = resources.for_object(str(obj.get("apiVersion", "")), str(obj.get("kind", "")))
        if res is None:
            raise KeyError(f"unsupported object {obj.get('apiVersion')}/{obj.get('kind')}")
        meta = obj.get("metadata") or {}
        namespace = (meta.get("namespace") or "default") if res.namespaced else None
        with emulator.store.lock:
            exists = (namespace or "", meta.get("name")) in emulator.store.objects.get(res.store_key, {})
        stored.append(emulator.update(obj) if exists else emulator.create(obj))
    return stored
