"""JSON merge patch (RFC 7386), JSON patch (RFC 6902) and strategic merge patch.

Strategic merge needs per-type knowledge of list merge keys; the real API server reads Go struct
tags (``patchStrategy``/``patchMergeKey``). ``SMP_LIST_KEYS`` carries the tags of the fields our
resources have: a merge key string for lists of objects, ``""`` for primitive lists merged as sets.
Any list not listed here is replaced wholesale, exactly like atomic lists in the real server
(notably ``spec.taints`` on Node and ``status.loadBalancer.ingress`` on Service).
"""

from __future__ import annotations

import copy
from typing import Any

_COMMON: dict[tuple[str, ...], str] = {
    ("metadata", "finalizers"): "",
    ("metadata", "ownerReferences"): "uid",
}

SMP_LIST_KEYS: dict[str, dict[tuple[str, ...], str]] = {
    "Service": {("spec", "ports"): "port", ("status", "conditions"): "type"},
    "Node": {
        ("spec", "podCIDRs"): "",
        ("status", "conditions"): "type",
        ("status", "addresses"): "type",
        ("status", "volumesAttached"): "name",
    },
    "Namespace": {("status", "conditions"): "type"},
    # core/v1 PodSpec / PodStatus patchMergeKeys (containers by name, conditions by type, podIPs by ip).
    "Pod": {
        ("spec", "containers"): "name",
        ("spec", "initContainers"): "name",
        ("status", "conditions"): "type",
        ("status", "podIPs"): "ip",
    },
}


class PatchError(ValueError):
    """The patch could not be applied (maps to 422, like the real server)."""


class MalformedPatch(ValueError):
    """The patch document itself is not valid (maps to 400)."""


# ---------------------------------------------------------------- JSON merge patch


