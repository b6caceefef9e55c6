"""In-memory object store: one global resourceVersion, event history and watch fan-out."""

from __future__ import annotations

import base64
import binascii
import copy
import datetime as dt
import json
import random
import threading
import uuid
from collections.abc import Callable
from typing import Any

from . import kinds, managed_fields, pod_validation
from .errors import (
    ApiError,
    already_exists,
    bad_request,
    conflict,
    gone,
    invalid,
    invalid_error,
    not_found,
    status_body,
    too_large_rv,
)
from .managed_fields import IN_PROCESS, Writer
from .resources import RESOURCES, Resource, by_plural
from .watch import Event, Watcher

Obj = dict[str, Any]
Key = tuple[str, str]

FUTURE_WATCH_SILENT = "silent"
FUTURE_WATCH_HTTP_504 = "http-504"
FUTURE_WATCH_IN_STREAM_504 = "in-stream-504"
FUTURE_WATCH_SHAPES = (
    FUTURE_WATCH_SILENT,
    FUTURE_WATCH_HTTP_504,
    FUTURE_WATCH_IN_STREAM_504,
)  # (namespace or "", name)

_NAME_CHARS = "bcdfghjklmnpqrstvwxz2456789"  # same alphabet as apiserver's SimpleNameGenerator
_SYSTEM_META = ("uid", "creationTimestamp", "deletionTimestamp", "deletionGracePeriodSeconds", "generation")


def now_rfc3339() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def rfc3339_in(seconds: float) -> str:
    return (dt.datetime.now(dt.UTC) + dt.timedelta(seconds=seconds)).strftime("%Y-%m-%dT%H:%M:%SZ")


def _spec_part(obj: Obj) -> Obj:
    return {k: v for k, v in obj.items() if k not in ("metadata", "status", "apiVersion", "kind")}


def _rv_of(obj: Obj) -> str:
    return str((obj.get("metadata") or {}).get("resourceVersion") or "")


