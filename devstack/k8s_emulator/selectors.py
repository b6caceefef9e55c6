"""Label and field selectors (the subset of apimachinery's grammar that clients send)."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .errors import bad_request

Obj = dict[str, Any]


@dataclass(frozen=True)
class Requirement:
    key: str
    op: str  # "=", "!=", "in", "notin", "exists", "!"
    values: tuple[str, ...] = ()

    def matches(self, labels: dict[str, str]) -> bool:
        present = self.key in labels
        value = labels.get(self.key)
        if self.op == "exists":
            return present
        if self.op == "!":
            return not present
        if self.op == "=":
            return present and value == self.values[0]
        if self.op == "!=":
            return not present or value != self.values[0]
        if self.op == "in":
            return present and value in self.values
        if self.op == "notin":
            return not present or value not in self.values
        return False


_KEY = r"[A-Za-z0-9]([-A-Za-z0-9_./]*[A-Za-z0-9])?"
_VALUE = r"([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?"
_SET_RE = re.compile(rf"^\s*({_KEY})\s+(in|notin)\s+\((.*)\)\s*$")
_EQ_RE = re.compile(rf"^\s*({_KEY})\s*(==|!=|=)\s*(\S*)\s*$")
_EXISTS_RE = re.compile(rf"^\s*(!?)\s*({_KEY})\s*$")


def _split_terms(selector: str) -> list[str]:
    # Commas inside "in (a,b)" belong to the set, not the term list.
    terms: list[str] = []
    depth = 0
    current = ""
    for ch in selector:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        if ch == "," and depth == 0:
            terms.append(current)
            current = ""
        else:
            current += ch
    terms.append(current)
    return [t for t in terms if t.strip()]


def parse_label_selector(selector: str | None) -> list[Requirement]:
    if not selector:
        return []
    reqs: list[Requirement] = []
    for term in _split_terms(selector):
        if m := _SET_RE.match(term):
            values = tuple(v.strip() for v in m.group(4).split(",") if v.strip())
            for v in values:
                if not re.fullmatch(_VALUE, v):
                    raise bad_request(f"unable to parse requirement: invalid label value: {v!r}")
            reqs.append(Requirement(m.group(1), m.group(3), values))
        elif m := _EQ_RE.match(term):
            value = m.group(4)
            if not re.fullmatch(_VALUE, value):
                raise bad_request(f"unable to parse requirement: invalid label value: {value!r}")
            reqs.append(Requirement(m.group(1), "!=" if m.group(3) == "!=" else "=", (value,)))
        elif m := _EXISTS_RE.match(term):
            reqs.append(Requirement(m.group(2), "!" if m.group(1) else "exists"))
        else:
            raise bad_request(f"unable to parse requirement: found '{term.strip()}', expected a valid selector")
    return reqs


def _lookup(obj: Obj, path: str) -> str:
    cur: Any = obj
    for part in path.split("."):
        cur = cur.get(part) if isinstance(cur, dict) else None
    if cur is None:
        return ""
    if isinstance(cur, bool):
        return "true" if cur else "false"
    if isinstance(cur, dict) and path == "source":
        return str(cur.get("component", ""))
    return str(cur)


def parse_field_selector(selector: str | None, allowed: frozenset[str]) -> list[tuple[str, str, str]]:
    """Returns (field, op, value) triples; unsupported fields are a 400 like the real server."""
    if not selector:
        return []
    out: list[tuple[str, str, str]] = []
    for term in selector.split(","):
        if not term.strip():
            continue
        m = re.match(r"^\s*([^=!\s]+)\s*(==|!=|=)\s*(.*?)\s*$", term)
        if not m:
            raise bad_request(f"invalid selector: '{selector}'; can't understand '{term}'")
        fld, op, value = m.group(1), m.group(2), m.group(3)
        if fld not in allowed and fld not in ("metadata.name", "metadata.namespace"):
            raise bad_request(f'"{fld}" is not a known field selector: only "metadata.name", "metadata.namespace"')
        out.append((fld, "!=" if op == "!=" else "=", value))
    return out


def make_filter(labels: list[Requirement], fields: list[tuple[str, str, str]]) -> Callable[[Obj], bool]:
    def matches(obj: Obj) -> bool:
        obj_labels = (obj.get("metadata") or {}).get("labels") or {}
        if not all(r.matches(obj_labels) for r in labels):
            return False
        for fld, op, value in fields:
            actual = _lookup(obj, fld)
            if (actual == value) != (op == "="):
                return False
        return True

    return matches
