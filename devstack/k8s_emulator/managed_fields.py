"""metadata.managedFields, as kube-apiserver's field manager keeps them on every write.

Who wrote: the `fieldManager` query parameter, else the User-Agent up to its first "/" (the apiserver's
prefixFromUserAgent), at most 128 characters. One entry per (manager, operation, subresource): `Update` for create,
replace and patch, `Apply` for server-side apply; `apiVersion`, `time` (RFC 3339, seconds), `fieldsType: FieldsV1`
and `fieldsV1`, the fields the entry owns. A write that changes nothing changes no entry. The fields a write changes
move to its entry from every other `Update` entry; an entry left owning nothing is removed.

Approximation (docs/emulator.md): fieldsV1 names maps by key (`f:<name>`) down to the leaves, but a list is one
leaf (`f:ports`), not its items (`k:{...}` / `v:...`), and there are no `.` ownership markers of the maps
themselves; Apply conflicts are not detected.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any, Final

Obj = dict[str, Any]
Path = tuple[str, ...]

MAX_MANAGER_LENGTH: Final = 128
# What the server sets or that identifies the object: never anyone's field.
_NOT_FIELDS: Final = frozenset(
    {
        "name",
        "namespace",
        "uid",
        "resourceVersion",
        "generation",
        "creationTimestamp",
        "deletionTimestamp",
        "deletionGracePeriodSeconds",
        "managedFields",
        "selfLink",
    }
)


@dataclass(frozen=True)
class Writer:
    manager: str
    operation: str = "Update"  # or "Apply"


IN_PROCESS = Writer("devstack")  # writes made by the devstack itself (Emulator.create/update), not over HTTP


def writer_of(field_manager: str | None, user_agent: str, apply: bool = False) -> Writer:
    manager = field_manager or user_agent.split("/", 1)[0]
    return Writer(manager[:MAX_MANAGER_LENGTH], "Apply" if apply else "Update")


def _paths(value: Any, prefix: Path = ()) -> set[Path]:
    if isinstance(value, dict) and value:
        out: set[Path] = set()
        for key, item in value.items():
            out |= _paths(item, (*prefix, key))
        return out
    return {prefix}


def _fields(obj: Obj | None, subresource: str | None) -> dict[Path, Any]:
    """Leaf path -> value of what a writer of this (sub)resource may own."""
    if obj is None:
        return {}
    out: dict[Path, Any] = {}
    for top, value in obj.items():
        if top in ("apiVersion", "kind") or (top == "status") != (subresource == "status"):
            continue
        if top == "metadata" and isinstance(value, dict):
            value = {k: v for k, v in value.items() if k not in _NOT_FIELDS}
            if not value:
                continue
        for path in _paths(value, (top,)):
            out[path] = _get(obj, path)
    return out


def _get(obj: Any, path: Path) -> Any:
    for key in path:
        obj = obj[key]
    return obj


def changed(old: Obj | None, new: Obj, subresource: str | None) -> set[Path]:
    """The leaves `new` sets to something `old` did not have."""
    before, after = _fields(old, subresource), _fields(new, subresource)
    return {path for path, value in after.items() if path not in before or before[path] != value}


def to_fields_v1(paths: set[Path]) -> Obj:
    tree: Obj = {}
    for path in sorted(paths):
        node = tree
        for key in path:
            node = node.setdefault(f"f:{key}", {})
    return tree


def from_fields_v1(tree: Obj, prefix: Path = ()) -> set[Path]:
    out: set[Path] = set()
    for key, child in tree.items():
        if not key.startswith("f:"):
            continue
        path = (*prefix, key[2:])
        out |= from_fields_v1(child, path) if child else {path}
    return out


def record(
    entries: list[Obj],
    old: Obj | None,
    new: Obj,
    writer: Writer,
    api_version: str,
    subresource: str | None,
    now: str,
) -> list[Obj]:
    """The managedFields after `writer` wrote `new` over `old` (None: a create)."""
    taken = changed(old, new, subresource)
    if not taken and old is not None and _fields(old, subresource).keys() == _fields(new, subresource).keys():
        return copy.deepcopy(entries)
    present = set(_fields(new, None)) | set(_fields(new, "status"))
    key = (writer.manager, writer.operation, subresource)
    out: list[Obj] = []
    owned: set[Path] = set()
    for entry in entries:
        fields = from_fields_v1(entry.get("fieldsV1") or {}) & present  # a field removed is nobody's any more
        if (entry.get("manager"), entry.get("operation"), entry.get("subresource")) == key:
            owned = fields
            continue
        if entry.get("operation") == "Update":
            fields -= {p for p in fields if any(p[: len(t)] == t or t[: len(p)] == p for t in taken)}
        if fields:
            out.append({**copy.deepcopy(entry), "fieldsV1": to_fields_v1(fields)})
    mine: Obj = {
        "manager": writer.manager,
        "operation": writer.operation,
        "apiVersion": api_version,
        "time": now,
        "fieldsType": "FieldsV1",
        "fieldsV1": to_fields_v1(owned | taken),
    }
    if not owned | taken:
        return out
    if subresource:
        mine["subresource"] = subresource
    return [*out, mine]
