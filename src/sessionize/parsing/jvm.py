"""The exact fallback: JSON lines the strict reading leaves open, read by Spark's JVM.

These are the column expressions every line went through before lines were read in Python
tasks (`events.json_lines`); they now run only on the rows marked `exact = False` (the
expensive ones, `from_json`, `json_object_keys` and `try_parse_json`, are not evaluated on
the others), and they are tested to give the same rows as the Python reading wherever both
decide (tests/test_parse_equal.py).

Types are checked for every field read. `from_json` flags a wrong integer or object as a
corrupt record, but silently turns a number, boolean, object or array where a string belongs
into its JSON text; so a line is suspect when it is corrupt, has no valid time, or a string
field reads like such a text (starts like a number, object or array, or is a boolean). Only
suspect lines get a second, exact parse (`try_parse_json`, a variant) to find and name the
field; a suspect line whose types are all right (a page really named `5`) goes on as usual.
"""

from __future__ import annotations

import functools

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

from sessionize.events import rules as R
from sessionize.events.json_lines import EXACT
from sessionize.mapping import MAX_USER_KEY_BYTES, EventMapping
from sessionize.schema import STATE_USER_KEY

# How Spark renders a non-string JSON value read as a string starts: a number, an object,
# an array; or it is a boolean.
_NON_STRING_START = ["-", *"0123456789", "{", "["]
_ARTICLE = R.ARTICLE
_ISO_8601 = R.ISO_8601
_MIN_US, _MAX_US = R.MIN_US, R.MAX_US
_EPOCH_UNIT_US = R.EPOCH_UNIT_US
_SPARK_TYPES = {
    "integer": T.LongType(), "string": T.StringType(), "number": T.DoubleType(),
}  # fmt: skip


def fields(mapping: EventMapping | None = None) -> tuple[tuple[str, str], ...]:
    return R.read_fields(mapping)


def _json_schema(mapping: EventMapping) -> T.StructType:
    """The `from_json` schema of every field read, nested as the paths are."""
    tree: dict = {}
    for path, kind in fields(mapping):
        node = tree
        parts = path.split(".")
        for part in parts[:-1]:
            node = node.setdefault(part, {})
        if kind != "object":
            node[parts[-1]] = _SPARK_TYPES[kind]
        else:
            node.setdefault(parts[-1], {})

    def struct(node: dict) -> T.StructType:
        return T.StructType(
            [T.StructField(k, struct(v) if isinstance(v, dict) else v) for k, v in node.items()]
        )

    top = struct(tree)
    return top.add(T.StructField("_corrupt_record", T.StringType()))


def _leaf(j: Column, path: str) -> Column:
    col = j
    for part in path.split("."):
        col = col[part]
    return col


def _json_path(path: str) -> str:
    return "$" + "".join(f"['{part}']" for part in path.split("."))


def _type_of(v: Column, path: str) -> Column:
    """Spark's name of the JSON type at `path` of variant `v` ('BIGINT', 'STRING',
    'OBJECT<...>', 'VOID' for null), or NULL where the path does not exist."""
    return F.schema_of_variant(F.variant_get(v, _json_path(path), "variant"))


def _is_integer(kind: Column) -> Column:
    return kind.isin("BIGINT", "INT", "SMALLINT", "TINYINT")


def _wrong_type(kind: Column, expected: str) -> Column:
    ok = {
        "integer": _is_integer(kind),
        "string": kind == "STRING",
        "object": kind.startswith("OBJECT"),
        "number": _is_integer(kind) | kind.startswith("DECIMAL") | kind.isin("DOUBLE", "FLOAT"),
    }[expected]
    return kind.isNotNull() & (kind != "VOID") & ~ok


def _type_reason(mapping: EventMapping, value: Column, corrupt: Column) -> Column:
    """The first field read whose JSON type is wrong, as `PATH: expected TYPE`, or NULL. A
    corrupt record that the exact parse rejects too is not valid JSON (e.g. a raw control
    character inside a string, which `json_object_keys` skips over)."""
    v = F.try_parse_json(value)
    out = F.when(v.isNull() & corrupt, F.lit("not a JSON object"))
    for path, expected in fields(mapping):
        kind = _type_of(v, path)
        if expected == "integer":  # an integer that does not fit in 64 bits
            out = out.when(
                kind.startswith("DECIMAL") & kind.endswith(",0)"),
                F.lit(f"{path}: integer out of range (64-bit)"),
            )
        out = out.when(_wrong_type(kind, expected), F.lit(f"{path}: expected {_ARTICLE[expected]}"))
    return out


