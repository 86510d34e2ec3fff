"""JSON lines -> typed Arrow event columns, in the Python task that read them.

Each line is decoded by `orjson` (strict RFC 8259) and checked against the rule table
(`rules.read_fields`); the event time is converted for the whole batch at once (`times`).
A line gets the reason of the first rule it breaks, in the order of docs/design.md
("Events"): the source's error, `unreadable record`, `empty line`, `not a JSON object`,
`duplicate key: K`, the first field of a wrong type, a missing user or time, a time that is
not one, a missing page, a string id that cannot be a key, a time too far ahead.

Lines this strict reading does not decide are marked `exact = False` and decided by the
exact fallback (`parsing`), which reads them as Spark's JSON reader always has: lines that
are not strict JSON (Spark also reads `NaN`, single quotes, text after the object, escaped
lone surrogates as `?`), lines with a key twice in any object (the reason names the first
top-level one; a nested one keeps the last value), an integer field holding a fraction or
an exponent, a time ending in a line break, very deep or long lines, numbers of 1000
characters. They are rare.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterator
from dataclasses import dataclass

import orjson
import pyarrow as pa
import pyarrow.compute as pc

from sessionize.events import rules as R
from sessionize.events.keys import user_keys
from sessionize.events.times import JAVA_LINE_ENDS, epoch_micros, iso_micros
from sessionize.mapping import EventMapping

EXACT = "_exact"  # False: the line is left to the exact fallback
TS = pa.timestamp("us", tz="UTC")
USER_KEY = "user_key"
# Lines longer than this (characters), with more brackets than this, or with a number of
# this many characters are left to the fallback: Spark's reader limits the length of names
# and numbers and the depth of nesting, where orjson's limits differ.
_LONG_LINE = 50_000
_DEEP = 900
_LONG_NUMBER = re.compile(r"[-+.eE0-9]{1000}")
_ESCAPED_COLON = ("\\u003a", "\\u003A")


@dataclass(frozen=True)
class JsonPlan:
    """What `parse_batch` needs of a mapping, computed once."""

    mapping: EventMapping
    schema: pa.Schema  # the output: event columns, reason, raw, source, EXACT
    # (index of the enclosing object's check or -1 for the line, key, Python type, path,
    # reason when of another type), enclosing objects first
    checks: tuple[tuple[int, str, type, str, str], ...]
    outputs: tuple[tuple[str, int], ...]  # (output column, index into `checks`)


@functools.lru_cache(maxsize=16)
def plan(mapping: EventMapping | None = None) -> JsonPlan:
    """The plan of `mapping` (the default mapping when None)."""
    m = mapping or EventMapping()
    fields = R.read_fields(m)
    index = {path: i for i, (path, _) in enumerate(fields)}
    python_type = {R.STRING: str, R.OBJECT: dict, R.INTEGER: int, R.NUMBER: float}
    checks = tuple(
        (index.get(path.rpartition(".")[0], -1), path.rpartition(".")[2], python_type[kind],
         path, R.expected(path, kind))
        for path, kind in fields
    )  # fmt: skip
    field_rules = R.field_rules(m)
    outputs = tuple((r.name, index[r.path]) for r in field_rules)
    user_type = pa.string() if m.string_keys else pa.int64()
    types = {"user_id": user_type, "event_time": TS}
    fields = [pa.field(r.name, types.get(r.name, pa.string())) for r in field_rules]
    if m.string_keys:
        fields.append(pa.field(USER_KEY, pa.int64()))
    fields += [pa.field(n, pa.string()) for n in ("reason", "raw", "source")]
    fields.append(pa.field(EXACT, pa.bool_()))
    return JsonPlan(m, pa.schema(fields), checks, outputs)


def _decode(value: str) -> dict | str | None:
    """A line -> its object, or a reason, or None when the strict reading cannot decide."""
    if len(value) > _DEEP and (
        len(value) > _LONG_LINE
        or value.count("{") + value.count("[") > _DEEP
        or _LONG_NUMBER.search(value) is not None
    ):
        return None
    try:
        doc = orjson.loads(value)
    except orjson.JSONDecodeError:
        return None
    if type(doc) is not dict:
        return R.NOT_OBJECT
    # A key given twice leaves one entry: the re-encoded text then has fewer `:` outside
    # strings, and strings keep theirs (unless one was written as an escape).
    if value.count(":") != orjson.dumps(doc).count(b":") or (
        "\\u003" in value and any(e in value for e in _ESCAPED_COLON)
    ):
        return None
    return doc


def parse_batch(
    batch: pa.RecordBatch, p: JsonPlan, now_us: int | None = None,
    max_future_us: int | None = None, keep_values: bool = False,
) -> pa.RecordBatch:  # fmt: skip
    """RECORD_SCHEMA rows (`value`, `error`, `source`) -> `p.schema` rows.

    With `now_us` and `max_future_us` a time more than that ahead of `now_us` is invalid.
    `keep_values` keeps every line in `raw`, valid ones too (for a caller that judges the
    time limit itself)."""
    values = batch.column("value").to_pylist()
    errors = batch.column("error").to_pylist()
    n = len(values)
    checks = p.checks
    width = len(checks)
    found: list[list] = [[None] * n for _ in range(width)]
    early: list[str | None] = [None] * n
    exact = [True] * n
    for row, (value, error) in enumerate(zip(values, errors, strict=True)):
        if error is not None:
            early[row] = error
            continue
        if value is None:
            early[row] = R.UNREADABLE
            continue
        doc = _decode(value)
        if doc is None:  # a blank line is no JSON either: asked only then
            if value.strip(" "):
                exact[row] = False
            early[row] = R.NOT_OBJECT if value.strip(" ") else R.EMPTY_LINE
            continue
        if type(doc) is str:
            early[row] = doc
            continue
        nodes = [None] * width
        for i, (parent, key, want, path, wrong) in enumerate(checks):
            holder = doc if parent < 0 else nodes[parent]
            if holder is None:
                continue
            node = holder.get(key)
            if node is None:
                continue
            t = type(node)
            if t is want:
                if t is int and not R.INT64_MIN <= node <= R.INT64_MAX:
                    early[row] = R.out_of_range(path)
                    break
            elif want is float and t is int:
                pass  # a number: an integer is one
            elif want is int and t is float:
                exact[row] = False  # Spark reads `1.0` and `1e3` each its own way
                early[row] = R.NOT_OBJECT
                break
            else:
                early[row] = wrong
                break
            nodes[i] = node
            found[i][row] = node
    return _columns(batch, p, found, early, exact, now_us, max_future_us, keep_values)


def _columns(
    batch: pa.RecordBatch, p: JsonPlan, found: list[list], early: list[str | None],
    exact: list[bool], now_us: int | None, max_future_us: int | None, keep_values: bool,
) -> pa.RecordBatch:  # fmt: skip
    m = p.mapping
    col = {name: found[i] for name, i in p.outputs}
    times = col["event_time"]
    if m.time_format == "iso8601":
        for row, t in enumerate(times):
            if t is not None and t.endswith(JAVA_LINE_ENDS):
                exact[row] = False
        event_time = iso_micros(pa.array(times, pa.string()))
    else:
        event_time = epoch_micros(times, m.time_format)
    user = pa.array(col["user_id"], pa.string() if m.string_keys else pa.int64())
    page = pa.array(col["page"], pa.string())
    reason = pa.array(early, pa.string())
    user_path, time_path = m.user, m.time
    present_time = pa.array([t is not None for t in times], pa.bool_())
    steps = [
        pc.if_else(pc.is_null(user), pa.scalar(R.missing(user_path)), pa.scalar(None, pa.string())),
        pc.if_else(present_time, pa.scalar(None, pa.string()), pa.scalar(R.missing(time_path))),
        pc.if_else(pc.is_null(event_time), pa.scalar(R.bad_time(time_path, m.time_format)),
                   pa.scalar(None, pa.string())),
        pc.if_else(pc.is_null(page), pa.scalar(R.missing(m.page)), pa.scalar(None, pa.string())),
    ]  # fmt: skip
    if m.string_keys:
        size = pc.binary_length(user)
        steps.append(
            pc.case_when(
                pc.make_struct(pc.equal(size, 0), pc.greater(size, R.KEY_BYTES)),
                pa.scalar(R.empty_key(user_path)), pa.scalar(R.long_key(user_path)),
            )
        )  # fmt: skip
    if now_us is not None and max_future_us is not None:
        ahead = pc.greater(event_time, pa.scalar(now_us + max_future_us))
        steps.append(
            pc.if_else(ahead, pa.scalar(R.too_far_ahead(time_path)), pa.scalar(None, pa.string()))
        )
    reason = pc.coalesce(reason, *steps)
    value = batch.column("value")
    exact_array = pa.array(exact, pa.bool_())
    raw_wanted = pc.or_(pc.is_valid(reason), pc.invert(exact_array))
    if keep_values:
        raw_wanted = pa.scalar(True)
    raw = pc.if_else(raw_wanted, value, pa.scalar(None, pa.string()))
    action = pc.coalesce(pa.array(col["action"], pa.string()), pa.scalar(R.DEFAULT_ACTION))
    columns = [user, event_time.cast(TS), page, action]
    columns += [pa.array(col[name], pa.string()) for name in m.attributes]
    if m.string_keys:
        columns.append(user_keys(col["user_id"]))
    columns += [reason, raw, batch.column("source"), exact_array]
    return pa.RecordBatch.from_arrays(columns, schema=p.schema)


def parse_task(
    p: JsonPlan, now_us: int | None, max_future_us: int | None, keep_values: bool,
    batches: Iterator[pa.RecordBatch],
) -> Iterator[pa.RecordBatch]:  # fmt: skip
    """`parse_batch` over a task's batches (a `mapInArrow` function)."""
    for batch in batches:
        yield parse_batch(batch, p, now_us, max_future_us, keep_values)
