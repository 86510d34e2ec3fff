"""Raw lines -> valid events and invalid lines, as data (docs/design.md, "Events").

Parsing runs in Spark's JVM (`from_json`), which is both faster than Python per line and
the same code path as a stateless read-parse-write. Every line leaves this stage either as a
valid event or with a reason; nothing is dropped and nothing raises.

Types are checked for every field read. `from_json` flags a wrong integer or object as a
corrupt record, but silently turns a number, boolean, object or array where a string belongs
into its JSON text; so a line is suspect when it is corrupt, has no valid time, or a string
field reads like such a text (starts like a number, object or array, or is a boolean). Only
suspect lines, which are rare, get a second, exact parse (`try_parse_json`, a variant) to
find and name the field; a suspect line whose types are all right (a page really named `5`)
goes on as usual.
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
    "user_id long, event_time string, action string, "
    "page struct<current: string>, "
    "source struct<site: string, api_version: string>, "
    "technical struct<browser: string, lang: string, device: struct<type: string>>, "
    "_corrupt_record string"
)
# How Spark renders a non-string JSON value read as a string starts: a number, an object,
# an array; or it is a boolean.
_NON_STRING_START = ["-", *"0123456789", "{", "["]
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


def _type_reason(value: Column, corrupt: Column) -> Column:
    """The first field of FIELDS whose JSON type is wrong, as `PATH: expected TYPE`, or
    NULL. A corrupt record that the exact parse rejects too is not valid JSON (e.g. a raw
    control character inside a string, which `json_object_keys` skips over)."""
    v = F.try_parse_json(value)
    out = F.when(v.isNull() & corrupt, F.lit("not a JSON object"))
    for path, expected in FIELDS:
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


def _suspect(j: Column, ts: Column) -> Column:
    """Whether a line may hold a field of the wrong type (see the module doc)."""
    suspect = j["_corrupt_record"].isNotNull() | ts.isNull()
    for path in _STRINGS:
        if path == "event_time":
            continue  # starts with a digit when valid; any other type has no valid time
        text = _leaf(j, path)
        looks = F.substring(text, 1, 1).isin(_NON_STRING_START) | text.isin("true", "false")
        suspect = suspect | F.coalesce(looks, F.lit(False))
    return suspect


def _reason(value: Column, j: Column, keys: Column, ts: Column, wrong_type: Column) -> Column:
    """Why a line is invalid, or NULL when it is a valid event; first failing rule wins."""
    corrupt = j["_corrupt_record"].isNotNull()
    dup = _duplicate(keys)
    return (
        F.when(value.isNull(), F.lit("unreadable record"))
        .when(F.trim(value) == "", F.lit("empty line"))
        .when(keys.isNull(), F.lit("not a JSON object"))
        .when(dup.isNotNull(), F.concat(F.lit("duplicate key: "), dup))
        .when(wrong_type.isNotNull(), wrong_type)
        .when(corrupt, F.lit("a field has the wrong type"))
        .when(j["user_id"].isNull(), F.lit("missing user_id"))
        .when(j["event_time"].isNull(), F.lit("missing event_time"))
        .when(ts.isNull(), F.lit("event_time is not an ISO-8601 timestamp"))
        .when(j["page"]["current"].isNull(), F.lit("missing page.current"))
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
    # Each step is its own projection, so that what later steps use several times (the
    # parsed struct, the keys, the time, the reason) is computed once per line.
    parsed = raw.select(
        "value", "error", "source", j.alias("j"), F.json_object_keys("value").alias("keys")
    )
    et = F.col("j.event_time")
    parsed = parsed.select("*", F.when(et.rlike(_ISO_8601), F.try_to_timestamp(et)).alias("ts"))
    ts = F.col("ts")
    corrupt = F.col("j._corrupt_record").isNotNull()
    parsed = parsed.select("*", _suspect(F.col("j"), ts).alias("suspect"))
    wrong = F.when(F.col("suspect"), _type_reason(F.col("value"), corrupt))
    parsed = parsed.select("*", wrong.alias("wrong_type"))
    reason = _reason(F.col("value"), F.col("j"), F.col("keys"), ts, F.col("wrong_type"))
    if now is not None and max_future_us is not None:
        limit = F.timestamp_micros(F.unix_micros(now) + F.lit(max_future_us))
        reason = F.coalesce(reason, F.when(ts > limit, F.lit(FUTURE_REASON)))
    parsed = parsed.select("*", F.coalesce(F.col("error"), reason).alias("reason"))
    return parsed.select(
        F.col("j.user_id").alias("user_id"),
        ts.alias("event_time"),
        F.col("j.page.current").alias("page"),
        F.coalesce(F.col("j.action"), F.lit("view")).alias("action"),
        F.col("j.source.site").alias("site"),
        F.col("j.source.api_version").alias("api_version"),
        F.col("j.technical.browser").alias("browser"),
        F.col("j.technical.lang").alias("language"),
        F.col("j.technical.device.type").alias("device_type"),
        "reason",
        F.when(F.col("reason").isNotNull(), F.col("value")).alias("raw"),
        "source",
    )