def merge_patch(target: Any, patch: Any) -> Any:
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = copy.deepcopy(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


# ---------------------------------------------------------------- JSON patch


def _pointer(path: str) -> list[str]:
    if path == "":
        return []
    if not path.startswith("/"):
        raise PatchError(f"JSON pointer must start with '/': {path!r}")
    return [p.replace("~1", "/").replace("~0", "~") for p in path[1:].split("/")]


def _index(container: list[Any], token: str, allow_end: bool) -> int:
    if token == "-" and allow_end:
        return len(container)
    if not token.isdigit():
        raise PatchError(f"invalid array index {token!r}")
    idx = int(token)
    limit = len(container) if allow_end else len(container) - 1
    if idx > limit:
        raise PatchError(f"array index {idx} out of bounds")
    return idx


def _parent(doc: Any, parts: list[str]) -> Any:
    cur = doc
    for token in parts[:-1]:
        if isinstance(cur, dict):
            if token not in cur:
                raise PatchError(f"missing path element {token!r}")
            cur = cur[token]
        elif isinstance(cur, list):
            cur = cur[_index(cur, token, False)]
        else:
            raise PatchError(f"cannot traverse into {token!r}")
    return cur


def _get(doc: Any, path: str) -> Any:
    parts = _pointer(path)
    if not parts:
        return doc
    parent = _parent(doc, parts)
    last = parts[-1]
    if isinstance(parent, dict):
        if last not in parent:
            raise PatchError(f"path {path!r} does not exist")
        return parent[last]
    if isinstance(parent, list):
        return parent[_index(parent, last, False)]
    raise PatchError(f"path {path!r} does not exist")


def _add(doc: Any, path: str, value: Any) -> Any:
    parts = _pointer(path)
    if not parts:
        return value
    parent = _parent(doc, parts)
    last = parts[-1]
    if isinstance(parent, dict):
        parent[last] = value
    elif isinstance(parent, list):
        parent.insert(_index(parent, last, True), value)
    else:
        raise PatchError(f"cannot add at {path!r}")
    return doc


def _remove(doc: Any, path: str) -> Any:
    parts = _pointer(path)
    if not parts:
        raise PatchError("cannot remove the document root")
    parent = _parent(doc, parts)
    last = parts[-1]
    if isinstance(parent, dict):
        if last not in parent:
            raise PatchError(f"unable to remove nonexistent key: {last}: missing value")
        del parent[last]
    elif isinstance(parent, list):
        del parent[_index(parent, last, False)]
    else:
        raise PatchError(f"cannot remove {path!r}")
    return doc


def json_patch(target: Any, ops: Any) -> Any:
    if not isinstance(ops, list):
        raise MalformedPatch("json patch must be a list of operations")
    doc = copy.deepcopy(target)
    for op in ops:
        if not isinstance(op, dict) or "op" not in op or "path" not in op:
            raise MalformedPatch(f"invalid json patch operation: {op!r}")
        kind, path = op["op"], op["path"]
        if kind == "add":
            doc = _add(doc, path, copy.deepcopy(op.get("value")))
        elif kind == "remove":
            doc = _remove(doc, path)
        elif kind == "replace":
            _get(doc, path)  # must exist
            doc = _add(_remove(doc, path), path, copy.deepcopy(op.get("value"))) if _pointer(path) else op["value"]
        elif kind == "move":
            value = _get(doc, op["from"])
            doc = _add(_remove(doc, op["from"]), path, value)
        elif kind == "copy":
            doc = _add(doc, path, copy.deepcopy(_get(doc, op["from"])))
        elif kind == "test":
            if _get(doc, path) != op.get("value"):
                raise PatchError(f"testing value {path} failed: test failed")
        else:
            raise MalformedPatch(f"unknown json patch operation {kind!r}")
    return doc


# ---------------------------------------------------------------- strategic merge patch

_DELETE_PRIMITIVE = "$deleteFromPrimitiveList/"
_SET_ORDER = "$setElementOrder/"


def _strip(value: Any) -> Any:
    """Remove SMP directives from values that are inserted verbatim."""
    if isinstance(value, dict):
        return {k: _strip(v) for k, v in value.items() if not k.startswith("$")}
    if isinstance(value, list):
        return [_strip(v) for v in value if not (isinstance(v, dict) and v.get("$patch") == "delete")]
    return copy.deepcopy(value)


def strategic_merge_patch(target: Any, patch: Any, kind: str) -> Any:
    if not isinstance(patch, dict):
        raise MalformedPatch("strategic merge patch must be a JSON object")
    keys = dict(_COMMON)
    keys.update(SMP_LIST_KEYS.get(kind, {}))
    base = target if isinstance(target, dict) else {}
    return _merge_map(base, patch, (), keys)


def _merge_map(
    orig: dict[str, Any], patch: dict[str, Any], path: tuple[str, ...], keys: dict[tuple[str, ...], str]
) -> dict[str, Any]:
    directive = patch.get("$patch")
    if directive == "replace":
        return _strip(patch)
    result = copy.deepcopy(orig)
    # Deletions from primitive lists first, so a patch that also adds to that list keeps its additions.
    for key, value in patch.items():
        if key.startswith(_DELETE_PRIMITIVE):
            name = key[len(_DELETE_PRIMITIVE) :]
            if isinstance(result.get(name), list) and isinstance(value, list):
                result[name] = [x for x in result[name] if x not in value]
    orders: dict[str, list[Any]] = {}
    for key, value in patch.items():
        if key.startswith(_SET_ORDER):
            if isinstance(value, list):
                orders[key[len(_SET_ORDER) :]] = value
            continue
        if key.startswith("$"):
            continue
        sub = (*path, key)
        if value is None:
            result.pop(key, None)
        elif isinstance(value, dict):
            if value.get("$patch") == "delete":
                result.pop(key, None)
            elif isinstance(result.get(key), dict):
                result[key] = _merge_map(result[key], value, sub, keys)
            else:
                result[key] = _merge_map({}, value, sub, keys)
        elif isinstance(value, list):
            merged = _merge_list(result.get(key), value, sub, keys)
            if _is_merged(result.get(key), value, keys.get(sub)):
                merged = _normalize_order(merged, orders.get(key, value), result[key], keys[sub])
            result[key] = merged
        else:
            result[key] = copy.deepcopy(value)
    for name, order in orders.items():
        merge_key = keys.get((*path, name))
        if name not in patch and merge_key is not None and isinstance(result.get(name), list):
            result[name] = _normalize_order(result[name], order, result[name], merge_key)
    return result


def _is_merged(orig: Any, patch: list[Any], merge_key: str | None) -> bool:
    """The list was merged item by item (not replaced): the only case upstream re-orders."""
    replace = any(isinstance(i, dict) and i.get("$patch") == "replace" and len(i) == 1 for i in patch)
    return merge_key is not None and not replace and isinstance(orig, list)


def _normalize_order(merged: list[Any], patch_order: list[Any], server_order: list[Any], merge_key: str) -> list[Any]:
    """apimachinery strategicpatch normalizeElementOrder + mergeSortedSlice: the patch's items in patch (or
    $setElementOrder) order, the server-only items in server order, interleaved by server order; an item the
    server did not have goes before the server-only item it meets (so a new item is not simply appended)."""

    def ident(item: Any) -> str:
        return json_key(item.get(merge_key) if merge_key and isinstance(item, dict) else item)

    wanted = [o for o in patch_order if not (isinstance(o, dict) and o.get("$patch") in ("delete", "replace"))]
    patch_rank = {ident(o): n for n, o in reversed(list(enumerate(wanted)))}
    server_rank = {ident(o): n for n, o in reversed(list(enumerate(server_order)))}
    patch_items = sorted((m for m in merged if ident(m) in patch_rank), key=lambda m: patch_rank[ident(m)])
    server_only = sorted(
        (m for m in merged if ident(m) not in patch_rank), key=lambda m: server_rank.get(ident(m), len(server_rank))
    )
    out: list[Any] = []
    i = j = 0
    while i < len(server_only) or j < len(patch_items):
        if j >= len(patch_items):
            out.append(server_only[i])
            i += 1
        elif i >= len(server_only):
            out.append(patch_items[j])
            j += 1
        else:
            left, right = server_rank.get(ident(server_only[i])), server_rank.get(ident(patch_items[j]))
            if left is not None and right is not None and left < right:
                out.append(server_only[i])
                i += 1
            else:
                out.append(patch_items[j])
                j += 1
    return out


def _merge_list(orig: Any, patch: list[Any], path: tuple[str, ...], keys: dict[tuple[str, ...], str]) -> list[Any]:
    merge_key = keys.get(path)
    replace = any(isinstance(i, dict) and i.get("$patch") == "replace" and len(i) == 1 for i in patch)
    items = [i for i in patch if not (isinstance(i, dict) and i.get("$patch") == "replace" and len(i) == 1)]
    if merge_key is None or replace or not isinstance(orig, list):
        return [_strip(i) for i in items if not (isinstance(i, dict) and i.get("$patch") == "delete")]
    result = copy.deepcopy(orig)
    if merge_key == "":
        for item in items:
            if item not in result:
                result.append(copy.deepcopy(item))
        return result
    for item in items:
        if not isinstance(item, dict):
            raise PatchError(f"list item at {'.'.join(path)} must be an object with merge key {merge_key!r}")
        if merge_key not in item:
            raise PatchError(f"map: {item} does not contain declared merge key: {merge_key}")
        idx = next(
            (n for n, o in enumerate(result) if isinstance(o, dict) and o.get(merge_key) == item[merge_key]), None
        )
        if item.get("$patch") == "delete":
            result = [o for o in result if not (isinstance(o, dict) and o.get(merge_key) == item[merge_key])]
        elif idx is None:
            result.append(_strip(item))
        else:
            result[idx] = _merge_map(result[idx], item, path, keys)
    return result


def json_key(value: Any) -> str:
    return repr(value)