def _duplicate(keys: Column) -> Column:
    """The first top-level key that occurs twice, or NULL."""
    dup = F.filter(keys, lambda k: F.size(F.array_remove(keys, k)) < F.size(keys) - 1)
    return F.when(F.size(F.array_distinct(keys)) < F.size(keys), F.try_element_at(dup, F.lit(1)))


def _suspect(mapping: EventMapping, j: Column, ts: Column) -> Column:
    """Whether a line may hold a field of the wrong type (see the module doc)."""
    suspect = j["_corrupt_record"].isNotNull() | ts.isNull()
    for path, kind in fields(mapping):
        if kind != "string" or path == mapping.time:
            continue  # a valid ISO time starts with a digit; any other type has no valid time
        text = _leaf(j, path)
        looks = F.substring(text, 1, 1).isin(_NON_STRING_START) | text.isin("true", "false")
        suspect = suspect | F.coalesce(looks, F.lit(False))
    return suspect


def _time(mapping: EventMapping, j: Column) -> tuple[Column, Column]:
    """(the event time as a timestamp or NULL, why a present time is not valid)."""
    raw = _leaf(j, mapping.time)
    if mapping.time_format == "iso8601":
        ts = F.when(raw.rlike(_ISO_8601), F.try_to_timestamp(raw))
        return ts, F.lit(f"{mapping.time} is not an ISO-8601 timestamp")
    # A JSON number of ms or s; a fraction is rounded to the nearest microsecond (a double
    # holds epoch ms with µs exactly enough for that).
    us = F.round(raw * F.lit(float(_EPOCH_UNIT_US[mapping.time_format])))
    in_range = us.between(float(_MIN_US), float(_MAX_US))
    ts = F.when(in_range, F.timestamp_micros(us.cast("long")))
    return ts, F.lit(f"{mapping.time}: epoch time out of range (years 0001-9999)")


def _user_reason(mapping: EventMapping, user: Column) -> Column | None:
    """Why a present string user id is not a valid key, or NULL."""
    if not mapping.string_keys:
        return None
    length = F.octet_length(user)
    return F.when(length == 0, F.lit(f"{mapping.user}: empty string")).when(
        length > MAX_USER_KEY_BYTES,
        F.lit(f"{mapping.user}: longer than {MAX_USER_KEY_BYTES} bytes (UTF-8)"),
    )


def _reason(
    mapping: EventMapping, value: Column, j: Column, keys: Column, ts: Column,
    bad_time: Column, wrong_type: Column,
) -> Column:  # fmt: skip
    """Why a line is invalid, or NULL when it is a valid event; first failing rule wins."""
    corrupt = j["_corrupt_record"].isNotNull()
    dup = _duplicate(keys)
    user = _leaf(j, mapping.user)
    reason = (
        F.when(value.isNull(), F.lit("unreadable record"))
        .when(F.trim(value) == "", F.lit("empty line"))
        .when(keys.isNull(), F.lit("not a JSON object"))
        .when(dup.isNotNull(), F.concat(F.lit("duplicate key: "), dup))
        .when(wrong_type.isNotNull(), wrong_type)
        .when(corrupt, F.lit("a field has the wrong type"))
        .when(user.isNull(), F.lit(f"missing {mapping.user}"))
        .when(_leaf(j, mapping.time).isNull(), F.lit(f"missing {mapping.time}"))
        .when(ts.isNull(), bad_time)
        .when(_leaf(j, mapping.page).isNull(), F.lit(f"missing {mapping.page}"))
    )
    user_reason = _user_reason(mapping, user)
    return reason if user_reason is None else F.coalesce(reason, user_reason)


def too_far_ahead(ts: Column, now: Column, max_future_us: int) -> Column:
    """`ts > now + max_future`, written as `ts - interval(now + max_future) > epoch`.

    `now` changes with every micro-batch and becomes a constant in Spark's generated code,
    which is then compiled anew for every batch (a fixed cost of about 0.2 s); an interval
    constant is passed to the code as an object instead, so the code stays the same."""
    limit_us = (F.unix_micros(now) + F.lit(max_future_us)).cast("decimal(20,0)")
    limit_s = (limit_us / F.lit(1_000_000)).cast("decimal(18,6)")  # exact: 6 decimals
    return (ts - F.make_interval(secs=limit_s)) > F.timestamp_micros(F.lit(0))


