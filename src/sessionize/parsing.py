"""Raw lines -> valid events and invalid lines, as data (docs/design.md, "Events").

`parse` reads JSON lines into typed Arrow columns in the task that holds them
(`events.blocks`: `pyarrow.json` a block at a time), so that what crosses into Spark is typed
event columns; the lines it refuses (rare: not strict JSON, a key twice, a wrong type) go
through `parse_exact`, Spark's own expressions, in the same projection. Given a source's
`decode` (e.g. `sources.files.decode_listed`), that task also reads the lines: from a file's
path to typed events in one Python task. Every line leaves
this stage either as a valid event or with a reason; nothing is dropped and nothing raises.

`parse_exact` runs in Spark's JVM (`from_json`). Types are checked for every field read.
`from_json` flags a wrong integer or object as a corrupt record, but silently turns a number,
boolean, object or array where a string belongs into its JSON text; so a line is suspect
when it is corrupt, has no valid time, or a string field reads like such a text (starts like
a number, object or array, or is a boolean). Only suspect lines get a second, exact parse
(`try_parse_json`, a variant) to find and name the field; a suspect line whose types are all
right (a page really named `5`) goes on as usual.

The fields, their paths and types come from an `EventMapping` (default: the sample
contract); reasons name the field by its path in the input.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, cast

import pyarrow as pa
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from sessionize.base_schema import CHANGE_COLUMN, GAP_COLUMN
from sessionize.events import blocks, json_types
from sessionize.events import number_text as N
from sessionize.events import rules as R
from sessionize.events.batch_time import FROM_JOB, NOW_COLUMN
from sessionize.events.blocks import EXACT
from sessionize.events.checks import bad_gap, gap_us, lone_surrogate, out_of_range, too_far_ahead
from sessionize.events.marks import LATEST, RECORDS, marked_schema
from sessionize.events.packing import PACKED, packed_schema
from sessionize.events.type_checks import json_schema, leaf, type_of, type_reason
from sessionize.mapping import MAX_USER_KEY_BYTES, EventMapping
from sessionize.schema import STATE_USER_KEY, layout
from sessionize.spark_casts import try_cast

if TYPE_CHECKING:
    from sessionize.events.reading import Decode

# The raw records' columns as Spark names them (what a `decode` yields).
RECORDS_SCHEMA = "value string, error string, source string"

# How Spark renders a non-string JSON value read as a string starts: a number, an object,
# an array; or it is a boolean.
_NON_STRING_START = ["-", *"0123456789", "{", "["]
# Parsed columns of the default mapping, in the order of schema.EVENT.
EVENT_COLUMNS = layout().event.names


def event_columns(mapping: EventMapping | None = None) -> list[str]:
    """The parsed event columns of `mapping`, in the order of its layout's event schema;
    with string user ids, the state key `user_key` follows."""
    lay = layout(mapping)
    return lay.event.names + ([STATE_USER_KEY] if lay.string_keys else [])


def fields(mapping: EventMapping | None = None) -> tuple[tuple[str, str], ...]:
    """(path, expected JSON type) of every field read, in the order their errors are
    reported (`events.rules.read_fields`)."""
    return R.read_fields(mapping)


def _duplicate(keys: Column) -> Column:
    """The first top-level key that occurs twice, or NULL."""
    # (array_remove takes a column as the element only from Spark 4.0 on)
    dup = F.filter(keys, lambda k: F.size(F.filter(keys, lambda o: o != k)) < F.size(keys) - 1)
    return F.when(F.size(F.array_distinct(keys)) < F.size(keys), F.try_element_at(dup, F.lit(1)))


def _suspect(mapping: EventMapping, j: Column, ts: Column) -> Column:
    """Whether a line may hold a field of the wrong type (see the module doc)."""
    suspect = j["_corrupt_record"].isNotNull() | ts.isNull()
    for path, kind in fields(mapping):
        if kind == "number":  # read as text: anything but a number (or numeric string)
            text = leaf(j, path)
            suspect = suspect | (text.isNotNull() & N.json_number(text).isNull())
            continue
        if kind != "string" or path == mapping.time:
            continue  # a valid ISO time starts with a digit; any other type has no valid time
        text = leaf(j, path)
        looks = F.substring(text, 1, 1).isin(_NON_STRING_START) | text.isin("true", "false")
        suspect = suspect | F.coalesce(looks, F.lit(False))
    return suspect


def _time(mapping: EventMapping, j: Column) -> tuple[Column, Column]:
    """(the event time as a timestamp or NULL, why a present time is not valid)."""
    raw = leaf(j, mapping.time)
    if mapping.time_format == "iso8601":
        ts = F.when(raw.rlike(R.ISO_8601), F.try_to_timestamp(raw))
        return ts, F.lit(R.FieldReason.NOT_ISO_8601.at(mapping.time))
    # A JSON number (or numeric string) of ms or s; a fraction is rounded to the nearest
    # microsecond (a double holds epoch ms with µs exactly enough for that).
    us = F.round(N.json_number(raw) * F.lit(float(R.EPOCH_UNIT_US[mapping.time_format])))
    in_range = us.between(float(R.MIN_US), float(R.MAX_US))
    ts = F.when(in_range, F.timestamp_micros(us.cast("long")))
    return ts, F.lit(R.bad_time(mapping.time, mapping.time_format))


def _user_reason(mapping: EventMapping, user: Column) -> Column | None:
    """Why a present string user id is not a valid key, or NULL."""
    if not mapping.string_keys:
        return None
    length = F.octet_length(user)
    return F.when(length == 0, F.lit(R.FieldReason.EMPTY_KEY.at(mapping.key_field))).when(
        length > MAX_USER_KEY_BYTES,
        F.lit(R.FieldReason.LONG_KEY.at(mapping.key_field)),
    )


def _reason(
    mapping: EventMapping,
    value: Column,
    j: Column,
    keys: Column,
    ts: Column,
    bad_time: Column,
    wrong_type: Column,
) -> Column:
    """Why a line is invalid, or NULL when it is a valid event; first failing rule wins."""
    corrupt = j["_corrupt_record"].isNotNull()
    dup = _duplicate(keys)
    user = leaf(j, mapping.key_field)
    reason = (
        F.when(value.isNull(), F.lit("unreadable record"))
        .when(F.trim(value) == "", F.lit("empty line"))
        .when(keys.isNull(), F.lit(R.NOT_OBJECT))
        .when(lone_surrogate(value), F.lit(R.LONE_SURROGATE))
        .when(dup.isNotNull(), F.concat(F.lit(R.DUPLICATE_KEY), dup))
        .when(wrong_type.isNotNull(), wrong_type)
        .when(corrupt, F.lit("a field has the wrong type"))
        .when(user.isNull(), F.lit(R.FieldReason.MISSING.at(mapping.key_field)))
        .when(leaf(j, mapping.time).isNull(), F.lit(R.FieldReason.MISSING.at(mapping.time)))
        .when(ts.isNull(), bad_time)
        .when(out_of_range(ts), F.lit(R.FieldReason.TIME_OUT_OF_RANGE.at(mapping.time)))
        .when(leaf(j, mapping.page).isNull(), F.lit(R.FieldReason.MISSING.at(mapping.page)))
    )
    if mapping.gap:
        gap = N.json_number(leaf(j, mapping.gap))
        reason = reason.when(bad_gap(gap), F.lit(R.FieldReason.BAD_GAP.at(mapping.gap)))
    reason = _conversion_reasons(mapping, value, j, reason)
    user_reason = _user_reason(mapping, user)
    return reason if user_reason is None else F.coalesce(reason, user_reason)


def _conversion_reasons(mapping: EventMapping, value: Column, j: Column, reason: Column):
    """A conversion's event whose value is there but neither a JSON number nor a string
    holding one is invalid, named by the value's path; other events' values are not read."""
    action = F.coalesce(leaf(j, mapping.action), F.lit("view"))
    for c in mapping.content.conversions:
        if not c.value:
            continue
        kind = type_of(json_types.parsed(value), c.value)
        number = N.number_kind(kind) | N.numeric_string(kind, leaf(j, c.value))
        mine = (action == c.action) & leaf(j, c.value).isNotNull()
        # A number beyond doubles (1e309, or "1e309") reads as Infinity: never a value.
        as_double = try_cast(leaf(j, c.value), "double")
        finite = (
            as_double.isNotNull()
            & ~F.isnan(as_double)
            & ~as_double.isin(float("inf"), float("-inf"))
        )
        reason = reason.when(mine & ~number, F.lit(R.expected(c.value, R.NUMBER))).when(
            mine & ~finite, F.lit(R.FieldReason.NUMBER_OUT_OF_RANGE.at(c.value))
        )
    return reason


def parse_exact(
    raw: DataFrame,
    *,
    now: Column | None = None,
    max_future_us: int | None = None,
    mapping: EventMapping | None = None,
) -> DataFrame:
    """`parse` with every line read by Spark's expressions: the exact path of the lines the
    block reader leaves to it, and the whole parse of a mapping it does not read.

    `raw(value string, error string, source string)` -> events with `reason` and `raw`.

    Output columns: `event_columns(mapping)`, then `reason` (NULL for valid events), `raw`
    (the line, kept only for invalid ones) and `source`. A source may pre-fill `error` (e.g.
    a record that is not UTF-8); that error becomes the reason. An ISO-8601 time is parsed
    in UTC when it has no offset, which needs the session time zone set to UTC (the engines
    do).

    With `now` (a timestamp column, usually a literal) and `max_future_us`, an event whose
    time is more than that ahead of `now` is invalid: `event_time too far in the future`
    (named by the mapped time field).
    Its `event_time` stays in the output, so whatever takes a watermark from the parsed rows
    must take it from valid rows only (`reason` NULL).
    """
    mapping = mapping or EventMapping()
    steps, reason, output = _plan(mapping, _owner(raw))
    # Columns named CARRIED* pass through unchanged (the block reader's typed events).
    carried = [c for c in raw.columns if c.startswith(CARRIED)]
    parsed = raw
    for i, step in enumerate(steps):
        parsed = parsed.select(*step, *(carried if i == 0 else []))
    if now is not None and max_future_us is not None:
        future = too_far_ahead(F.col("ts"), now, max_future_us)
        reason = F.coalesce(
            reason, F.when(future, F.lit(R.FieldReason.TOO_FAR_AHEAD.at(mapping.time)))
        )
    parsed = parsed.select("*", F.coalesce(F.col("error"), reason).alias("reason"))
    return parsed.select(*output, *carried)


CARRIED = "_carried"


def parse(
    raw: DataFrame,
    *,
    now: Column | int | str | None = None,
    max_future_us: int | None = None,
    mapping: EventMapping | None = None,
    valid_sources: bool = True,
    marks: pa.Array | None = None,
    decode: Decode | None = None,
) -> DataFrame:
    """Raw records -> valid events and invalid lines, the lines read by `events.blocks` in
    the task that holds them.

    Args:
        raw: `value` (a JSON line), `error` (a reason a source pre-fills, e.g. a record
            that is not UTF-8: it becomes the reason), `source` (where the line came from);
            with `decode`, what `decode` reads them from (e.g. a listing of files).
        now: The batch's time, as µs since the epoch (the reading task judges
            `max_future_us` itself) or a timestamp column (Spark judges it, and every line
            crosses back for `raw`); with `marks`, also `batch_time.FROM_JOB`: the reading
            task reads it from its job's local property (`batch_time.PROPERTY`), so that
            the plan holds nothing of the batch.
        max_future_us: With `now`, an event further ahead of it is invalid
            (`event_time too far in the future`, named by the mapped time field).
        mapping: Where the fields are (default: the sample contract).
        valid_sources: False: `source` is NULL on valid events (a file path on every line
            need not cross back from the reading task where only invalid lines need it).
        marks: The batch marks' keys (`engines.batch_marks`): the task that reads the
            lines sends a mark row per key (`events.marks`), and every line the exact path
            finds valid one more per key with its time: no pass of their own. A mapping
            the block reader does not read returns no mark columns: the caller adds them.
        decode: A source's task function from `raw`'s batches to the records (`value`,
            `error`, `source`), run in the task that reads the lines (never raising: what
            cannot be read is a record with an `error`); the output is the same as that of
            `parse(raw.mapInArrow(decode, RECORDS_SCHEMA))`, row for row.

    Returns:
        `event_columns(mapping)`, then `reason` (NULL for valid events), `raw` (the line,
        kept only for invalid ones) and `source`: the output of `parse_exact`, row for row.
        The lines the block reader leaves to the exact path are decided by `parse_exact`'s
        expressions in the same projection (the others pass them as NULLs); a mapping the
        block reader does not read (a conversion's value) is read by `parse_exact`. With
        `marks`, the two mark columns follow, and the mark rows.

    Raises:
        ValueError: `marks` with `now` as a column (Spark, not the reading task, would
            judge the time limit).

    Example:
        >>> parse(raw, now=now_us, max_future_us=86_400_000_000).where("reason IS NULL")
    """
    from pyspark.sql.pandas.types import from_arrow_schema

    from sessionize.events.reading import read_task

    m = mapping or EventMapping()
    p = blocks.plan(m)
    if isinstance(now, str) and (now != FROM_JOB or p is None or marks is None):
        raise ValueError("the batch's time from its job needs the block reader and marks")
    # From here `now` is a string only with the block reader and marks (refused above).
    if p is None:
        records = raw if decode is None else raw.mapInArrow(decode, RECORDS_SCHEMA)
        parsed = parse_exact(
            records,
            now=now_column(cast("Column | int | None", now)),
            max_future_us=max_future_us,
            mapping=m,
        )
        return parsed if valid_sources else invalid_sources(parsed)
    in_task = isinstance(now, (int, str))
    judged_here = now is None or in_task  # no line can turn invalid after the reader
    if marks is not None and not judged_here:
        raise ValueError("batch marks need the batch's time as µs, judged where lines are read")
    task = functools.partial(
        read_task,
        p,
        now if isinstance(now, (int, str)) else None,
        max_future_us if in_task else None,
        not judged_here,
        valid_sources or not judged_here,
        marks,
        decode,
    )
    schema = p.schema if marks is None else packed_schema(marked_schema(p.schema))
    if marks is not None:  # the batch's time on the rows, for the exact path
        schema = schema.append(pa.field(NOW_COLUMN, pa.int64()))
        now_at = None if now is None else F.timestamp_micros(F.col(NOW_COLUMN))
    else:
        now_at = now_column(cast("Column | int | None", now))
    records = raw if decode is not None else raw.select("value", "error", "source")
    typed = records.mapInArrow(task, from_arrow_schema(schema))
    key = (m, marks is not None, valid_sources, _owner(raw))
    if judged_here or max_future_us is None:
        mixed, out = _merged(*key)
    else:  # Spark judges the time limit: a column of the batch's time
        assert now_at is not None  # a column: an int or a string is judged here
        mixed, out = _merged.__wrapped__(
            *key, too_far_ahead(F.col(CARRIED)["event_time"], now_at, max_future_us)
        )
    parsed = parse_exact(typed.select(*mixed), now=now_at, max_future_us=max_future_us, mapping=m)
    return _exact_marks(parsed.select(*out), marks) if marks is not None else parsed.select(*out)


@functools.lru_cache(maxsize=16)
def _merged(
    m: EventMapping,
    marked: bool,
    valid_sources: bool,
    owner: tuple[str, int],
    future: Column | None = None,
) -> tuple[list, list]:
    """`parse`'s projections around `parse_exact`, built once like `_plan` (but with a time
    limit Spark judges, `future`): its input with the reader's rows carried; the merge."""
    names = event_columns(m)
    marks = [RECORDS, LATEST, PACKED] if marked else []
    carried = F.struct(*names, "reason", "raw", *marks, EXACT).alias(CARRIED)
    mixed = [
        F.when(F.col(EXACT), F.col("raw")).alias("value"),
        F.lit(None).cast("string").alias("error"),
        "source",
        carried,
        *([NOW_COLUMN] if marked else []),
    ]
    read = F.col(CARRIED)
    is_exact, reason = read[EXACT], read["reason"]
    if future is not None:
        reason = F.coalesce(reason, F.when(future, F.lit(R.FieldReason.TOO_FAR_AHEAD.at(m.time))))
    out = [F.when(is_exact, F.col(n)).otherwise(read[n]).alias(n) for n in names]
    reason = F.when(is_exact, F.col("reason")).otherwise(reason)
    raw_out = F.when(is_exact, F.col("raw")).otherwise(F.when(reason.isNotNull(), read["raw"]))
    # `invalid_sources` in the same projection: each one costs an analysis per micro-batch.
    source = F.col("source") if valid_sources else F.when(reason.isNotNull(), F.col("source"))
    out += [reason.alias("reason"), raw_out.alias("raw"), source.alias("source")]
    return mixed, out + [read[c].alias(c) for c in (*marks, EXACT) if marked]


