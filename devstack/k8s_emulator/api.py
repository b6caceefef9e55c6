"""Kubernetes REST semantics, independent of the HTTP plumbing in server.py."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from . import kinds, resources, tables
from .bodies import decode_body, require_object_media_type
from .errors import ApiError, bad_request, field_manager_required, invalid_error, too_large_rv
from .managed_fields import Writer, writer_of
from .patch import MalformedPatch, PatchError, json_patch, merge_patch, strategic_merge_patch
from .resources import Resource
from .selectors import make_filter, parse_field_selector, parse_label_selector
from .store import Store
from .watch import Watcher

Obj = dict[str, Any]

PATCH_TYPES = (
    "application/merge-patch+json",
    "application/json-patch+json",
    "application/strategic-merge-patch+json",
    "application/apply-patch+yaml",
)


@dataclass
class Request:
    method: str
    path: str
    query: dict[str, str]
    accept: str = "application/json"
    content_type: str = "application/json"
    body: bytes = b""
    user_agent: str = ""

    def writer(self, apply: bool = False) -> Writer:
        """Who writes, as the managedFields entry names it."""
        return writer_of(self.query.get("fieldManager"), self.user_agent, apply)


@dataclass
class Response:
    status: int
    body: Any
    headers: dict[str, str] = field(default_factory=dict)


@dataclass
class WatchStream:
    res: Resource
    watcher: Watcher
    timeout: float | None
    bookmarks: bool
    table: bool
    include: str


@dataclass
class Route:
    res: Resource
    namespace: str | None
    name: str | None
    subresource: str | None
    legacy_watch: bool


def _truthy(value: str | None) -> bool:
    return value in ("1", "true", "True")


def parse_route(path: str) -> Route | Response:
    segs = [s for s in path.split("/") if s]
    if segs[:1] == ["api"] and len(segs) >= 2:
        group, version, rest = "", segs[1], segs[2:]
    elif segs[:1] == ["apis"] and len(segs) >= 3:
        group, version, rest = segs[1], segs[2], segs[3:]
    else:
        raise ApiError(404, "the server could not find the requested resource", "NotFound")
    if (group, version) not in resources.group_versions():
        raise ApiError(404, "the server could not find the requested resource", "NotFound")
    if not rest:
        return Response(200, resources.resource_list(group, version))
    legacy_watch = rest[0] == "watch"
    if legacy_watch:
        rest = rest[1:]
    namespace = None
    if len(rest) >= 3 and rest[0] == "namespaces":
        nested = resources.find(group, version, rest[2])
        if nested is not None and nested.namespaced:
            namespace, rest = rest[1], rest[2:]
    res = resources.find(group, version, rest[0]) if rest else None
    if (
        res is None
        or len(rest) > 3
        or (res.namespaced and namespace is None and len(rest) > 1)
        or (not res.namespaced and namespace is not None)
    ):
        raise ApiError(404, "the server could not find the requested resource", "NotFound")
    name = rest[1] if len(rest) > 1 else None
    sub = rest[2] if len(rest) > 2 else None
    if sub is not None and (sub != "status" or not res.has_status):
        raise ApiError(404, "the server could not find the requested resource", "NotFound")
    return Route(res, namespace, name, sub, legacy_watch)


def dry_run(req: Request, options: Obj | None = None) -> bool:
    """``dryRun=All`` (the only value the real server knows) runs a write without persisting it. DELETE may carry
    it in its DeleteOptions body instead (kubectl does)."""
    values = [req.query["dryRun"]] if req.query.get("dryRun") else list((options or {}).get("dryRun") or [])
    for value in values:
        if value != "All":
            raise bad_request(f"Invalid dry run value: {value}; supported values are: [All]")
    return bool(values)


def _grace(req: Request, options: Obj) -> int | None:
    """DeleteOptions.gracePeriodSeconds, from the body (kubectl, the Python client) or the query string."""
    value = options.get("gracePeriodSeconds", req.query.get("gracePeriodSeconds"))
    if value is None or value == "":
        return None
    try:
        return int(value)
    except (TypeError, ValueError) as exc:
        raise bad_request(f"invalid gracePeriodSeconds {value!r}") from exc


class Api:
    def __init__(self, store: Store, server_address: str) -> None:
        self.store = store
        self.server_address = server_address

    # ------------------------------------------------------------------ entry point

    def handle(self, req: Request) -> Response | WatchStream:
        if discovery := self._discovery(req):
            return discovery
        route = parse_route(req.path)
        if isinstance(route, Response):
            return route
        res = route.res
        if route.name is None:
            if req.method == "GET":
                watch = route.legacy_watch or _truthy(req.query.get("watch"))
                return self._watch(route, req) if watch else self._list(route, req)
            if req.method == "POST":
                if res.namespaced and route.namespace is None:
                    raise ApiError(405, "the server does not allow this method on the requested resource")
                return self._create(route, req)
            if req.method == "DELETE":
                return self._delete_collection(route, req)
            raise ApiError(405, "the server does not allow this method on the requested resource")
        if req.method == "GET":
            if route.legacy_watch or _truthy(req.query.get("watch")):
                req.query["fieldSelector"] = f"metadata.name={route.name}"
                return self._watch(route, req)
            obj = self.store.get(res, route.namespace, route.name)
            return self._object_response(200, res, obj, req)
        if req.method == "PUT":
            return self._update(route, req)
        if req.method == "PATCH":
            return self._patch(route, req)
        if req.method == "DELETE" and route.subresource is None:
            return self._delete(route, req)
        raise ApiError(405, "the server does not allow this method on the requested resource")

    def _discovery(self, req: Request) -> Response | None:
        path = req.path.rstrip("/") or "/"
        if req.method != "GET":
            return None
        if path in ("/healthz", "/readyz", "/livez"):
            return Response(200, "ok")
        if path == "/version":
            return Response(200, resources.SERVER_VERSION)
        if path == "/api":
            return Response(200, resources.api_versions(self.server_address))
        if path == "/apis":
            return Response(200, resources.api_group_list())
        if path.startswith("/apis/") and path.count("/") == 2:
            group = resources.api_group(path.split("/")[2])
            if group is None:
                raise ApiError(404, "the server could not find the requested resource", "NotFound")
            return Response(200, group)
        if path == "/openapi/v3":
            return Response(200, resources.openapi_v3_index())
        if path.startswith("/openapi/v3/"):
            doc = resources.openapi_v3_lookup(path[len("/openapi/v3/") :])
            if doc is None:
                raise ApiError(404, "the server could not find the requested resource", "NotFound")
            return Response(200, doc)
        if path == "/openapi/v2":
            raise ApiError(404, "the server could not find the requested resource", "NotFound")
        return None

    # ------------------------------------------------------------------ helpers

    def _out(self, res: Resource, obj: Obj) -> Obj:
        return kinds.from_storage(res, obj)

    def _object_response(self, status: int, res: Resource, obj: Obj, req: Request) -> Response:
        out = self._out(res, obj)
        if tables.wants_table(req.accept):
            meta = {"resourceVersion": obj["metadata"].get("resourceVersion", "")}
            return Response(status, tables.to_table(res, [out], meta, req.query.get("includeObject", "Metadata")))
        return Response(status, out)

    def _filter(self, res: Resource, req: Request) -> tuple[Any, bool]:
        labels = parse_label_selector(req.query.get("labelSelector"))
        fields = parse_field_selector(req.query.get("fieldSelector"), res.field_labels)
        return make_filter(labels, fields), bool(labels or fields)

    def _body_object(self, res: Resource, req: Request) -> Obj:
        require_object_media_type(req)
        body = decode_body(req)
        if not isinstance(body, dict):
            raise bad_request(
                "the body of the request was in an unknown format - accepted media types include: "
                "application/json, application/yaml"
            )
        if body.get("kind") and (
            body.get("kind") != res.kind or body.get("apiVersion", res.api_version) != res.api_version
        ):
            raise bad_request(
                f"the API version in the data ({body.get('apiVersion')}) does not match the expected "
                f"API version ({res.api_version})"
                if body.get("kind") == res.kind
                else f'{body.get("kind")} in version "{res.version}" cannot be handled as a {res.kind}'
            )
        return kinds.to_storage(res, body)

    # ------------------------------------------------------------------ verbs

    def _list(self, route: Route, req: Request) -> Response:
        res = route.res
        predicate, filtered = self._filter(res, req)
        try:
            limit = int(req.query.get("limit") or 0)
        except ValueError as exc:
            raise bad_request("limit must be an integer") from exc
        wanted_rv = req.query.get("resourceVersion") or ""
        if wanted_rv.isdigit() and int(wanted_rv) > self.store.rv and not req.query.get("continue"):
            raise too_large_rv(int(wanted_rv), self.store.rv)
        result = self.store.list(res, route.namespace, predicate, limit, req.query.get("continue"), filtered)
        items = [self._out(res, o) for o in result["items"]]
        if tables.wants_table(req.accept):
            return Response(
                200, tables.to_table(res, items, result["metadata"], req.query.get("includeObject", "Metadata"))
            )
        for item in items:
            # Like the real server, items of a typed list carry no kind/apiVersion.
            item.pop("kind", None)
            item.pop("apiVersion", None)
        return Response(
            200, {"kind": res.list_kind, "apiVersion": res.api_version, "metadata": result["metadata"], "items": items}
        )

    def _watch(self, route: Route, req: Request) -> WatchStream:
        predicate, _ = self._filter(route.res, req)
        timeout = req.query.get("timeoutSeconds")
        try:
            timeout_s = float(timeout) if timeout else None
        except ValueError as exc:
            raise bad_request("timeoutSeconds must be a number") from exc
        send_initial = _truthy(req.query.get("sendInitialEvents"))
        watcher = self.store.watch(
            route.res, route.namespace, predicate, req.query.get("resourceVersion"), send_initial
        )
        return WatchStream(
            route.res,
            watcher,
            timeout_s,
            _truthy(req.query.get("allowWatchBookmarks")) or send_initial,
            tables.wants_table(req.accept),
            req.query.get("includeObject", "Metadata"),
        )

    def _create(self, route: Route, req: Request) -> Response:
        res = route.res
        body = self._body_object(res, req)
        meta = body.get("metadata") or {}
        if res.namespaced and meta.get("namespace") and meta["namespace"] != route.namespace:
            raise bad_request("the namespace of the provided object does not match the namespace sent on the request")
        obj = self.store.create(res, route.namespace, body, dry_run(req), req.writer())
        return self._object_response(201, res, obj, req)

    def _update(self, route: Route, req: Request) -> Response:
        res = route.res
        assert route.name is not None
        body = self._body_object(res, req)
        obj, created = self.store.update(
            res,
            route.namespace,
            route.name,
            lambda _cur: body,
            route.subresource,
            create_missing=res.allow_create_on_update and route.subresource is None,
            dry_run=dry_run(req),
            writer=req.writer(),
        )
        return self._object_response(201 if created else 200, res, obj, req)

    def _patch(self, route: Route, req: Request) -> Response:
        res = route.res
        assert route.name is not None
        ctype = req.content_type.split(";")[0].strip()
        if ctype not in PATCH_TYPES:
            raise ApiError(
                415,
                f"the body of the request was in an unknown format - accepted media types include: "
                f"{', '.join(PATCH_TYPES)}",
                "UnsupportedMediaType",
            )
        apply = ctype == "application/apply-patch+yaml"
        if apply and not req.query.get("fieldManager"):
            raise field_manager_required()  # ValidatePatchOptions, before the body is looked at
        patch = decode_body(req)

        def build(current: Obj | None) -> Obj:
            if current is None:
                # Only server-side apply may create through PATCH.
                if not isinstance(patch, dict):
                    raise bad_request("apply patch must be an object")
                return kinds.to_storage(res, patch)
            view = self._out(res, current)
            try:
                if ctype == "application/json-patch+json":
                    result = json_patch(view, patch)
                elif ctype == "application/merge-patch+json":
                    result = merge_patch(view, patch)
                else:
                    # Apply is approximated by a strategic merge (no field ownership tracking).
                    result = strategic_merge_patch(view, patch, res.kind)
            except MalformedPatch as exc:
                raise bad_request(str(exc)) from exc
            except PatchError as exc:
                raise ApiError(422, str(exc), "Invalid") from exc
            if not isinstance(result, dict):
                raise invalid_error(res.kind, res.group, route.name or "", [])
            return kinds.to_storage(res, result)

        obj, created = self.store.update(
            res,
            route.namespace,
            route.name,
            build,
            route.subresource,
            create_missing=apply and route.subresource is None,
            dry_run=dry_run(req),
            uid_precondition=False,
            writer=req.writer(apply),
        )
        return self._object_response(201 if created else 200, res, obj, req)

    def _delete_options(self, req: Request) -> Obj:
        body = decode_body(req)
        return body if isinstance(body, dict) else {}

    def _delete(self, route: Route, req: Request) -> Response:
        res = route.res
        assert route.name is not None
        opts = self._delete_options(req)
        obj, removed = self.store.delete(
            res, route.namespace, route.name, opts.get("preconditions"), dry_run(req, opts), _grace(req, opts)
        )
        if not removed:
            # Held by finalizers: 200 with the object (deletionTimestamp set); 202 only when the caller asked for
            # orphanDependents=false (apiserver handlers/delete.go keeps that for old clients).
            return self._object_response(202 if opts.get("orphanDependents") is False else 200, res, obj, req)
        if res.return_deleted_object:
            return self._object_response(200, res, obj, req)
        details: Obj = {"name": route.name, "kind": res.plural, "uid": obj["metadata"].get("uid")}
        if res.group:
            details["group"] = res.group
        return Response(
            200, {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "details": details}
        )

    def _delete_collection(self, route: Route, req: Request) -> Response:
        res = route.res
        if res.namespaced and route.namespace is None:
            raise ApiError(405, "the server does not allow this method on the requested resource")
        predicate, _ = self._filter(res, req)
        opts = self._delete_options(req)
        dry = dry_run(req, opts)
        listed = self.store.list(res, route.namespace, predicate)
        items = []
        for item in listed["items"]:
            try:
                obj, _ = self.store.delete(
                    res, route.namespace, item["metadata"]["name"], dry_run=dry, grace_period=_grace(req, opts)
                )
            except ApiError as exc:
                if exc.code != 404:
                    raise
                continue
            items.append(self._out(res, obj))
        return Response(
            200,
            {
                "kind": res.list_kind,
                "apiVersion": res.api_version,
                "metadata": {"resourceVersion": str(self.store.rv)},
                "items": items,
            },
        )