def _owner(raw: DataFrame) -> tuple[str, int]:
    """What a plan's columns belong to: classic columns are objects of one JVM, Spark
    Connect's are not; a plan is only reused with DataFrames of the same kind and JVM."""
    from pyspark import SparkContext

    return type(raw).__module__, id(SparkContext._gateway)


def decide_rest(
    typed: DataFrame,
    mapping: EventMapping,
    *,
    now: Column | None = None,
    max_future_us: int | None = None,
) -> DataFrame:
    """The rows of `json_lines.parse_batch` -> `parse`'s output, the rows it marked
    `exact = False` decided here (their line is in `raw`).

    With `now` (a column) and `max_future_us` the time limit is judged here too, for every
    row (rows the Python reading judged against the same time are judged alike; for the
    others it kept the line in `raw`)."""
    steps, output = _plan(mapping, _owner(typed))
    parsed = typed
    for step in steps:
        parsed = parsed.select(*step)
    reason = F.col("reason")
    if now is not None and max_future_us is not None:
        future = too_far_ahead(F.col("event_time"), now, max_future_us)
        reason = F.coalesce(reason, F.when(future, F.lit(R.too_far_ahead(mapping.time))))
    return parsed.select(
        *output,
        reason.alias("reason"),
        F.when(reason.isNotNull(), F.col("value")).alias("raw"),
        "source",
    )


@functools.lru_cache(maxsize=8)
def _plan(mapping: EventMapping, owner: tuple[str, int]) -> tuple[list[list], list[str]]:
    """The column expressions of `decide_rest`, built once per mapping: building them takes
    thousands of calls into the JVM, which would otherwise be paid on every micro-batch.

    (the projections, the event columns of the output)."""
    rest = ~F.col(EXACT)
    names = event_names(mapping)
    j = F.from_json(
        "value",
        _json_schema(mapping),
        {"mode": "PERMISSIVE", "columnNameOfCorruptRecord": "_corrupt_record"},
    )
    # Each step is its own projection, so that what later steps use several times (the
    # parsed struct, the keys, the time, the reason) is computed once per line; the
    # expensive ones only on the rows left to this fallback.
    steps: list[list] = [
        [
            *(F.col(n).alias(f"_py_{n}") for n in [*names, "reason"]),
            F.col("raw").alias("value"), "source", EXACT,
            F.when(rest, j).alias("j"), F.when(rest, F.json_object_keys("value")).alias("keys"),
        ]
    ]  # fmt: skip
    time, bad_time = _time(mapping, F.col("j"))
    steps.append(["*", time.alias("ts")])
    ts = F.col("ts")
    corrupt = F.col("j._corrupt_record").isNotNull()
    # `suspect` is read once, so it needs no projection of its own (each projection costs
    # Spark's driver an analysis of the whole plan on every micro-batch).
    suspect = rest & _suspect(mapping, F.col("j"), ts)
    wrong = F.when(suspect, _type_reason(mapping, F.col("value"), corrupt))
    steps.append(["*", wrong.alias("wrong_type")])
    reason = _reason(
        mapping, F.col("value"), F.col("j"), F.col("keys"), ts, bad_time, F.col("wrong_type")
    )
    j = F.col("j")
    user = _leaf(j, mapping.user)
    key = [F.xxhash64(user)] if mapping.string_keys else []
    old = [
        user, ts, _leaf(j, mapping.page), F.coalesce(_leaf(j, mapping.action), F.lit("view")),
        *(_leaf(j, path) for _, path in mapping.keep), *key,
    ]  # fmt: skip
    merged = [
        F.when(F.col(EXACT), F.col(f"_py_{n}")).otherwise(expr).alias(n)
        for n, expr in zip(names, old, strict=True)
    ]
    final_reason = F.when(F.col(EXACT), F.col("_py_reason")).otherwise(reason)
    steps.append([*merged, final_reason.alias("reason"), "value", "source"])
    return steps, names


def event_names(mapping: EventMapping | None = None) -> list[str]:
    """The parsed event columns of `mapping`, in the order of its layout's event schema;
    with string user ids, the state key `user_key` follows."""
    m = mapping or EventMapping()
    return [r.name for r in R.field_rules(m)] + ([STATE_USER_KEY] if m.string_keys else [])
