"""Raw lines -> valid events and invalid lines, as data.

Parsing runs in Spark's JVM (`from_json`), which is both faster than Python per line and
the same code path as a stateless read-parse-write. Every line leaves this stage either as a
valid event or with a reason; nothing is dropped and nothing raises.

Types are checked for every field read: `from_json` flags a wrong integer or object as a
corrupt record, and reads the string fields as variants so that a number or an object where
a string belongs is seen too (Spark would silently turn it into its JSON text). Only the
rare line that fails gets a second, full parse (`try_parse_json`) to name the field.
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

# (path, expected JSON type) of every field read, in the order their errors are reported.
FIELDS = [
    ("user_id", "integer"),
    ("event_time", "string"),
    ("action", "string"),
    ("page", "object"),
    ("page.current", "string"),
    ("source", "object"),
    ("source.site", "string"),
    ("source.api_version", "string"),
    ("technical", "object"),
    ("technical.browser", "string"),
    ("technical.lang", "string"),
    ("technical.device", "object"),
    ("technical.device.type", "string"),
]
_STRINGS = [path for path, kind in FIELDS if kind == "string"]
_JSON_SCHEMA = (
    "user_id long, event_time variant, action variant, "
    "page struct<current: variant>, "
    "source struct<site: variant, api_version: variant>, "
    "technical struct<browser: variant, lang: variant, device: struct<type: variant>>, "
    "_corrupt_record string"
)
_ARTICLE = {"integer": "an integer", "string": "a string", "object": "an object"}
# ISO-8601 date and time; Spark's own cast accepts looser forms (e.g. '123' as a year).
_ISO_8601 = r"^\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}(:\d{2}(\.\d{1,9})?)?(Z|[+-]\d{2}:?\d{2})?$"

FUTURE_REASON = "event_time too far in the future"

# Parsed columns, in the order of schema.EVENT.
EVENT_COLUMNS = [
    "user_id", "event_time", "page", "action",
    "site", "api_version", "browser", "language", "device_type",
]  # fmt: skip


def _leaf(j: Column, path: str) -> Column:
    col = j
    for part in path.split("."):
        col = col[part]
    return col


def _text(leaf: Column) -> Column:
    return F.variant_get(leaf, "$", "string")


def _type_of(v: Column, path: str) -> Column:
    """Spark's name of the JSON type at `path` of variant `v` ('BIGINT', 'STRING',
    'OBJECT<...>', 'VOID' for null), or NULL where the path does not exist."""
    return F.schema_of_variant(F.variant_get(v, f"$.{path}", "variant"))


def _wrong_type(kind: Column, expected: str) -> Column:
    ok = {
        "integer": kind.isin("BIGINT", "INT", "SMALLINT", "TINYINT"),
        "string": kind == "STRING",
        "object": kind.startswith("OBJECT"),
    }[expected]
    return kind.isNotNull() & (kind != "VOID") & ~ok


def _type_reason(value: Column) -> Column:
    """The first field of FIELDS whose JSON type is wrong, as `PATH: expected TYPE`."""
    v = F.try_parse_json(value)
    out = F.when(v.isNull(), F.lit("not a JSON object"))
    for path, expected in FIELDS:
        kind = _type_of(v, path)
        if expected == "integer":  # an integer that does not fit in 64 bits
            out = out.when(
                kind.startswith("DECIMAL") & kind.endswith(",0)"),
                F.lit(f"{path}: integer out of range (64-bit)"),
            )
        out = out.when(_wrong_type(kind, expected), F.lit(f"{path}: expected {_ARTICLE[expected]}"))
    return out.otherwise(F.lit("a field has the wrong type"))


def _duplicate(keys: Column) -> Column:
    """The first top-level key that occurs twice, or NULL."""
    dup = F.filter(keys, lambda k: F.size(F.array_remove(keys, k)) < F.size(keys) - 1)
    return F.when(F.size(F.array_distinct(keys)) < F.size(keys), F.try_element_at(dup, F.lit(1)))


def _reason(value: Column, j: Column, ts: Column) -> Column:
    """Why a line is invalid, or NULL when it is a valid event; first failing rule wins."""
    keys = F.json_object_keys(value)
    mismatch = j["_corrupt_record"].isNotNull()
    for path in _STRINGS:  # a string field holding a number, object, array or boolean
        kind = F.schema_of_variant(_leaf(j, path))
        mismatch = mismatch | F.coalesce(~kind.isin("STRING", "VOID"), F.lit(False))
    dup = _duplicate(keys)
    return (
        F.when(value.isNull(), F.lit("unreadable record"))
        .when(F.trim(value) == "", F.lit("empty line"))
        .when(keys.isNull(), F.lit("not a JSON object"))
        .when(dup.isNotNull(), F.concat(F.lit("duplicate key: "), dup))
        .when(mismatch, _type_reason(value))
        .when(j["user_id"].isNull(), F.lit("missing user_id"))
        .when(j["event_time"].isNull() | _text(j["event_time"]).isNull(), "missing event_time")
        .when(ts.isNull(), F.lit("event_time is not an ISO-8601 timestamp"))
        .when(_text(j["page"]["current"]).isNull(), F.lit("missing page.current"))
    )


def parse(raw: DataFrame, *, now: Column | None = None, max_future_us: int | None = None):
    """`raw(value string, error string, source string)` -> events with `reason` and `raw`.

    Output columns: EVENT_COLUMNS, then `reason` (NULL for valid events), `raw` (the line,
    kept only for invalid ones) and `source`. A source may pre-fill `error` (e.g. a record
    that is not UTF-8); that error becomes the reason. `event_time` is parsed in UTC when it
    has no offset, which needs the session time zone set to UTC (the engines do).

    With `now` (a timestamp column, usually a literal) and `max_future_us`, an event whose
    time is more than that ahead of `now` is invalid: `event_time too far in the future`.
    Its `event_time` stays in the output, so whatever takes a watermark from the parsed rows
    must take it from valid rows only (`reason` NULL).
    """
    j = F.from_json(
        "value",
        _JSON_SCHEMA,
        {"mode": "PERMISSIVE", "columnNameOfCorruptRecord": "_corrupt_record"},
    )
    parsed = raw.select("value", "error", "source", j.alias("j"))
    jc = F.col("j")
    et = _text(jc["event_time"])
    ts = F.when(et.rlike(_ISO_8601), F.try_to_timestamp(et))
    reason = _reason(F.col("value"), jc, ts)
    if now is not None and max_future_us is not None:
        limit = F.timestamp_micros(F.unix_micros(now) + F.lit(max_future_us))
        reason = F.coalesce(reason, F.when(ts > limit, F.lit(FUTURE_REASON)))
    reason = F.coalesce(F.col("error"), reason)
    return parsed.select(
        F.col("j.user_id").alias("user_id"),
        ts.alias("event_time"),
        _text(_leaf(jc, "page.current")).alias("page"),
        F.coalesce(_text(jc["action"]), F.lit("view")).alias("action"),
        _text(_leaf(jc, "source.site")).alias("site"),
        _text(_leaf(jc, "source.api_version")).alias("api_version"),
        _text(_leaf(jc, "technical.browser")).alias("browser"),
        _text(_leaf(jc, "technical.lang")).alias("language"),
        _text(_leaf(jc, "technical.device.type")).alias("device_type"),
        reason.alias("reason"),
        F.when(reason.isNotNull(), F.col("value")).alias("raw"),
        "source",
    )
