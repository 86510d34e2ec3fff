"""Mapped paths that match nothing: a typo in `--url-field` (`context.page.uri`) leaves
every `utm_*` column null without an error, as one in `--keep-fields`, `--split-on-change`,
`--gap-field`, `--action-field` or a conversion's `value=` would.

Each partition task counts, among its valid events, those where each mapped field is
present (`count_present`: a null count per column, and two comparisons; no pass over the
lines). The driver adds the counts up over a run's batches and judges once: after the
first batch that brings the run to `CHECKED_EVENTS` valid events, or after a batch run's
last hour. A path absent or null in all of them is said in one warning line naming the
flag and the path, with the nearest field names a sample of the input holds ("did you mean
context.page.url?"); the batch record keeps the judgement (`status` shows it).

Judged: every path a mapping sets beyond the sample contract's (the default `--keep-fields`
and the `action` field are optional there: events without them are normal), the user id
with `--anonymous-field`; a conversion's value among that conversion's own events, when
there are some. The user (or anonymous id), time and page are required: a typo there
makes every line invalid, which `warnings` says.
"""

from __future__ import annotations

import difflib
import functools
import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import DataFrame
from pyspark.sql import types as T

from sessionize.base_schema import CHANGE_COLUMN, GAP_COLUMN, SENT_USER
from sessionize.events.rules import DEFAULT_ACTION
from sessionize.mapping import DEFAULT_KEEP, EventMapping
from sessionize.parsing import RECORDS_SCHEMA, parse

# The run's valid events after which the mapping is judged (a batch run: at its end too).
CHECKED_EVENTS = 1000
RECORD_KEY = "mapping_check"  # the batch record's field holding the judgement
EVENTS = "events"
_ACTIONS = "actions"  # events whose action is not the default one (`view`)
# Lines sampled from the input for the field names it holds, when a path matched nothing.
SAMPLE_LINES = 500


@dataclass(frozen=True)
class Judged:
    """One mapped path judged: `flag` and `spelled` as the user wrote them, `path` the
    path, `column` the event column it fills (or `conversion:NAME`)."""

    flag: str
    spelled: str
    path: str
    column: str
    among: str = EVENTS  # the count it is judged against
    events: str = "events"  # what those are, in words


def judged_paths(mapping: EventMapping) -> list[Judged]:
    """The mapped paths that are judged (see the module doc), in the flags' order."""
    m = mapping
    out = []
    if m.action != EventMapping().action:
        out.append(Judged("--action-field", m.action, m.action, _ACTIONS))
    if m.keep != DEFAULT_KEEP:
        out += [Judged("--keep-fields", f"{n}={p}", p, n) for n, p in m.keep]
    if m.change:
        out.append(Judged("--split-on-change", m.change, m.change, CHANGE_COLUMN))
    if m.gap:
        out.append(Judged("--gap-field", m.gap, m.gap, GAP_COLUMN))
    out += [Judged("--keep-fields", f"last:{n}={p}", p, n) for n, p in m.last]
    if m.anonymous:  # the user id is optional then: a typo would leave every user unknown
        out.append(Judged("--user-field", m.user, m.user, SENT_USER))
    out += [
        Judged(flag, path, path, name)
        for (flag, path), (name, _) in zip(m.mapped(), m.mapped_pairs, strict=True)
    ]
    out += [
        Judged(
            "--conversion",
            c.spell(),
            c.value,
            f"value:{c.name}",
            f"action:{c.name}",
            f"{c.action} events",
        )
        for c in m.content.conversions
        if c.value
    ]
    return out


def count_present(mapping: EventMapping, events: pa.Table) -> dict[str, int]:
    """Per judged path, the valid events in which it is present (not null); `events`: how
    many there are. Vectorized over a partition's valid events (`SessionSettings`)."""
    judged = judged_paths(mapping)
    if not judged:
        return {}
    counts = {EVENTS: events.num_rows}
    if not events.num_rows:
        return counts
    action = events.column("action")
    for j in judged:
        if j.column == _ACTIONS:
            counts[_ACTIONS] = _true(pc.not_equal(action, DEFAULT_ACTION))
        elif j.column.startswith("value:"):
            c = next(c for c in mapping.content.conversions if f"value:{c.name}" == j.column)
            theirs = pc.equal(action, c.action)
            counts[j.among] = _true(theirs)
            counts[j.column] = _true(pc.and_(theirs, pc.is_valid(events.column(c.value_column))))
        else:
            counts[j.column] = events.num_rows - events.column(j.column).null_count
    return counts


def _true(flags: pa.ChunkedArray | pa.Array) -> int:
    return int(pc.sum(flags.cast(pa.int64())).as_py() or 0)