def _exact_marks(parsed: DataFrame, keys: pa.Array) -> DataFrame:
    """`parsed` (ending in the mark columns and EXACT) plus, for every line the exact path
    finds valid, one mark row per key with its event time: the reading task sent its marks
    before these lines were judged. Such lines are rare; every other row passes as it is."""
    copies, out = _mark_copies(
        tuple(keys.to_pylist()),
        pa.types.is_string(keys.type),
        tuple(parsed.columns),
        _owner(parsed),
    )
    return parsed.select("*", copies).select(*out)


@functools.lru_cache(maxsize=16)
def _mark_copies(keys: tuple, strings: bool, columns: tuple[str, ...], owner: tuple[str, int]):
    copy, mark = "_mark_copy", F.col("_mark_copy").isNotNull()
    # NULL: the row itself; i: its mark to the i-th key.
    each = F.array(F.lit(None).cast("int"), *(F.lit(i) for i in range(len(keys))))
    key = F.element_at(F.lit(list(keys)), F.col(copy) + 1).cast("string" if strings else "long")
    special = {"user_id": key, RECORDS: F.lit(0).cast("long"), LATEST: F.unix_micros("event_time")}
    return F.explode_outer(F.when(F.col(EXACT) & F.col("reason").isNull(), each)).alias(copy), [
        F.when(mark, special[n]).otherwise(F.col(n)).alias(n)
        if n in special
        else F.when(~mark, F.col(n)).alias(n)
        for n in columns
        if n != EXACT
    ]


