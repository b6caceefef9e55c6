"""Server-side printing (meta.k8s.io/v1 Table), which ``kubectl get`` asks for."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from typing import Any

from .resources import Resource

Obj = dict[str, Any]
Column = tuple[str, str, str, int]  # name, type, format, priority


def wants_table(accept: str) -> bool:
    return "as=Table" in accept


def human_age(timestamp: str | None) -> str:
    if not timestamp:
        return "<unknown>"
    try:
        then = dt.datetime.strptime(timestamp, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=dt.UTC)
    except ValueError:
        return "<invalid>"
    secs = max(0, int((dt.datetime.now(dt.UTC) - then).total_seconds()))
    mins, hours = secs // 60, secs // 3600
    if secs < 120:
        return f"{secs}s"
    if mins < 10:
        return f"{mins}m{secs % 60}s" if secs % 60 else f"{mins}m"
    if hours < 3:
        return f"{mins}m"
    if hours < 8:
        return f"{hours}h{mins % 60}m" if mins % 60 else f"{hours}h"
    if hours < 48:
        return f"{hours}h"
    return f"{hours // 24}d"


def _svc_external(spec: Obj, status: Obj) -> str:
    stype = spec.get("type")
    if stype == "ExternalName":
        return str(spec.get("externalName", "<none>"))
    ips = list(spec.get("externalIPs") or [])
    if stype == "LoadBalancer":
        ingress = (status.get("loadBalancer") or {}).get("ingress") or []
        ips += [i.get("ip") or i.get("hostname") for i in ingress if i.get("ip") or i.get("hostname")]
        return ",".join(ips) if ips else "<pending>"
    return ",".join(ips) if ips else "<none>"


def _svc_ports(spec: Obj) -> str:
    parts = []
    for p in spec.get("ports") or []:
        node = f":{p['nodePort']}" if p.get("nodePort") else ""
        parts.append(f"{p.get('port')}{node}/{p.get('protocol', 'TCP')}")
    return ",".join(parts) or "<none>"


def _service(o: Obj) -> list[Any]:
    spec, status = o.get("spec") or {}, o.get("status") or {}
    selector = ",".join(f"{k}={v}" for k, v in sorted((spec.get("selector") or {}).items())) or "<none>"
    return [
        o["metadata"]["name"],
        spec.get("type"),
        spec.get("clusterIP") or "<none>",
        _svc_external(spec, status),
        _svc_ports(spec),
        human_age(o["metadata"].get("creationTimestamp")),
        selector,
    ]


def _node(o: Obj) -> list[Any]:
    conds = (o.get("status") or {}).get("conditions") or []
    ready = next((c.get("status") for c in conds if c.get("type") == "Ready"), None)
    state = {"True": "Ready", "False": "NotReady"}.get(str(ready), "Unknown")
    if (o.get("spec") or {}).get("unschedulable"):
        state += ",SchedulingDisabled"
    roles = sorted(
        k.split("/", 1)[1] for k in (o["metadata"].get("labels") or {}) if k.startswith("node-role.kubernetes.io/")
    )
    version = ((o.get("status") or {}).get("nodeInfo") or {}).get("kubeletVersion", "")
    return [
        o["metadata"]["name"],
        state,
        ",".join(roles) or "<none>",
        human_age(o["metadata"].get("creationTimestamp")),
        version,
    ]


def _namespace(o: Obj) -> list[Any]:
    return [
        o["metadata"]["name"],
        (o.get("status") or {}).get("phase", ""),
        human_age(o["metadata"].get("creationTimestamp")),
    ]


def _event(o: Obj) -> list[Any]:
    # Rows are printed from whichever API view was requested (core/v1 or events.k8s.io/v1 names).
    inv = o.get("involvedObject") or o.get("regarding") or {}
    last = (
        o.get("lastTimestamp")
        or o.get("deprecatedLastTimestamp")
        or o.get("eventTime")
        or o["metadata"].get("creationTimestamp")
    )
    return [
        human_age(str(last)[:19] + "Z" if last else None),
        o.get("type", ""),
        o.get("reason", ""),
        f"{str(inv.get('kind', '')).lower()}/{inv.get('name', '')}",
        o.get("message") or o.get("note", ""),
    ]


def _lease(o: Obj) -> list[Any]:
    return [
        o["metadata"]["name"],
        (o.get("spec") or {}).get("holderIdentity", ""),
        human_age(o["metadata"].get("creationTimestamp")),
    ]


def _pod(o: Obj) -> list[Any]:
    """printPod: READY containers/total, STATUS (Terminating once a deletion is pending), RESTARTS, and with
    ``-o wide`` IP, NODE, NOMINATED NODE and READINESS GATES (gates True / gates declared)."""
    spec, status = o.get("spec") or {}, o.get("status") or {}
    statuses = status.get("containerStatuses") or []
    ready = sum(1 for c in statuses if c.get("ready"))
    reason = status.get("reason") or status.get("phase") or ""
    if o["metadata"].get("deletionTimestamp"):
        reason = "Terminating"
    gates = [g.get("conditionType") for g in spec.get("readinessGates") or []]
    conds = {c.get("type"): c.get("status") for c in status.get("conditions") or []}
    gates_cell = f"{sum(1 for g in gates if conds.get(g) == 'True')}/{len(gates)}" if gates else "<none>"
    return [
        o["metadata"]["name"],
        f"{ready}/{len(spec.get('containers') or [])}",
        reason,
        sum(int(c.get("restartCount") or 0) for c in statuses),
        human_age(o["metadata"].get("creationTimestamp")),
        status.get("podIP") or "<none>",
        spec.get("nodeName") or "<none>",
        status.get("nominatedNodeName") or "<none>",
        gates_cell,
    ]


def _endpoint_slice(o: Obj) -> list[Any]:
    """printEndpointSlice: ports by number ("<unset>" when none), the first three addresses then "+ N more..."."""
    ports = [str(p.get("port")) for p in o.get("ports") or [] if p.get("port") is not None]
    addresses = [a for e in o.get("endpoints") or [] for a in e.get("addresses") or []]
    shown = ",".join(addresses[:3]) + (f" + {len(addresses) - 3} more..." if len(addresses) > 3 else "")
    return [
        o["metadata"]["name"],
        o.get("addressType", ""),
        ",".join(ports) or "<unset>",
        shown or "<unset>",
        human_age(o["metadata"].get("creationTimestamp")),
    ]


def _generic(o: Obj) -> list[Any]:
    return [o["metadata"]["name"], human_age(o["metadata"].get("creationTimestamp"))]


_NAME: Column = ("Name", "string", "name", 0)
_AGE: Column = ("Age", "string", "", 0)
PRINTERS: dict[str, tuple[list[Column], Callable[[Obj], list[Any]]]] = {
    "Service": (
        [
            _NAME,
            ("Type", "string", "", 0),
            ("Cluster-IP", "string", "", 0),
            ("External-IP", "string", "", 0),
            ("Port(s)", "string", "", 0),
            _AGE,
            ("Selector", "string", "", 1),
        ],
        _service,
    ),
    "Node": (
        [_NAME, ("Status", "string", "", 0), ("Roles", "string", "", 0), _AGE, ("Version", "string", "", 0)],
        _node,
    ),
    "Namespace": ([_NAME, ("Status", "string", "", 0), _AGE], _namespace),
    "Event": (
        [
            ("Last Seen", "string", "", 0),
            ("Type", "string", "", 0),
            ("Reason", "string", "", 0),
            ("Object", "string", "", 0),
            ("Message", "string", "", 0),
        ],
        _event,
    ),
    "Lease": ([_NAME, ("Holder", "string", "", 0), _AGE], _lease),
    "Pod": (
        [
            _NAME,
            ("Ready", "string", "", 0),
            ("Status", "string", "", 0),
            ("Restarts", "string", "", 0),
            _AGE,
            ("IP", "string", "", 1),
            ("Node", "string", "", 1),
            ("Nominated Node", "string", "", 1),
            ("Readiness Gates", "string", "", 1),
        ],
        _pod,
    ),
    "EndpointSlice": (
        [
            _NAME,
            ("AddressType", "string", "", 0),
            ("Ports", "string", "", 0),
            ("Endpoints", "string", "", 0),
            _AGE,
        ],
        _endpoint_slice,
    ),
}


def _row_object(obj: Obj, include: str) -> Obj | None:
    if include == "None":
        return None
    if include == "Object":
        return obj
    return {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": obj.get("metadata", {})}


def to_table(res: Resource, objs: list[Obj], list_meta: Obj, include: str = "Metadata", headers: bool = True) -> Obj:
    columns, cells = PRINTERS.get(res.kind, ([_NAME, _AGE], _generic))
    rows = []
    for obj in objs:
        row: Obj = {"cells": cells(obj)}
        embedded = _row_object(obj, include)
        if embedded is not None:
            row["object"] = embedded
        rows.append(row)
    table: Obj = {"kind": "Table", "apiVersion": "meta.k8s.io/v1", "metadata": list_meta, "rows": rows}
    if headers:
        table["columnDefinitions"] = [
            {"name": n, "type": t, "format": f, "description": n, "priority": p} for n, t, f, p in columns
        ]
    else:
        table["columnDefinitions"] = None
    return table
