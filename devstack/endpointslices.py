"""kube-controller-manager's EndpointSlice controller, played against the emulator's store.

For each Service with a selector (not ExternalName), the pods of its namespace that match it and have an IP and are
not terminal become endpoints of discovery.k8s.io/v1 EndpointSlices labelled ``kubernetes.io/service-name=<svc>`` and
``endpointslice.kubernetes.io/managed-by=endpointslice-controller.k8s.io``, generateName ``<svc>-``, owned by the
Service. It follows pkg/controller/endpointslice and staging/src/k8s.io/endpointslice (reconciler.go, utils.go):

- an endpoint: ``addresses: [podIP]``, ``conditions.serving`` = the pod's Ready condition, ``terminating`` =
  deletionTimestamp set, ``ready`` = serving and not terminating (always true with publishNotReadyAddresses),
  ``nodeName``, ``zone`` from the node's ``topology.kubernetes.io/zone``, ``targetRef`` to the pod;
- ports are resolved per pod (podutil.FindPort): a numeric targetPort as is, a named one looked up in the pod's
  container ports with the Service port's protocol (a pod without it gets no such port); pods resolving to
  different port lists land in different slices;
- at most ``max_endpoints_per_slice`` (the controller's default 100) endpoints per slice; the reconciler's order:
  keep endpoints in the slice they are in (updating changed ones), fill the slices being updated (fullest first),
  then put what is left in the fullest unchanged slice it fits in whole, else create slices; a slice that would be
  deleted while another is created is recycled (updated under its name); a Service with no endpoint keeps one
  placeholder slice (no endpoints, no ports);
- only slices it manages are touched; slices of a Service that is gone are deleted (the garbage collector's job,
  through the ownerReference, in a real cluster).

- one set of slices per family of ``spec.ipFamilies`` (default IPv4), each ``addressType`` that family and each
  endpoint the pod's address of it from ``status.podIPs`` (a pod without one is no endpoint of that family), as
  the reconciler's reconcileByAddressType; slices of a family the Service no longer has are deleted.

Not modelled: hostname/subdomain endpoints, the last-change-trigger-time annotation,
topology hints, the EndpointSlice mirroring controller, rate limiting and batching of syncs
(``--endpoint-updates-batch-period``). Writes are made as field manager ``kube-controller-manager``.

Run it with ``sync_all()`` (deterministic, for tests) or ``start()``: a background thread that syncs whenever the
store's resourceVersion moved (any write), checking every ``interval`` seconds.
"""

from __future__ import annotations

import copy
import threading
from typing import Any

from devstack.endpoint_of_pod import endpoint_ports, pod_to_endpoint, should_be_endpoint
from devstack.k8s_emulator import Emulator, resources
from devstack.k8s_emulator.errors import ApiError
from devstack.k8s_emulator.managed_fields import Writer
from devstack.k8s_emulator.selectors import make_filter

Obj = dict[str, Any]

SERVICE_NAME_LABEL = "kubernetes.io/service-name"
MANAGED_BY_LABEL = "endpointslice.kubernetes.io/managed-by"
CONTROLLER_NAME = "endpointslice-controller.k8s.io"
HEADLESS_LABEL = "service.kubernetes.io/headless"
MAX_ENDPOINTS_PER_SLICE = 100  # --max-endpoints-per-slice default
WRITER = Writer("kube-controller-manager")

PortsKey = tuple[tuple[str, int, str, str], ...]


def _resource(plural: str, group: str = "") -> resources.Resource:
    res = resources.find(group, "v1", plural)
    assert res is not None
    return res


SLICES = _resource("endpointslices", "discovery.k8s.io")
PODS = _resource("pods")
SERVICES = _resource("services")
NODES = _resource("nodes")


def _selects(selector: dict[str, str], pod: Obj) -> bool:
    labels = (pod.get("metadata") or {}).get("labels") or {}
    return all(labels.get(k) == v for k, v in selector.items())


def _ports_key(ports: list[Obj]) -> PortsKey:
    return tuple(
        sorted(
            (str(p.get("name") or ""), int(p.get("port") or 0), str(p.get("protocol")), str(p.get("appProtocol") or ""))
            for p in ports
        )
    )


def slice_labels(svc: Obj) -> dict[str, str]:
    """setEndpointSliceLabels: the Service's labels, then the service-name and managed-by labels (and headless)."""
    labels = {
        k: v
        for k, v in ((svc.get("metadata") or {}).get("labels") or {}).items()
        if k not in (SERVICE_NAME_LABEL, MANAGED_BY_LABEL, HEADLESS_LABEL)
    }
    labels[SERVICE_NAME_LABEL] = svc["metadata"]["name"]
    labels[MANAGED_BY_LABEL] = CONTROLLER_NAME
    if (svc.get("spec") or {}).get("clusterIP") == "None":
        labels[HEADLESS_LABEL] = ""
    return labels


