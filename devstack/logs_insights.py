"""The CloudWatch Logs Insights subset the dashboard's log widgets use (observability.yaml), evaluated over the
functions' JSON log lines as the devstack keeps them (EventSourceRunner.timed_log_records: what each function
printed, with the time it was read, as CloudWatch Logs would ingest it).

Exactly this subset; parse() raises UnsupportedQuery for anything else, so a widget added later with another
command or function fails the devstack's dashboard (and tests/template/test_dashboard.py) instead of silently
drawing nothing:

    SOURCE 'log group' [| SOURCE 'log group' ...]
    | filter field = "text"          string equality on a top-level field of the JSON line (== also accepted)
    | filter ispresent(field)        the line has the field
    ...                              several filter stages: a line must pass all of them
    | stats agg [as name], ... by bin(N[smh])
                                     agg: pct(field, N) | avg(field) | sum(field) | max(field) | count(*)

As in Logs Insights, an aggregation ignores lines whose field is missing or not a number, and a bin without any
value for it has no datapoint. pct is the nearest-rank percentile (devstack.dashboard.statistic's).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

_FIELD = r"[A-Za-z_][A-Za-z0-9_]*"
_SOURCE = re.compile(r"SOURCE\s+'([^']+)'")
_FILTER_EQ = re.compile(rf'filter\s+({_FIELD})\s*==?\s*"([^"]*)"')
_FILTER_PRESENT = re.compile(rf"filter\s+ispresent\(\s*({_FIELD})\s*\)")
_STATS = re.compile(r"stats\s+(.+?)\s+by\s+bin\(\s*(\d+)\s*([smh])\s*\)")
_AGG = re.compile(rf"(pct|avg|sum|max|count)\(\s*(\*|{_FIELD})\s*(?:,\s*(\d+(?:\.\d+)?)\s*)?\)(?:\s+as\s+({_FIELD}))?")
_UNIT_SECONDS = {"s": 1, "m": 60, "h": 3600}


class UnsupportedQuery(ValueError):
    """A query outside the subset above."""


@dataclass(frozen=True, slots=True)
class Filter:
    field: str
    equals: str | None  # None: ispresent(field)

    def matches(self, line: Mapping[str, Any]) -> bool:
        if self.field not in line:
            return False
        return self.equals is None or line[self.field] == self.equals


@dataclass(frozen=True, slots=True)
class Aggregate:
    function: str  # pct | avg | sum | max | count
    field: str | None  # None: count(*)
    percentile: float | None
    name: str

    def value(self, values: list[float], lines: int) -> float | None:
        if self.function == "count":
            return float(lines)
        if not values:
            return None
        if self.function == "sum":
            return sum(values)
        if self.function == "avg":
            return sum(values) / len(values)
        if self.function == "max":
            return max(values)
        ordered = sorted(values)
        rank = math.ceil((self.percentile or 0) / 100 * len(ordered))
        return ordered[max(rank, 1) - 1]


@dataclass(frozen=True, slots=True)
class Query:
    sources: tuple[str, ...]
    filters: tuple[Filter, ...]
    aggregates: tuple[Aggregate, ...]
    bin_seconds: int

    @property
    def fields(self) -> frozenset[str]:
        """Every log field the query reads (its filters' and its aggregations')."""
        return frozenset([f.field for f in self.filters] + [a.field for a in self.aggregates if a.field])


def _stages(query: str) -> list[str]:
    """The query's commands, split on the pipes outside quotes."""
    stages, current, quote = [], "", ""
    for ch in query:
        if quote:
            quote = "" if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch == "|":
            stages.append(current.strip())
            current = ""
            continue
        current += ch
    if quote:
        raise UnsupportedQuery(f"unterminated quote in {query!r}")
    return [*stages, current.strip()]


def _aggregates(text: str) -> tuple[Aggregate, ...]:
    parts, depth, current = [], 0, ""
    for ch in text:
        depth += (ch == "(") - (ch == ")")
        if ch == "," and depth == 0:
            parts.append(current.strip())
            current = ""
        else:
            current += ch
    out = []
    for part in [*parts, current.strip()]:
        m = _AGG.fullmatch(part)
        if m is None:
            raise UnsupportedQuery(f"aggregation {part!r} is outside the supported subset")
        function, field, pct, name = m.groups()
        if (function == "pct") != (pct is not None) or (function == "count") != (field == "*"):
            raise UnsupportedQuery(f"aggregation {part!r} is outside the supported subset")
        expr = part.split(" as ")[0].strip()
        out.append(Aggregate(function, None if field == "*" else field, float(pct) if pct else None, name or expr))
    return tuple(out)


def parse(query: str) -> Query:
    """The query as the subset above, or UnsupportedQuery."""
    sources: list[str] = []
    filters: list[Filter] = []
    stats: tuple[tuple[Aggregate, ...], int] | None = None
    for stage in _stages(query):
        if stats is not None:
            raise UnsupportedQuery(f"{stage!r} after stats: the subset ends with stats ... by bin()")
        if m := _SOURCE.fullmatch(stage):
            if filters:
                raise UnsupportedQuery("SOURCE must come first")
            sources.append(m.group(1))
        elif m := _FILTER_EQ.fullmatch(stage):
            filters.append(Filter(m.group(1), m.group(2)))
        elif m := _FILTER_PRESENT.fullmatch(stage):
            filters.append(Filter(m.group(1), None))
        elif m := _STATS.fullmatch(stage):
            stats = (_aggregates(m.group(1)), int(m.group(2)) * _UNIT_SECONDS[m.group(3)])
        else:
            raise UnsupportedQuery(f"{stage!r} is outside the supported Logs Insights subset")
    if not sources or stats is None:
        raise UnsupportedQuery(f"{query!r}: the subset needs SOURCE first and stats ... by bin() last")
    return Query(tuple(sources), tuple(filters), stats[0], stats[1])


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def evaluate(
    query: Query, lines: Iterable[tuple[float, Mapping[str, Any]]], bin_seconds: int | None = None
) -> dict[str, list[tuple[float, float]]]:
    """Aggregation name -> (bin start, value) in time order, over (time, JSON line) of the query's sources.
    bin_seconds overrides the query's bin (a short demo)."""
    size = bin_seconds or query.bin_seconds
    bins: dict[float, list[Mapping[str, Any]]] = {}
    for at, line in lines:
        if all(f.matches(line) for f in query.filters):
            bins.setdefault(at - at % size, []).append(line)
    out: dict[str, list[tuple[float, float]]] = {a.name: [] for a in query.aggregates}
    for start, matched in sorted(bins.items()):
        for agg in query.aggregates:
            numbers = (_number(line.get(agg.field)) for line in matched) if agg.field else ()
            values = [v for v in numbers if v is not None]
            value = agg.value(values, len(matched))
            if value is not None:
                out[agg.name].append((start, value))
    return out