def now_column(now: Column | int | None) -> Column | None:
    """The batch's time as a timestamp column (`now` may be µs since the epoch)."""
    return F.timestamp_micros(F.lit(now)) if isinstance(now, int) else now


def invalid_sources(parsed: DataFrame) -> DataFrame:
    """`parsed` with `source` kept only where there is a `reason`."""
    return parsed.withColumn("source", F.when(F.col("reason").isNotNull(), F.col("source")))


def _owner(raw: DataFrame) -> tuple[str, int]:
    """What a plan's columns belong to: classic columns are objects of one JVM, Spark
    Connect's are not; a plan is only reused with DataFrames of the same kind and JVM."""
    from pyspark import SparkContext

    return type(raw).__module__, id(SparkContext._gateway)


@functools.lru_cache(maxsize=8)
def _plan(mapping: EventMapping, owner: tuple[str, int]) -> tuple[list[list], Column, list]:
    """The column expressions of `parse`, built once per mapping: building them takes
    thousands of calls into the JVM, which would otherwise be paid on every micro-batch.

    (projections before `reason`, `reason` without the time limit, the final projection)."""
    j = F.from_json(
        "value",
        json_schema(mapping),
        {"mode": "PERMISSIVE", "columnNameOfCorruptRecord": "_corrupt_record"},
    )
    # Each step is its own projection, so that what later steps use several times (the
    # parsed struct, the keys, the time, the reason) is computed once per line.
    steps: list[list] = [
        ["value", "error", "source", j.alias("j"), F.json_object_keys("value").alias("keys")]
    ]
    time, bad_time = _time(mapping, F.col("j"))
    steps.append(["*", time.alias("ts")])
    ts = F.col("ts")
    corrupt = F.col("j._corrupt_record").isNotNull()
    # `suspect` is read once, so it needs no projection of its own (each projection costs
    # Spark's driver an analysis of the whole plan on every micro-batch).
    suspect = _suspect(mapping, F.col("j"), ts)
    # Without a line (an unreadable record, or a row the block reader judged: `parse` passes
    # those with no `value`) there is no field to check; else every such row, having no
    # time, would be suspect and pay for the exact parse of nothing.
    wrong = F.when(
        F.col("value").isNotNull() & suspect,
        type_reason(mapping, F.col("value"), corrupt, F.col("j")),
    )
    steps.append(["*", wrong.alias("wrong_type")])
    reason = _reason(
        mapping, F.col("value"), F.col("j"), F.col("keys"), ts, bad_time, F.col("wrong_type")
    )
    j = F.col("j")
    user = leaf(j, mapping.key_field)
    key = [F.xxhash64(user).alias(STATE_USER_KEY)] if mapping.string_keys else []
    gap = N.json_number(leaf(j, mapping.gap)) if mapping.gap else None
    output = [
        user.alias("user_id"),
        ts.alias("event_time"),
        leaf(j, mapping.page).alias("page"),
        F.coalesce(leaf(j, mapping.action), F.lit("view")).alias("action"),
        *(leaf(j, path).alias(name) for name, path in mapping.keep),
        *([leaf(j, mapping.change_field).alias(CHANGE_COLUMN)] if mapping.change_field else []),
        *([gap_us(gap).alias(GAP_COLUMN)] if gap is not None else []),
        *(leaf(j, path).alias(name) for name, path in mapping.read_last),
        *(leaf(j, path).alias(name) for name, path in mapping.mapped_pairs),
        *(leaf(j, c.value).alias(c.value_column) for c in mapping.content.conversions if c.value),
        *key,
        "reason",
        F.when(F.col("reason").isNotNull(), F.col("value")).alias("raw"),
        "source",
    ]
    return steps, reason, output
