"""The ``Emulator`` facade: lifecycle, kubeconfig, fault controls and direct store access."""

from __future__ import annotations

import base64
import json
import os
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from . import kinds, resources
from .api import Api
from .errors import ApiError
from .faults import Faults, RequestLog
from .rbac import Rbac
from .resources import Resource
from .selectors import make_filter
from .server import EmulatorHTTPServer
from .store import FUTURE_WATCH_SHAPES, FUTURE_WATCH_SILENT, Store
from .tls import ServingCert, make_serving_cert

Obj = dict[str, Any]


def _resource(kind_plural: str) -> Resource:
    res = resources.by_plural(kind_plural)
    if res is None:
        raise KeyError(f"unknown resource {kind_plural!r}")
    return res


class Emulator:
    def __init__(
        self,
        host: str = "127.0.0.1",
        port: int = 0,
        require_token: bool = False,
        tokens: dict[str, str] | None = None,
        token_validator: Callable[[str], str | None] | None = None,
        bookmark_interval: float = 60.0,
        tls: bool = False,
        expired_watch_in_stream: bool = True,
        load_balancer_ip_mode: bool = True,
        future_watch: str = FUTURE_WATCH_SILENT,
        service_families: tuple[str, ...] = ("IPv4",),
    ) -> None:
        self.host = host
        self.port = port
        self.require_token = require_token
        self.tokens: dict[str, str] = dict(tokens) if tokens is not None else {"admin-token": "admin"}
        self.token_validator = token_validator
        self.bookmark_interval = bookmark_interval
        self.tls = tls
        self._cert: ServingCert | None = None
        self.faults = Faults()
        self.request_log = RequestLog()
        self.store = Store()
        self.store.expired_watch_in_stream = expired_watch_in_stream
        self.store.load_balancer_ip_mode = load_balancer_ip_mode  # False: a 1.28/1.29 server, ipMode dropped
        # ("IPv4", "IPv6") or ("IPv6", "IPv4"): a dual-stack cluster (a service CIDR per family, primary first)
        self.store.service_families = service_families
        if future_watch not in FUTURE_WATCH_SHAPES:
            raise ValueError(f"future_watch must be one of {FUTURE_WATCH_SHAPES}")
        self.store.future_watch = future_watch  # a watch ahead of the server: see Store.future_watch
        self.rbac: Rbac | None = None  # RBAC enforcement is off until enable_rbac()
        self.stopping = False
        self._httpd: EmulatorHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self.api = Api(self.store, f"{host}:{port}")
        for name in ("default", "kube-system"):
            self.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> Emulator:
        self._httpd = EmulatorHTTPServer((self.host, self.port), self)
        if self.tls:
            self._cert = make_serving_cert(self.host)
            # Handshake happens in the handler thread (see Handler.setup), not in the accept loop.
            self._httpd.socket = self._cert.context().wrap_socket(
                self._httpd.socket, server_side=True, do_handshake_on_connect=False
            )
        self.port = self._httpd.server_address[1]
        self.api.server_address = f"{self.host}:{self.port}"
        self._thread = threading.Thread(
            target=self._httpd.serve_forever,
            kwargs={"poll_interval": 0.1},
            name=f"k8s-emulator-{self.port}",
            daemon=True,
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        self.stopping = True
        self.store.close_watchers()
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.close_connections()
            self._httpd.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self._httpd = None
        if self._cert is not None:
            self._cert.cleanup()

    def __enter__(self) -> Emulator:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def url(self) -> str:
        return f"{'https' if self.tls else 'http'}://{self.host}:{self.port}"

    @property
    def ca_pem(self) -> bytes | None:
        """The serving certificate (its own CA) when TLS is on: what EKS DescribeCluster would hand out."""
        return self._cert.cert_pem if self._cert is not None else None

    def write_kubeconfig(self, path: str, token: str | None = "admin-token", namespace: str = "default") -> str:
        user: Obj = {"token": token} if token else {}
        cluster: Obj = {"server": self.url}
        if self._cert is not None:
            cluster["certificate-authority-data"] = base64.b64encode(self._cert.cert_pem).decode()
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "emulator", "cluster": cluster}],
            "users": [{"name": "emulator", "user": user}],
            "contexts": [
                {"name": "emulator", "context": {"cluster": "emulator", "user": "emulator", "namespace": namespace}}
            ],
            "current-context": "emulator",
        }
        path = os.fspath(path)
        with open(path, "w", encoding="utf-8") as fh:
            json.dump(config, fh, indent=2)  # JSON is valid YAML for kubectl and the Python client
        return path

    def enable_rbac(self, users: Mapping[str, Sequence[str]] | None = None) -> Rbac:
        """Enforce RBAC from the role/binding objects in the store. ``users``: username -> groups (what an
        authenticator such as an EKS access entry attaches); the default admin user stays a superuser."""
        self.rbac = Rbac(self.store, {"admin": ["system:masters"], **(users or {})})
        return self.rbac

    # ------------------------------------------------------------------ faults / log

    def clear_log(self) -> None:
        self.request_log.reset()

    def drop_watches(self, clean: bool = False) -> int:
        """Ends every open watch stream; returns how many were open. By default abruptly (no terminal chunk), as
        an API server that dies or a load balancer that cuts the connection does; ``clean`` ends them like a
        server-side timeout."""
        return self.store.close_watchers(abort=not clean)

    def compact(self) -> None:
        """Forgets history; open watches get an in-stream 410 ERROR. A watch from an older RV then gets HTTP 200
        and an in-stream ERROR 410 (the watch cache), or HTTP 410 with ``expired_watch_in_stream=False``."""
        self.store.compact()

    # ------------------------------------------------------------------ direct store access

    def create(self, obj: Obj) -> Obj:
        """Creates like a POST would (defaulting, validation, events); raises ApiError on failure."""
        res = resources.for_object(str(obj.get("apiVersion", "")), str(obj.get("kind", "")))
        if res is None:
            raise KeyError(f"unsupported object {obj.get('apiVersion')}/{obj.get('kind')}")
        namespace = (obj.get("metadata") or {}).get("namespace") or ("default" if res.namespaced else None)
        return kinds.from_storage(res, self.store.create(res, namespace, kinds.to_storage(res, obj)))

    def get(self, kind_plural: str, namespace: str | None, name: str) -> Obj | None:
        res = _resource(kind_plural)
        try:
            return self.store.get(res, namespace, name)
        except ApiError as exc:
            if exc.code == 404:
                return None
            raise

    def list(self, kind_plural: str, namespace: str | None = None) -> list[Obj]:
        items: list[Obj] = self.store.list(_resource(kind_plural), namespace, make_filter([], []))["items"]
        return items

    def update(self, obj: Obj, subresource: str | None = None) -> Obj:
        """PUT semantics (resourceVersion precondition if present); ``subresource="status"`` for status."""
        res = resources.for_object(str(obj.get("apiVersion", "")), str(obj.get("kind", "")))
        if res is None:
            raise KeyError(f"unsupported object {obj.get('apiVersion')}/{obj.get('kind')}")
        meta = obj.get("metadata") or {}
        namespace = meta.get("namespace") if res.namespaced else None
        stored, _ = self.store.update(
            res, namespace, meta["name"], lambda _cur: kinds.to_storage(res, obj), subresource
        )
        return kinds.from_storage(res, stored)

    def delete(self, kind_plural: str, namespace: str | None, name: str, grace_period: int | None = None) -> Obj:
        """DELETE semantics; ``grace_period`` is DeleteOptions.gracePeriodSeconds (Pods)."""
        obj, _ = self.store.delete(_resource(kind_plural), namespace, name, grace_period=grace_period)
        return obj
