"""Decode the protobuf request bodies kubectl sends for built-in types (`kubectl create namespace|configmap|...`).

kubectl (client-go) encodes typed objects as `application/vnd.kubernetes.protobuf`: the magic `k8s\\x00`, then a
`runtime.Unknown` (typeMeta = 1, raw = 2, contentEncoding = 3, contentType = 4) whose `raw` is the object in the
wire format of k8s.io/api's generated.proto. It does not fall back to JSON when the server answers 415 (checked
with kubectl 1.32), so the emulator decodes the few kinds kubectl's `create` subcommands send for the resources it
serves, into the same JSON dict a JSON body would give; anything else is answered 415 (see docs/emulator.md).
Field numbers are those of k8s.io/api core/v1 and apimachinery meta/v1 generated.proto.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

MAGIC = b"k8s\x00"

# field number -> (JSON name, type, nested schema). Types: str, int, bool (kept even when false: *bool fields),
# msg, msgs (repeated message), strs (repeated string), map (map<string,string>), ios (IntOrString).
Schema = dict[int, tuple[str, str, Any]]

_TYPE_META: Schema = {1: ("apiVersion", "str", None), 2: ("kind", "str", None)}
_UNKNOWN: Schema = {1: ("typeMeta", "msg", _TYPE_META), 2: ("raw", "bytes", None), 4: ("contentType", "str", None)}
_OWNER_REF: Schema = {
    1: ("kind", "str", None),
    3: ("name", "str", None),
    4: ("uid", "str", None),
    5: ("apiVersion", "str", None),
    6: ("controller", "bool", None),
    7: ("blockOwnerDeletion", "bool", None),
}
_OBJECT_META: Schema = {
    1: ("name", "str", None),
    2: ("generateName", "str", None),
    3: ("namespace", "str", None),
    5: ("uid", "str", None),
    6: ("resourceVersion", "str", None),
    11: ("labels", "map", None),
    12: ("annotations", "map", None),
    13: ("ownerReferences", "msgs", _OWNER_REF),
    14: ("finalizers", "strs", None),
}
_SERVICE_PORT: Schema = {
    1: ("name", "str", None),
    2: ("protocol", "str", None),
    3: ("port", "int", None),
    4: ("targetPort", "ios", None),
    5: ("nodePort", "int", None),
    6: ("appProtocol", "str", None),
}
_SERVICE_SPEC: Schema = {
    1: ("ports", "msgs", _SERVICE_PORT),
    2: ("selector", "map", None),
    3: ("clusterIP", "str", None),
    4: ("type", "str", None),
    5: ("externalIPs", "strs", None),
    7: ("sessionAffinity", "str", None),
    8: ("loadBalancerIP", "str", None),
    9: ("loadBalancerSourceRanges", "strs", None),
    10: ("externalName", "str", None),
    11: ("externalTrafficPolicy", "str", None),
    12: ("healthCheckNodePort", "int", None),
    17: ("ipFamilyPolicy", "str", None),
    18: ("clusterIPs", "strs", None),
    19: ("ipFamilies", "strs", None),
    20: ("allocateLoadBalancerNodePorts", "bool", None),
    21: ("loadBalancerClass", "str", None),
    22: ("internalTrafficPolicy", "str", None),
}
_META = (1, ("metadata", "msg", _OBJECT_META))
KINDS: dict[str, Schema] = {
    "Namespace": dict([_META, (2, ("spec", "msg", {1: ("finalizers", "strs", None)}))]),
    "ConfigMap": dict([_META, (2, ("data", "map", None)), (4, ("immutable", "bool", None))]),
    "ServiceAccount": dict([_META, (4, ("automountServiceAccountToken", "bool", None))]),
    "Service": dict([_META, (2, ("spec", "msg", _SERVICE_SPEC))]),
}


class UndecodableBody(ValueError):
    """Not a protobuf body the emulator knows how to read."""


def _varint(buf: bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if pos >= len(buf):
            raise UndecodableBody("truncated varint")
        byte = buf[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, pos
        shift += 7


def _fields(buf: bytes) -> Iterator[tuple[int, int | bytes]]:
    pos = 0
    while pos < len(buf):
        key, pos = _varint(buf, pos)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, pos = _varint(buf, pos)
            yield number, value
        elif wire == 2:
            length, pos = _varint(buf, pos)
            if pos + length > len(buf):
                raise UndecodableBody("truncated field")
            yield number, buf[pos : pos + length]
            pos += length
        elif wire in (1, 5):
            pos += 8 if wire == 1 else 4  # fixed64 / fixed32: no field we read uses them
        else:
            raise UndecodableBody(f"unsupported wire type {wire}")


def _signed(value: int) -> int:
    return value - (1 << 64) if value >= 1 << 63 else value


def _message(buf: bytes, schema: Schema) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for number, raw in _fields(buf):
        if number not in schema:
            continue  # status, timestamps, managedFields: the server sets or ignores them
        name, kind, nested = schema[number]
        if kind in ("int", "bool"):
            if not isinstance(raw, int):
                raise UndecodableBody(f"{name}: expected a varint")
            out[name] = bool(raw) if kind == "bool" else _signed(raw)
            continue
        if not isinstance(raw, bytes):
            raise UndecodableBody(f"{name}: expected bytes")
        if kind == "str":
            out[name] = raw.decode()
        elif kind == "bytes":
            out[name] = raw
        elif kind == "strs":
            out.setdefault(name, []).append(raw.decode())
        elif kind == "msg":
            out[name] = _message(raw, nested)
        elif kind == "msgs":
            out.setdefault(name, []).append(_message(raw, nested))
        elif kind == "map":
            entry = _message(raw, {1: ("k", "str", None), 2: ("v", "str", None)})
            out.setdefault(name, {})[entry.get("k", "")] = entry.get("v", "")
        elif kind == "ios":
            value = _message(raw, {1: ("type", "int", None), 2: ("int", "int", None), 3: ("str", "str", None)})
            out[name] = value.get("str", "") if value.get("type") == 1 else value.get("int", 0)
    # Go's generated code writes empty strings and zero numbers of non-pointer fields; JSON would omit them.
    return {k: v for k, v in out.items() if v not in ("", 0) or isinstance(v, bool)}


def decode(body: bytes) -> dict[str, Any]:
    """The object of a kubectl protobuf body as a JSON-shaped dict; UndecodableBody if it is not one we read."""
    if not body.startswith(MAGIC):
        raise UndecodableBody("missing the k8s protobuf magic prefix")
    unknown = _message(body[len(MAGIC) :], _UNKNOWN)
    type_meta = unknown.get("typeMeta") or {}
    kind = str(type_meta.get("kind", ""))
    if kind not in KINDS:
        raise UndecodableBody(f"protobuf bodies of kind {kind or '?'} are not supported")
    obj = _message(unknown.get("raw", b""), KINDS[kind])
    obj["apiVersion"], obj["kind"] = type_meta.get("apiVersion", "v1"), kind
    return obj