def _key(endpoint: Obj) -> str:
    return str(endpoint["addresses"][0])


class EndpointSliceController:
    def __init__(
        self, emu: Emulator, max_endpoints_per_slice: int = MAX_ENDPOINTS_PER_SLICE, interval: float = 0.05
    ) -> None:
        self.emu = emu
        self.store = emu.store
        self.max_endpoints = max_endpoints_per_slice
        self.interval = interval
        self.writes = 0
        self._seen_rv = -1
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # ------------------------------------------------------------------ loop

    def start(self) -> EndpointSliceController:
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="endpointslice-controller", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            if self.store.rv != self._seen_rv:
                try:
                    self.sync_all()
                except ApiError:
                    continue  # a conflict with a concurrent write: the next round sees the new state

    # ------------------------------------------------------------------ reconcile

    def _list(self, res: resources.Resource, namespace: str | None = None) -> list[Obj]:
        items: list[Obj] = self.store.list(res, namespace, make_filter([], []))["items"]
        return items

    def sync_all(self) -> int:
        """Reconciles every Service (and removes managed slices of Services that are gone); returns the writes."""
        with self.store.lock:
            rv = self.store.rv
            before = self.writes
            services = {(s["metadata"]["namespace"], s["metadata"]["name"]): s for s in self._list(SERVICES)}
            nodes = {n["metadata"]["name"]: n for n in self._list(NODES)}
            pods = self._list(PODS)
            slices: dict[tuple[str, str], list[Obj]] = {}
            for slice_ in self._list(SLICES):
                labels = slice_["metadata"].get("labels") or {}
                if labels.get(MANAGED_BY_LABEL) != CONTROLLER_NAME or SERVICE_NAME_LABEL not in labels:
                    continue
                slices.setdefault((slice_["metadata"]["namespace"], labels[SERVICE_NAME_LABEL]), []).append(slice_)
            for key, svc in sorted(services.items()):
                spec = svc.get("spec") or {}
                if not spec.get("selector") or spec.get("type") == "ExternalName":
                    continue
                selected = [
                    p
                    for p in pods
                    if p["metadata"]["namespace"] == key[0] and _selects(spec["selector"], p) and should_be_endpoint(p)
                ]
                self._reconcile(svc, selected, nodes, slices.get(key, []))
            for key, orphans in sorted(slices.items()):
                if key not in services:
                    for slice_ in orphans:
                        self._delete(slice_)
            self._seen_rv = rv if self.writes == before else self.store.rv
            return self.writes - before

    def _reconcile(self, svc: Obj, pods: list[Obj], nodes: dict[str, Obj], existing: list[Obj]) -> None:
        families = [str(f) for f in (svc.get("spec") or {}).get("ipFamilies") or ["IPv4"]]
        for slice_ in existing:
            if slice_.get("addressType") not in families:
                self._delete(slice_)  # a family the Service no longer has
        for family in families:
            own = [s for s in existing if s.get("addressType") == family]
            self._reconcile_family(svc, pods, nodes, own, family)

    def _reconcile_family(
        self, svc: Obj, pods: list[Obj], nodes: dict[str, Obj], existing: list[Obj], family: str
    ) -> None:
        desired: dict[PortsKey, tuple[list[Obj], dict[str, Obj]]] = {}
        for pod in sorted(pods, key=lambda p: p["metadata"]["name"]):
            ports = endpoint_ports(svc, pod)
            endpoint = pod_to_endpoint(svc, pod, nodes.get((pod.get("spec") or {}).get("nodeName") or ""), family)
            if endpoint is not None:
                desired.setdefault(_ports_key(ports), (ports, {}))[1].setdefault(_key(endpoint), endpoint)
        labels = slice_labels(svc)
        by_ports: dict[PortsKey, list[Obj]] = {}
        for slice_ in existing:
            by_ports.setdefault(_ports_key(slice_.get("ports") or []), []).append(slice_)
        to_create: list[Obj] = []
        to_update: list[Obj] = []
        to_delete: list[Obj] = []
        for key in sorted(by_ports):
            if key not in desired:
                to_delete += by_ports[key]  # a port mapping no pod resolves to any more: all its slices go
        for key in sorted(desired):
            ports, wanted = desired[key]
            created, updated, deleted = self._by_port_mapping(
                svc, labels, ports, dict(wanted), by_ports.get(key, []), family
            )
            to_create += created
            to_update += updated
            to_delete += deleted
        placeholder = self._new_slice(svc, labels, [], family)
        if len(to_delete) == len(existing) and not to_create:
            if len(to_delete) == 1 and self._is_placeholder(to_delete[0], labels):
                to_delete = []
            else:
                to_create.append(placeholder)
        # finalize(): a slice about to be deleted takes the place of one about to be created.
        while to_delete and to_create:
            recycled, fresh = to_delete.pop(0), to_create.pop(0)
            fresh["metadata"] = copy.deepcopy(recycled["metadata"])
            fresh["metadata"]["labels"] = dict(labels)
            to_update.append(fresh)
        for slice_ in to_delete:
            self._delete(slice_)
        for slice_ in to_update:
            self._update(slice_)
        for slice_ in to_create:
            self._create(slice_)

    @staticmethod
    def _is_placeholder(slice_: Obj, labels: dict[str, str]) -> bool:
        return not slice_.get("endpoints") and not slice_.get("ports") and slice_["metadata"].get("labels") == labels

    def _by_port_mapping(
        self,
        svc: Obj,
        labels: dict[str, str],
        ports: list[Obj],
        wanted: dict[str, Obj],
        existing: list[Obj],
        family: str = "IPv4",
    ) -> tuple[list[Obj], list[Obj], list[Obj]]:
        to_delete: list[Obj] = []
        updating: dict[str, Obj] = {}
        unchanged: dict[str, Obj] = {}
        # 1. Keep desired endpoints where they are (updated), drop the others.
        for slice_ in sorted(existing, key=lambda s: s["metadata"]["name"]):
            kept: list[Obj] = []
            changed = False
            for endpoint in slice_.get("endpoints") or []:
                got = wanted.pop(_key(endpoint), None) if endpoint.get("addresses") else None
                if got is not None:
                    kept.append(got)
                    changed = changed or got != endpoint
            old_count = len(slice_.get("endpoints") or [])
            if changed or old_count != len(kept):
                if not kept:
                    to_delete.append(slice_)
                else:
                    updated = copy.deepcopy(slice_)
                    updated["endpoints"], updated["metadata"]["labels"] = kept, dict(labels)
                    updating[slice_["metadata"]["name"]] = updated
            elif slice_["metadata"].get("labels") != labels:
                updated = copy.deepcopy(slice_)
                updated["metadata"]["labels"] = dict(labels)
                updating[slice_["metadata"]["name"]] = updated
            else:
                unchanged[slice_["metadata"]["name"]] = slice_
        remaining = list(wanted.values())
        # 2. Fill the slices being updated, fullest first.
        for slice_ in sorted(updating.values(), key=lambda s: -len(s["endpoints"])):
            while remaining and len(slice_["endpoints"]) < self.max_endpoints:
                slice_["endpoints"].append(remaining.pop(0))
        # 3. What is left: into the fullest unchanged slice it fits in whole, else new slices.
        to_create: list[Obj] = []
        while remaining:
            target: Obj | None = None
            if len(remaining) < self.max_endpoints and unchanged:
                fits = [
                    s
                    for s in unchanged.values()
                    if len(s.get("endpoints") or []) + len(remaining) <= self.max_endpoints
                ]
                if fits:
                    chosen = max(fits, key=lambda s: len(s.get("endpoints") or []))
                    target = copy.deepcopy(chosen)
                    target["endpoints"] = list(target.get("endpoints") or [])
                    del unchanged[chosen["metadata"]["name"]]
                    updating[chosen["metadata"]["name"]] = target
            if target is None:
                target = self._new_slice(svc, labels, ports, family)
                to_create.append(target)
            while remaining and len(target["endpoints"]) < self.max_endpoints:
                target["endpoints"].append(remaining.pop(0))
        return to_create, list(updating.values()), to_delete

    @staticmethod
    def _new_slice(svc: Obj, labels: dict[str, str], ports: list[Obj], family: str = "IPv4") -> Obj:
        meta = svc["metadata"]
        return {
            "apiVersion": "discovery.k8s.io/v1",
            "kind": "EndpointSlice",
            "metadata": {
                "generateName": f"{meta['name']}-",
                "namespace": meta["namespace"],
                "labels": dict(labels),
                "ownerReferences": [
                    {
                        "apiVersion": "v1",
                        "kind": "Service",
                        "name": meta["name"],
                        "uid": meta["uid"],
                        "controller": True,
                        "blockOwnerDeletion": True,
                    }
                ],
            },
            "addressType": family,
            "endpoints": [],
            "ports": copy.deepcopy(ports),
        }

    # ------------------------------------------------------------------ writes

    def _create(self, slice_: Obj) -> None:
        self.store.create(SLICES, slice_["metadata"]["namespace"], slice_, writer=WRITER)
        self.writes += 1

    def _update(self, slice_: Obj) -> None:
        meta = slice_["metadata"]
        _, _ = self.store.update(SLICES, meta["namespace"], meta["name"], lambda _cur: slice_, writer=WRITER)
        self.writes += 1

    def _delete(self, slice_: Obj) -> None:
        self.store.delete(SLICES, slice_["metadata"]["namespace"], slice_["metadata"]["name"])
        self.writes += 1