class Store:
    def __init__(self, max_history: int = 10000) -> None:
        self.lock = threading.RLock()
        self.objects: dict[str, dict[Key, Obj]] = {}
        self.rv = 0
        self.history: list[Event] = []
        self.compacted_rv = 0  # watches from an RV below this get 410 Gone
        self.max_history = max_history
        self.watchers: set[Watcher] = set()
        # Too-old RV at watch start: True = HTTP 200 + in-stream ERROR 410 (watch cache), False = HTTP 410.
        self.expired_watch_in_stream = True
        # A watch from a resourceVersion the server has not reached (etcd restored from an older backup, a client
        # that outlived its cluster). FUTURE_WATCH_SILENT (the default) is what kube-apiserver 1.28+ answered: HTTP
        # 200 and a stream that delivers nothing, not even a bookmark, until timeoutSeconds, while only a LIST at
        # that version answers 504; FUTURE_WATCH_HTTP_504 and FUTURE_WATCH_IN_STREAM_504 are the other shapes a
        # server or proxy may give (504 "Too large resource version", as an answer or as the stream's ERROR event).
        self.future_watch = FUTURE_WATCH_SILENT
        # Feature gate LoadBalancerIPMode (beta, on by default since 1.30): off, as on 1.28 and 1.29, the server drops
        # status.loadBalancer.ingress[].ipMode from every write (dropDisabledStatusFields) before validating it.
        self.load_balancer_ip_mode = True
        self.service_families: tuple[str, ...] = ("IPv4",)  # the cluster's Service IP families, primary first

    # ------------------------------------------------------------------ helpers

    def _drop_disabled_fields(self, res: Resource, obj: Obj) -> None:
        """What a disabled feature gate's field becomes on a write: nothing (the registry's dropDisabled*Fields)."""
        if res.kind == "Service" and not self.load_balancer_ip_mode:
            ingress = ((obj.get("status") or {}).get("loadBalancer") or {}).get("ingress")
            for entry in ingress if isinstance(ingress, list) else []:
                if isinstance(entry, dict):
                    entry.pop("ipMode", None)

    def _bucket(self, res: Resource) -> dict[Key, Obj]:
        return self.objects.setdefault(res.store_key, {})

    @staticmethod
    def _key(res: Resource, namespace: str | None, name: str) -> Key:
        return (namespace or "", name) if res.namespaced else ("", name)

    def _emit(self, etype: str, res: Resource, obj: Obj, old: Obj | None) -> None:
        ev = Event(self.rv, etype, res.store_key, (obj.get("metadata") or {}).get("namespace", ""), obj, old)
        self.history.append(ev)
        if len(self.history) > self.max_history:
            dropped = self.history[: len(self.history) - self.max_history]
            del self.history[: len(dropped)]
            self.compacted_rv = dropped[-1].rv
        for w in list(self.watchers):
            w.deliver(ev)

    def _next_rv(self, obj: Obj) -> None:
        self.rv += 1
        obj.setdefault("metadata", {})["resourceVersion"] = str(self.rv)

    def _siblings(self, res: Resource, key: Key) -> Callable[[], list[Obj]]:
        return lambda: [o for k, o in self._bucket(res).items() if k != key]

    def _check_namespace(self, res: Resource, namespace: str | None) -> None:
        if not res.namespaced:
            return
        ns_res = by_plural("namespaces")
        assert ns_res is not None
        ns_obj = self._bucket(ns_res).get(("", namespace or ""))
        if ns_obj is None:
            raise not_found("namespaces", "", namespace or "")
        if ns_obj["metadata"].get("deletionTimestamp"):
            raise ApiError(
                403,
                f'{res.plural} "{""}" is forbidden: unable to create new content in namespace '
                f"{namespace} because it is being terminated",
                "Forbidden",
            )

    # ------------------------------------------------------------------ reads

    def get(self, res: Resource, namespace: str | None, name: str) -> Obj:
        with self.lock:
            obj = self._bucket(res).get(self._key(res, namespace, name))
            if obj is None:
                raise not_found(res.plural, res.group, name)
            return copy.deepcopy(obj)

    def _snapshot(self, res: Resource, at_rv: int) -> dict[Key, Obj]:
        """State of one resource at ``at_rv``: current state with later history undone."""
        state = dict(self._bucket(res))
        for ev in reversed(self.history):
            if ev.rv <= at_rv:
                break
            if ev.key != res.store_key:
                continue
            key = self._key(res, ev.namespace, ev.obj["metadata"]["name"])
            if ev.type == "ADDED":
                state.pop(key, None)
            elif ev.old is not None:
                state[key] = ev.old
        return state

    def list(
        self,
        res: Resource,
        namespace: str | None,
        predicate: Callable[[Obj], bool],
        limit: int = 0,
        continue_token: str | None = None,
        filtered: bool = False,
    ) -> Obj:
        with self.lock:
            start: Key | None = None
            list_rv = self.rv
            if continue_token:
                list_rv, start = self._decode_continue(continue_token)
                if list_rv < self.compacted_rv:
                    raise gone(
                        "The provided continue parameter is too old to display a consistent list result. "
                        "You can start a new list without the continue parameter."
                    )
                state = self._snapshot(res, list_rv)
            else:
                state = self._bucket(res)
            keys = sorted(k for k in state if namespace is None or k[0] == namespace)
            if start is not None:
                keys = [k for k in keys if k > start]
            matching = [k for k in keys if predicate(state[k])]
            page = matching[:limit] if limit > 0 else matching
            meta: Obj = {"resourceVersion": str(list_rv)}
            if limit > 0 and len(matching) > limit:
                meta["continue"] = self._encode_continue(list_rv, page[-1])
                if not filtered:
                    meta["remainingItemCount"] = len(matching) - limit
            return {"metadata": meta, "items": [copy.deepcopy(state[k]) for k in page]}

    @staticmethod
    def _encode_continue(rv: int, key: Key) -> str:
        raw = json.dumps({"v": "meta.k8s.io/v1", "rv": rv, "start": f"{key[0]}/{key[1]}\u0000"})
        return base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")

    @staticmethod
    def _decode_continue(token: str) -> tuple[int, Key]:
        try:
            data = json.loads(base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)))
            ns, _, name = str(data["start"]).rstrip("\u0000").partition("/")
            return int(data["rv"]), (ns, name)
        except (ValueError, KeyError, TypeError, binascii.Error) as exc:
            raise bad_request(f"continue key is not valid: {exc}") from exc

    # ------------------------------------------------------------------ writes

    def create(
        self, res: Resource, namespace: str | None, obj: Obj, dry_run: bool = False, writer: Writer = IN_PROCESS
    ) -> Obj:
        """``dry_run``: defaulting, validation and conflict checks only; nothing is stored or emitted. ``writer``:
        who writes (the managedFields entry)."""
        with self.lock:
            obj = copy.deepcopy(obj)
            meta = obj.setdefault("metadata", {})
            if not isinstance(meta, dict):
                raise bad_request("metadata must be an object")
            if res.namespaced:
                meta["namespace"] = namespace
            else:
                meta.pop("namespace", None)
            if not meta.get("name") and meta.get("generateName"):
                # SimpleNameGenerator: the prefix is cut to 58 characters so the name fits a 63-character label.
                meta["name"] = str(meta["generateName"])[:58] + "".join(random.choices(_NAME_CHARS, k=5))
            if meta.get("resourceVersion"):
                raise ApiError(500, "resourceVersion should not be set on objects to be created", "InternalError")
            self._check_namespace(res, namespace)
            key = self._key(res, namespace, str(meta.get("name") or ""))
            obj["apiVersion"], obj["kind"] = res.api_version, res.kind
            for field in (*_SYSTEM_META, "managedFields", "selfLink"):
                meta.pop(field, None)
            self._drop_disabled_fields(res, obj)
            kinds.prepare_create(res, obj, self._siblings(res, key), self.service_families)
            self._drop_disabled_fields(res, obj)  # nor defaulted (the gate's defaulting is off too)
            if key in self._bucket(res):
                raise already_exists(res.plural, res.group, key[1])
            meta["uid"] = str(uuid.uuid4())
            meta["creationTimestamp"] = now_rfc3339()
            meta["generation"] = 1
            meta["managedFields"] = managed_fields.record([], None, obj, writer, res.api_version, None, now_rfc3339())
            if dry_run:
                return copy.deepcopy(obj)
            self._next_rv(obj)
            self._bucket(res)[key] = obj
            self._emit("ADDED", res, obj, None)
            return copy.deepcopy(obj)

    def update(
        self,
        res: Resource,
        namespace: str | None,
        name: str,
        build: Callable[[Obj | None], Obj],
        subresource: str | None = None,
        create_missing: bool = False,
        dry_run: bool = False,
        uid_precondition: bool = True,
        writer: Writer = IN_PROCESS,
    ) -> tuple[Obj, bool]:
        """Read-modify-write under the lock. ``build`` gets a copy of the current object (None when
        missing) and returns the desired object. Returns (stored object, created?).

        ``uid_precondition``: a PUT's body UID is a precondition (409 when it differs: the registry's
        defaultUpdatedObjectInfo.Preconditions); a PATCH has none (the patch handler passes no object), so a patched
        UID reaches validation and is refused as an immutable field (422), as kube-apiserver 1.28 answers."""
        with self.lock:
            key = self._key(res, namespace, name)
            current = self._bucket(res).get(key)
            if current is None:
                if not create_missing:
                    raise not_found(res.plural, res.group, name)
                new = build(None)
                self._check_url_identity(res, new, namespace, name)
                if _rv_of(new):
                    raise not_found(res.plural, res.group, name)
                return self.create(res, namespace, new, dry_run, writer), True
            new = build(copy.deepcopy(current))
            if not isinstance(new, dict) or not isinstance(new.get("metadata", {}), dict):
                raise bad_request("the request body must be a JSON object with an object metadata")
            self._check_url_identity(res, new, namespace, name)
            meta = new.setdefault("metadata", {})
            cur_meta = current["metadata"]
            if meta.get("uid") and meta["uid"] != cur_meta["uid"] and not uid_precondition:
                field_error = invalid("metadata.uid", meta["uid"], "field is immutable")
                raise invalid_error(res.kind, res.group, name, [field_error])
            if meta.get("uid") and meta["uid"] != cur_meta["uid"]:
                raise conflict(
                    res.plural,
                    res.group,
                    name,
                    f"Precondition failed: UID in precondition: {meta['uid']}, UID in object meta: {cur_meta['uid']}",
                )
            wanted_rv = _rv_of(new)
            if wanted_rv and not wanted_rv.isdigit():
                raise bad_request(f"invalid resourceVersion {wanted_rv!r}")
            if wanted_rv and wanted_rv != cur_meta["resourceVersion"]:
                raise conflict(res.plural, res.group, name)
            new["apiVersion"], new["kind"] = res.api_version, res.kind
            for field in _SYSTEM_META:
                if field in cur_meta:
                    meta[field] = cur_meta[field]
                else:
                    meta.pop(field, None)
            meta.pop("managedFields", None)
            meta.pop("selfLink", None)
            if res.namespaced:
                meta["namespace"] = namespace
            self._drop_disabled_fields(res, new)
            stored = kinds.prepare_update(
                res, new, copy.deepcopy(current), self._siblings(res, key), subresource, self.service_families
            )
            self._drop_disabled_fields(res, stored)  # nor defaulted (the gate's defaulting is off too)
            stored["metadata"]["resourceVersion"] = cur_meta["resourceVersion"]
            if "managedFields" in cur_meta:
                stored["metadata"]["managedFields"] = copy.deepcopy(cur_meta["managedFields"])
            if _spec_part(stored) != _spec_part(current):
                stored["metadata"]["generation"] = int(cur_meta.get("generation", 1)) + 1
            if stored == current:
                # Like etcd: an update that changes nothing writes nothing (no new RV, no event).
                return copy.deepcopy(current), False
            entries = cur_meta.get("managedFields") or []
            stored["metadata"]["managedFields"] = managed_fields.record(
                entries, current, stored, writer, res.api_version, subresource, now_rfc3339()
            )
            if dry_run:
                return copy.deepcopy(stored), False
            self._next_rv(stored)
            # shouldDeleteDuringUpdate: the last finalizer gone from an object whose deletion waits on nothing else
            # (deletionGracePeriodSeconds 0); a Pod still in its grace period stays.
            if (
                stored["metadata"].get("deletionTimestamp")
                and not stored["metadata"].get("finalizers")
                and not cur_meta.get("deletionGracePeriodSeconds")
            ):
                del self._bucket(res)[key]
                self._emit("DELETED", res, stored, current)
                self._after_removal(res, namespace)
            else:
                self._bucket(res)[key] = stored
                self._emit("MODIFIED", res, stored, current)
            return copy.deepcopy(stored), False

    @staticmethod
    def _check_url_identity(res: Resource, obj: Obj, namespace: str | None, name: str) -> None:
        meta = obj.get("metadata") or {}
        if meta.get("name") and meta["name"] != name:
            raise bad_request(f"the name of the object ({meta['name']}) does not match the name on the URL ({name})")
        if res.namespaced and meta.get("namespace") and meta["namespace"] != namespace:
            raise bad_request("the namespace of the provided object does not match the namespace sent on the request")
        meta.setdefault("name", name)

    def delete(
        self,
        res: Resource,
        namespace: str | None,
        name: str,
        preconditions: Obj | None = None,
        dry_run: bool = False,
        grace_period: Any = None,
    ) -> tuple[Obj, bool]:
        """Returns (object, removed now?). Objects with finalizers only get a deletionTimestamp; so do Pods with a
        grace period (``grace_period``: the DeleteOptions' gracePeriodSeconds, see ``_graceful``)."""
        with self.lock:
            key = self._key(res, namespace, name)
            current = self._bucket(res).get(key)
            if current is None:
                raise not_found(res.plural, res.group, name)
            meta = current["metadata"]
            pre = preconditions or {}
            if pre.get("uid") and pre["uid"] != meta["uid"]:
                raise conflict(
                    res.plural,
                    res.group,
                    name,
                    f"Precondition failed: UID in precondition: {pre['uid']}, UID in object meta: {meta['uid']}",
                )
            if pre.get("resourceVersion") and pre["resourceVersion"] != meta["resourceVersion"]:
                raise conflict(
                    res.plural,
                    res.group,
                    name,
                    f"Precondition failed: ResourceVersion in precondition: "
                    f"{pre['resourceVersion']}, ResourceVersion in object meta: {meta['resourceVersion']}",
                )
            if dry_run:
                return copy.deepcopy(current), not meta.get("finalizers") and res.kind != "Namespace"
            if res.kind == "Namespace":
                return self._delete_namespace(res, current)
            if res.kind == "Pod":
                pending_delete = self._graceful(res, key, current, grace_period)
                if pending_delete is not None:
                    return pending_delete
            if meta.get("finalizers"):
                if meta.get("deletionTimestamp"):
                    return copy.deepcopy(current), False
                pending = copy.deepcopy(current)
                pending["metadata"]["deletionTimestamp"] = now_rfc3339()
                pending["metadata"]["deletionGracePeriodSeconds"] = 0
                self._next_rv(pending)
                self._bucket(res)[key] = pending
                self._emit("MODIFIED", res, pending, current)
                return copy.deepcopy(pending), False
            gone_obj = copy.deepcopy(current)
            self._next_rv(gone_obj)
            del self._bucket(res)[key]
            self._emit("DELETED", res, gone_obj, current)
            self._after_removal(res, namespace)
            return copy.deepcopy(gone_obj), True

    def _graceful(self, res: Resource, key: Key, current: Obj, requested: Any) -> tuple[Obj, bool] | None:
        """rest.BeforeDelete with the pod strategy's CheckGracefulDelete: a grace period > 0 sets deletionTimestamp
        (now + period) and deletionGracePeriodSeconds and keeps the pod (the kubelet deletes it again with 0 once its
        containers stopped); a second DELETE may only shorten the period; a period of 0 deletes now (unless
        finalizers hold the pod). Returns None when the deletion goes ahead now."""
        meta = current["metadata"]
        period = pod_validation.grace_period(current, requested)
        existing = meta.get("deletionGracePeriodSeconds")
        if existing is not None and meta.get("deletionTimestamp") and period >= int(existing):
            return copy.deepcopy(current), False  # already terminating, no shorter: nothing changes
        if period == 0:
            return None
        pending = copy.deepcopy(current)
        pending["metadata"]["deletionTimestamp"] = rfc3339_in(period)
        pending["metadata"]["deletionGracePeriodSeconds"] = period
        pending["metadata"]["generation"] = int(meta.get("generation", 1)) + 1
        self._next_rv(pending)
        self._bucket(res)[key] = pending
        self._emit("MODIFIED", res, pending, current)
        return copy.deepcopy(pending), False

    def _delete_namespace(self, res: Resource, current: Obj) -> tuple[Obj, bool]:
        # Stand-in for the namespace controller: mark Terminating, delete contents, then drop the
        # namespace once it is empty (contents with finalizers keep it Terminating).
        name = current["metadata"]["name"]
        if not current["metadata"].get("deletionTimestamp"):
            pending = copy.deepcopy(current)
            pending["metadata"]["deletionTimestamp"] = now_rfc3339()
            pending["metadata"]["deletionGracePeriodSeconds"] = 0
            pending["status"] = {"phase": "Terminating"}
            self._next_rv(pending)
            self._bucket(res)[("", name)] = pending
            self._emit("MODIFIED", res, pending, current)
            seen: set[str] = {"namespaces"}
            for other in RESOURCES:
                if not other.namespaced or other.store_key in seen:
                    continue
                seen.add(other.store_key)
                for key in [k for k in self._bucket(other) if k[0] == name]:
                    self.delete(other, name, key[1], grace_period=0)  # the last removal may already drop the namespace
        if ("", name) not in self._bucket(res):
            last = next(ev.obj for ev in reversed(self.history) if ev.key == "namespaces")
            return copy.deepcopy(last), True
        removed = self._finish_namespace(name)
        return copy.deepcopy(removed or self._bucket(res)[("", name)]), removed is not None

    def _after_removal(self, res: Resource, namespace: str | None) -> None:
        if res.namespaced and namespace:
            self._finish_namespace(namespace)

    def _finish_namespace(self, name: str) -> Obj | None:
        ns_res = by_plural("namespaces")
        assert ns_res is not None
        ns_obj = self._bucket(ns_res).get(("", name))
        if ns_obj is None or not ns_obj["metadata"].get("deletionTimestamp") or ns_obj["metadata"].get("finalizers"):
            return None
        if any(
            k[0] == name for bucket_key, bucket in self.objects.items() if bucket_key != "namespaces" for k in bucket
        ):
            return None
        gone_obj = copy.deepcopy(ns_obj)
        self._next_rv(gone_obj)
        del self._bucket(ns_res)[("", name)]
        self._emit("DELETED", ns_res, gone_obj, ns_obj)
        return gone_obj

    # ------------------------------------------------------------------ watches

    def watch(
        self,
        res: Resource,
        namespace: str | None,
        predicate: Callable[[Obj], bool],
        resource_version: str | None,
        send_initial: bool = False,
    ) -> Watcher:
        with self.lock:
            w = Watcher(res.store_key, namespace, predicate)
            if resource_version in (None, "", "0") or send_initial:
                for key in sorted(self._bucket(res)):
                    obj = self._bucket(res)[key]
                    if (namespace is None or key[0] == namespace) and predicate(obj):
                        w.add_initial(obj)
                if send_initial:
                    w.bookmark(self.rv, initial_events_end=True)
            else:
                if not str(resource_version).isdigit():
                    raise bad_request(f"invalid resource version {resource_version!r}")
                start = int(str(resource_version))
                if start > self.rv:
                    # Not waiting the watch cache's 3 s for freshness (waitUntilFreshAndBlock) here.
                    if self.future_watch == FUTURE_WATCH_HTTP_504:
                        raise too_large_rv(start, self.rv)
                    if self.future_watch == FUTURE_WATCH_IN_STREAM_504:
                        w.close(too_large_rv(start, self.rv).status())
                    else:
                        w.silence()  # never registered: no event of this server reaches it, no bookmark either
                    return w
                if start < self.compacted_rv:
                    message = f"too old resource version: {start} ({self.compacted_rv})"
                    if not self.expired_watch_in_stream:
                        raise gone(message)
                    # The watch cache answers 200 and sends the 410 as the stream's only event (cacher.Watch ->
                    # newErrWatcher); etcd-backed watches and some proxies answer HTTP 410 instead.
                    w.close(status_body(410, message, "Expired"))
                    return w
                for ev in self.history:
                    if ev.rv > start:
                        w.deliver(ev)
            self.watchers.add(w)
            return w

    def unwatch(self, w: Watcher) -> None:
        with self.lock:
            self.watchers.discard(w)
            w.close()

    def request_bookmark(self, w: Watcher) -> None:
        # Under the lock, so the bookmark RV is never ahead of events already queued for this watcher.
        with self.lock:
            w.bookmark(self.rv)

    def close_watchers(self, error: Obj | None = None, abort: bool = False) -> int:
        with self.lock:
            watchers = list(self.watchers)
            self.watchers.clear()
            for w in watchers:
                w.close(error, abort)
            return len(watchers)

    def compact(self) -> None:
        with self.lock:
            self.history.clear()
            self.compacted_rv = self.rv
            # Open streams behave like a watch cache that dropped a lagging watcher.
            self.close_watchers(status_body(410, f"too old resource version: {self.rv} ({self.rv})", "Expired"))
