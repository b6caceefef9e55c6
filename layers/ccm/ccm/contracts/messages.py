"""The delta message contract between the watcher and the reconciler Lambdas (schema version 1).

A delta is a *hint*: reconcilers always re-read the live object, so a delta only has to say which object
changed and carry enough (trimmed) fields to decide cheaply whether it matters. Body (JSON)::

    {
      "v": 1,                               # schema version
      "kind": "Service" | "Node" | "Watcher",
      "type": "ADDED" | "MODIFIED" | "DELETED" | "SYNC" | "HOSTS" | "ENDPOINTS" | "HEARTBEAT",
                                             # SYNC = relist / periodic resync; HOSTS = the Service's member
                                             # nodes changed (sent by the nodes Lambda, see ccm.membership);
                                             # ENDPOINTS = the Service's EndpointSlices changed (see below)
      "key": "<namespace>/<name>" | "<node name>",
      "uid": "<metadata.uid>",
      "resourceVersion": "<metadata.resourceVersion>",
      "observedAt": 1732240000.123,          # unix seconds when the watcher observed the change
      "object": {...},                       # trimmed copy, see trim_service / trim_node
      "burst": 12                            # optional, Service ADDED only: LoadBalancer Service creations the
                                             # watcher sent within BURST_WINDOW_SECONDS, this one included
    }

The burst hint (ccm.service.runtime): from BURST_CREATIONS creations at once, each creation's first pass stops once
its hostname is written and the rest follows after ccm.retry.CONTINUATION_DELAY_SECONDS, so every CreateLoadBalancer
goes ahead of the listeners in AWS's shared create bucket. A batch can only count its own records, and a burst's
first messages often arrive one per batch; the watcher sees the whole burst. Like every field it is a hint: it only
orders work (a forged or stale value defers a new load balancer's listeners by that delay, nothing more).

SQS attributes: MessageGroupId = the key (per-object serialisation; hashed when longer than SQS allows);
MessageDeduplicationId = sha256(uid/resourceVersion/type class) so that the same observation sent by a restarted
or a second watcher collapses inside the 5-minute FIFO window. ADDED, MODIFIED and SYNC form one type class
("upsert"): they all mean "the object now looks like resourceVersion N" and a relisting watcher cannot tell
which one an earlier watcher sent. A DELETED's id is sha256(uid/delete): a uid is deleted once, whichever RV a
watcher saw it with.

Endpoints hint (kind "Service", type "ENDPOINTS", only on the services queue, sent by the watcher): "the
EndpointSlices of Service <namespace>/<name> changed", for Services in `ip` target mode only
(`service.beta.kubernetes.io/aws-load-balancer-nlb-target-type: ip`). The reconciler re-reads the slices from the
API (label `kubernetes.io/service-name`), so nothing in it is authoritative. key and MessageGroupId are the
Service's (ordered with its reconciles), uid is the Service's uid as the watcher last saw it, resourceVersion is
"endpoints-<digest>" (not a Kubernetes resourceVersion): a digest of the slice state the watcher saw, the sorted
(slice name, resourceVersion) of the Service's slices plus (name, last resourceVersion) of the ones deleted since
its previous hint. resourceVersions are unique, so every later change yields a new digest, while two watcher
replicas that saw the same state send the same one and collapse inside the FIFO window (deduplication id
sha256(uid/resourceVersion/endpoints)). observedAt is when the first change merged into it was seen (the watcher
coalesces a Service's changes for a short window: watcher/endpoints.py). object holds counts for logs only:
{"slices": <slices now>, "deleted": <slices deleted since the previous hint>, "changes": <slice changes merged>};
it never carries Service fields (parse_delta refuses `type` and `finalizers` there), so a hint can never read as
"this was a LoadBalancer" and cause a delete.

Heartbeat (kind "Watcher", type "HEARTBEAT", only on the services queue): the watcher proves it is alive once per
heartbeat period (60 s by default) through the queue, since its role may only send to SQS. key "watcher/heartbeat"
(its own message group), uid "heartbeat", resourceVersion = the start of the period in unix seconds, observedAt =
when it was sent, object = {"replica": <pod name>}. The deduplication id ignores the replica, so the heartbeats of
two replicas for the same period collapse into one. The services Lambda logs its lag (`watcher_lag_ms`, the
"watcher heartbeat" line) and touches nothing else (see heartbeat_for); the message it deletes is what the watcher
silence alarm counts (AWS/SQS NumberOfMessagesDeleted of the services queue).
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any, Final

import fastjsonschema

SCHEMA_VERSION: Final = 1
KINDS: Final = ("Service", "Node")
# "the Service's EndpointSlices changed" (module docstring); the watcher's only delta that is not an object's own.
ENDPOINTS: Final = "ENDPOINTS"
EVENT_TYPES: Final = ("ADDED", "MODIFIED", "DELETED", "SYNC", "HOSTS", ENDPOINTS)
# Not an object kind: not in KINDS, so the watcher's per-kind buffers and every `kind == "Node"` filter skip it.
WATCHER_KIND: Final = "Watcher"
HEARTBEAT: Final = "HEARTBEAT"
HEARTBEAT_KEY: Final = "watcher/heartbeat"
MAX_GROUP_ID_LEN: Final = 128
# From this many Service creations at once, they are a burst (hostname first, the rest later): a complete NLB create
# takes 5 tokens of the ELB API's create bucket (1 load balancer, 2 target groups, 2 listeners for 2 ports), whose
# burst is 20 (then 5 a second; bench/README.md): up to 4 complete creates fit in it, so fewer gain nothing from
# waiting 45 s for their listeners.
BURST_CREATIONS: Final = 5
# A HOSTS message waits at most one coalescing bucket (ccm.membership.updater) plus this much clock skew between
# the nodes Lambda that wrote `notBefore` and the service Lambda reading it; a later one is malformed.
HOSTS_CLOCK_SKEW_SECONDS: Final = 5.0
LB_ANNOTATION_PREFIXES: Final = ("service.beta.kubernetes.io/", "service.kubernetes.io/")

DELTA_SCHEMA: Final[dict[str, Any]] = {
    "$schema": "http://json-schema.org/draft-07/schema#",
    "title": "ccm delta v1",
    "type": "object",
    "required": ["v", "kind", "type", "key", "uid", "resourceVersion", "observedAt", "object"],
    "additionalProperties": False,
    "properties": {
        "v": {"const": SCHEMA_VERSION},
        "kind": {"enum": [*KINDS, WATCHER_KIND]},
        "type": {"enum": [*EVENT_TYPES, HEARTBEAT]},
        "key": {"type": "string", "minLength": 1, "maxLength": 400, "pattern": "^[a-z0-9.:/-]+$"},
        "uid": {"type": "string", "minLength": 1, "maxLength": 64},
        "resourceVersion": {"type": "string", "minLength": 1, "maxLength": 64},
        "observedAt": {"type": "number", "minimum": 0},
        "object": {"type": "object"},
        "burst": {"type": "integer", "minimum": 1},
    },
}

_validate = fastjsonschema.compile(DELTA_SCHEMA)


class InvalidDelta(ValueError):
    """The message body does not parse against the delta schema; it belongs in the DLQ."""


@dataclass(frozen=True, slots=True)
class Delta:
    kind: str
    type: str
    key: str
    uid: str
    resource_version: str
    observed_at: float
    object: dict[str, Any]
    burst: int = 1  # see the module docstring; 1: no other creation known

    @property
    def namespace_name(self) -> tuple[str, str]:
        namespace, _, name = self.key.partition("/")
        return namespace, name

    def to_body(self) -> str:
        body = {
            "v": SCHEMA_VERSION,
            "kind": self.kind,
            "type": self.type,
            "key": self.key,
            "uid": self.uid,
            "resourceVersion": self.resource_version,
            "observedAt": self.observed_at,
            "object": self.object,
        }
        if self.burst > 1:
            body["burst"] = self.burst
        return json.dumps(body, separators=(",", ":"), sort_keys=True)

    def with_burst(self, burst: int) -> Delta:
        return replace(self, burst=burst)

    @property
    def group_id(self) -> str:
        return message_group_id(self.key)

    @property
    def deduplication_id(self) -> str:
        return deduplication_id(self.uid, self.resource_version, self.type)


def message_group_id(key: str) -> str:
    if len(key) <= MAX_GROUP_ID_LEN:
        return key
    return "h:" + hashlib.sha256(key.encode()).hexdigest()


def deduplication_id(uid: str, resource_version: str, event_type: str) -> str:
    if event_type == ENDPOINTS:
        # Its own class: the "resourceVersion" is the slice-state digest, never an object's (endpoints_hint).
        return hashlib.sha256(f"{uid}/{resource_version}/endpoints".encode()).hexdigest()
    if event_type == "DELETED":
        # An object (uid) is deleted once, ever: the watched DELETED of one watcher replica (deletion RV) and the
        # DELETED another one synthesises after a relist (last RV it knew) must collapse, so the RV stays out.
        return hashlib.sha256(f"{uid}/delete".encode()).hexdigest()
    return hashlib.sha256(f"{uid}/{resource_version}/upsert".encode()).hexdigest()


def parse_delta(body: str) -> Delta:
    """Parse and validate one message body; raises InvalidDelta with a human-readable reason."""
    try:
        data = json.loads(body)
    except (TypeError, ValueError) as err:
        raise InvalidDelta(f"body is not JSON: {err}") from err
    try:
        _validate(data)
    except fastjsonschema.JsonSchemaException as err:
        raise InvalidDelta(f"body does not match delta schema v{SCHEMA_VERSION}: {err}") from err
    if (data["kind"] == WATCHER_KIND) != (data["type"] == HEARTBEAT):
        raise InvalidDelta(f"type HEARTBEAT goes with kind {WATCHER_KIND} only, got {data['kind']}/{data['type']}")
    if data["kind"] == "Service" and data["key"].count("/") != 1:
        raise InvalidDelta(f"Service key must be <namespace>/<name>, got {data['key']!r}")
    if data["type"] == "HOSTS":
        not_before = data["object"].get("notBefore", 0)
        if data["kind"] != "Service" or isinstance(not_before, bool) or not isinstance(not_before, (int, float)):
            raise InvalidDelta("HOSTS goes with kind Service and a numeric object.notBefore")
    # ccm.service.decisions reads object.type/finalizers as "was ours" (a gone Service's LB is then deleted by uid): a
    # hint about slices must never say that.
    if data["type"] == ENDPOINTS and (data["kind"] != "Service" or {"type", "finalizers"} & data["object"].keys()):
        raise InvalidDelta("ENDPOINTS goes with kind Service and an object without Service fields")
    return Delta(
        kind=data["kind"],
        type=data["type"],
        key=data["key"],
        uid=data["uid"],
        resource_version=data["resourceVersion"],
        observed_at=float(data["observedAt"]),
        object=data["object"],
        burst=int(data.get("burst", 1)),
    )


def hosts_delay(delta: Delta, now: float, bucket_seconds: float) -> float:
    """Seconds a HOSTS message still waits for the end of its coalescing bucket (0: process it now). A
    `notBefore` further ahead than one bucket (plus clock skew) could hold the Service's FIFO group for as long as
    it says: it is malformed (InvalidDelta), whatever `observedAt` claims."""
    if delta.type != "HOSTS":
        return 0.0
    not_before = float(delta.object.get("notBefore", 0))
    if not_before - now > bucket_seconds + HOSTS_CLOCK_SKEW_SECONDS:
        raise InvalidDelta(f"HOSTS notBefore is {not_before - now:.0f} s ahead; at most {bucket_seconds:g} s allowed")
    return max(0.0, not_before - now)


def _meta(obj: dict[str, Any]) -> dict[str, Any]:
    meta: dict[str, Any] = obj.get("metadata") or {}
    return meta


# In the object of the sweeper's SYNC: it saw drift, so the reconcile must read AWS in full instead of trusting its
# checkpoint of what was applied (a forged flag costs one full read, nothing more).
REPAIR: Final = "repair"


def trim_service(svc: dict[str, Any]) -> dict[str, Any]:
    """The fields a service reconciler (or a relevance filter) needs; never the whole object."""
    meta, spec = _meta(svc), svc.get("spec") or {}
    annotations = {k: v for k, v in (meta.get("annotations") or {}).items() if k.startswith(LB_ANNOTATION_PREFIXES)}
    trimmed: dict[str, Any] = {
        "type": spec.get("type", "ClusterIP"),
        "finalizers": list(meta.get("finalizers") or []),
        "annotations": annotations,
        "ports": [
            {k: p[k] for k in ("name", "protocol", "port", "nodePort") if k in p} for p in spec.get("ports") or []
        ],
    }
    # Every spec field the reconciler reads (upstream needsUpdate compares them too): a change to one of them must
    # change the fingerprint, or the watcher drops it as "unchanged".
    for src, dst in (
        (spec, "loadBalancerClass"),
        (spec, "externalTrafficPolicy"),
        (spec, "healthCheckNodePort"),
        (spec, "loadBalancerSourceRanges"),
        (spec, "sessionAffinity"),
        (spec, "loadBalancerIP"),
        (meta, "deletionTimestamp"),
    ):
        if src.get(dst) is not None:
            trimmed[dst] = src[dst]
    return trimmed


def trim_node(node: dict[str, Any]) -> dict[str, Any]:
    """Node fields that matter to membership, initialisation and routes (no images, no heartbeats)."""
    meta, spec, status = _meta(node), node.get("spec") or {}, node.get("status") or {}
    ready = next((c.get("status") for c in status.get("conditions") or [] if c.get("type") == "Ready"), "Unknown")
    trimmed: dict[str, Any] = {
        "labels": dict(meta.get("labels") or {}),
        "taints": [{k: t[k] for k in ("key", "value", "effect") if k in t} for t in spec.get("taints") or []],
        "providerID": spec.get("providerID", ""),
        "podCIDRs": list(spec.get("podCIDRs") or ([spec["podCIDR"]] if spec.get("podCIDR") else [])),
        "addresses": [{"type": a.get("type"), "address": a.get("address")} for a in status.get("addresses") or []],
        "ready": ready,
        "unschedulable": bool(spec.get("unschedulable", False)),
    }
    if meta.get("deletionTimestamp") is not None:
        trimmed["deletionTimestamp"] = meta["deletionTimestamp"]
    return trimmed


def delta_for(kind: str, event_type: str, obj: dict[str, Any], observed_at: float | None = None) -> Delta:
    """Build the delta for a Kubernetes object (a plain JSON dict) observed by the watcher."""
    meta = _meta(obj)
    if kind == "Service":
        key, trimmed = f"{meta['namespace']}/{meta['name']}", trim_service(obj)
    elif kind == "Node":
        key, trimmed = str(meta["name"]), trim_node(obj)
    else:
        raise ValueError(f"unknown kind {kind!r}")
    return Delta(
        kind=kind,
        type=event_type,
        key=key,
        uid=str(meta.get("uid", "")),
        resource_version=str(meta.get("resourceVersion", "")),
        observed_at=time.time() if observed_at is None else observed_at,
        object=trimmed,
    )


def heartbeat_for(replica: str, now: float, period_seconds: float) -> Delta:
    """The watcher's heartbeat for the period containing `now`; equal dedup ids for every replica."""
    period = max(1, int(period_seconds))
    return Delta(
        kind=WATCHER_KIND,
        type=HEARTBEAT,
        key=HEARTBEAT_KEY,
        uid="heartbeat",
        resource_version=str(int(now) // period * period),
        observed_at=now,
        object={"replica": replica[:253]},
    )


def endpoints_hint(
    key: str,
    uid: str,
    slices: Mapping[str, str],
    deleted: Mapping[str, str],
    observed_at: float,
    changes: int = 1,
) -> Delta:
    """The ENDPOINTS hint for Service `key` (uid: the Service's). `slices`: name -> resourceVersion of its slices now;
    `deleted`: name -> last resourceVersion of those deleted since the previous hint (module docstring)."""
    state = [sorted(slices.items()), sorted(deleted.items())]
    digest = hashlib.blake2b(json.dumps(state, separators=(",", ":")).encode(), digest_size=16).hexdigest()
    return Delta(
        kind="Service",
        type=ENDPOINTS,
        key=key,
        uid=uid,
        resource_version=f"endpoints-{digest}",
        observed_at=observed_at,
        object={"slices": len(slices), "deleted": len(deleted), "changes": changes},
    )