def add_counts(total: dict[str, int], counts: Iterable[dict[str, int]]) -> dict[str, int]:
    out = dict(total)
    for c in counts:
        for k, v in c.items():
            out[k] = out.get(k, 0) + v
    return out


def unmatched(mapping: EventMapping, counts: dict[str, int]) -> list[Judged]:
    """The judged paths present in none of the counted events (a conversion's value: in
    none of its events, when there are some)."""
    out = []
    for j in judged_paths(mapping):
        if counts.get(j.column, 0) == 0 and counts.get(j.among, 0) > 0:
            out.append(j)
    return out


def judgement(mapping: EventMapping, counts: dict[str, int], names: set[str]) -> dict:
    """The record of the check: the events counted, and each path that matched nothing with
    the nearest names present."""
    return {
        EVENTS: counts.get(EVENTS, 0),
        "unmatched": [
            {
                "flag": j.flag,
                "spelled": j.spelled,
                "path": j.path,
                "events": counts.get(j.among, 0),
                "among": j.events,
                "nearest": nearest(j.path, names),
            }
            for j in unmatched(mapping, counts)
        ],
    }


def nearest(path: str, names: set[str], n: int = 3) -> list[str]:
    """The field names of `names` closest to `path` (dotted paths), best first."""
    return difflib.get_close_matches(path, sorted(names), n=n, cutoff=0.6)


def warning_lines(record: dict) -> list[str]:
    """One line per path of the batch record's judgement that matched nothing."""
    lines = []
    for u in (record.get(RECORD_KEY) or {}).get("unmatched", []):
        n = f"{u['events']:,}"
        if u["flag"] == "--action-field":
            what = f"each of the {n} events so far is a view (absent, null or view)"
        elif u["among"] == "events":
            what = f"absent or null in all {n} events so far"
        else:
            what = f"the value is absent or null in all {n} {u['among']} so far"
        hint = f"; did you mean {u['nearest'][0]}?" if u["nearest"] else ""  # the nearest
        lines.append(f"warning: {u['flag']} {u['spelled']} matched nothing: {what}{hint}")
    return lines


def field_names(lines: Iterable[str | None]) -> set[str]:
    """Every dotted path (objects and values) the JSON objects among `lines` hold."""
    names: set[str] = set()
    for line in lines:
        try:
            doc = json.loads(line) if line else None
        except ValueError:
            continue
        stack = [("", doc)] if isinstance(doc, dict) else []
        while stack:
            prefix, node = stack.pop()
            for key, value in node.items():
                path = f"{prefix}{key}"
                names.add(path)
                if isinstance(value, dict):
                    stack.append((path + ".", value))
    return names


class MappingCheck:
    """A run's check of its mapping: the counts added up batch by batch, judged once."""

    def __init__(self, mapping: EventMapping) -> None:
        self.mapping = mapping
        self.counts: dict[str, int] = {}
        self.done = not judged_paths(mapping)  # nothing to judge

    def after_batch(
        self, seen: dict[str, int], last: bool, names: Callable[[], set[str]]
    ) -> dict | None:
        """The judgement to record with this batch, or None: not yet, or done already.
        `names` gives the field names the input holds; asked only when a path matched
        nothing (it reads a sample of the batch)."""
        if self.done:
            return None
        self.counts = add_counts(self.counts, [seen])
        events = self.counts.get(EVENTS, 0)
        if events < CHECKED_EVENTS and not (last and events):
            return None
        self.done = True
        found = names() if unmatched(self.mapping, self.counts) else set()
        return judgement(self.mapping, self.counts, found)


def input_names(raw: DataFrame, parser: Callable[..., DataFrame]) -> set[str]:
    """The field names (dotted paths) a sample of a batch's input holds: of its first JSON
    lines, or a typed DataFrame's columns. A Parquet tree's rows hold the mapped paths
    only: none to suggest from."""
    func = parser.func if isinstance(parser, functools.partial) else parser
    options = parser.keywords if isinstance(parser, functools.partial) else {}
    if func is parse:
        decode = options.get("decode")
        records = raw if decode is None else raw.mapInArrow(decode, RECORDS_SCHEMA)
        lines = [r[0] for r in records.select("value").limit(SAMPLE_LINES).collect()]
        return field_names(lines)
    if {"error", "source", "raw"} <= set(raw.columns):  # a Parquet tree's typed rows
        return set()
    return _struct_names(raw.schema)


def _struct_names(schema: T.StructType, prefix: str = "") -> set[str]:
    names: set[str] = set()
    for f in schema.fields:
        names.add(prefix + f.name)
        if isinstance(f.dataType, T.StructType):
            names |= _struct_names(f.dataType, f"{prefix}{f.name}.")
    return names
