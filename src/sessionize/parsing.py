"""Raw lines -> valid events and invalid lines, as data (docs/design.md, "Events").

Parsing runs in Spark's JVM (`from_json`), which is both faster than Python per line and
the same code path as a stateless read-parse-write. Every line leaves this stage either as a
valid event or with a reason; nothing is dropped and nothing raises.
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

_JSON_SCHEMA = (
    "user_id long, event_time string, action string, "
    "page struct<current: string>, "
    "source struct<site: string, api_version: string>, "
    "technical struct<browser: string, lang: string, device: struct<type: string>>, "
    "_corrupt_record string"
)
# ISO-8601 date and time; Spark's own cast accepts looser forms (e.g. '123' as a year).
_ISO_8601 = r"^\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}(:\d{2}(\.\d{1,9})?)?(Z|[+-]\d{2}:?\d{2})?$"

# Parsed columns, in the order of schema.EVENT.
EVENT_COLUMNS = [
    "user_id", "event_time", "page", "action",
    "site", "api_version", "browser", "language", "device_type",
]  # fmt: skip


def _reason(value: Column, j: Column, ts: Column) -> Column:
    """Why a line is invalid, or NULL when it is a valid event; first failing rule wins."""
    keys = F.json_object_keys(value)
    return (
        F.when(value.isNull(), F.lit("unreadable record"))
        .when(F.trim(value) == "", F.lit("empty line"))
        .when(keys.isNull(), F.lit("not a JSON object"))
        .when(
            j["user_id"].isNull() & F.array_contains(keys, "user_id"),
            F.lit("user_id is not an integer"),
        )
        .when(j["_corrupt_record"].isNotNull(), F.lit("a field has the wrong type"))
        .when(j["user_id"].isNull(), F.lit("missing user_id"))
        .when(j["event_time"].isNull(), F.lit("missing event_time"))
        .when(ts.isNull(), F.lit("event_time is not an ISO-8601 timestamp"))
        .when(j["page"]["current"].isNull(), F.lit("missing page.current"))
    )


def parse(raw: DataFrame) -> DataFrame:
    """`raw(value string, error string, source string)` -> events with `reason` and `raw`.

    Output columns: EVENT_COLUMNS, then `reason` (NULL for valid events), `raw` (the line,
    kept only for invalid ones) and `source`. A source may pre-fill `error` (e.g. a record
    that is not UTF-8); that error becomes the reason. `event_time` is parsed in UTC when it
    has no offset, which needs the session time zone set to UTC (the engines do).
    """
    j = F.from_json(
        "value",
        _JSON_SCHEMA,
        {"mode": "PERMISSIVE", "columnNameOfCorruptRecord": "_corrupt_record"},
    )
    parsed = raw.select("value", "error", "source", j.alias("j"))
    et = F.col("j.event_time")
    ts = F.when(et.rlike(_ISO_8601), F.try_to_timestamp(et))
    reason = F.coalesce(F.col("error"), _reason(F.col("value"), F.col("j"), ts))
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
        reason.alias("reason"),
        F.when(reason.isNotNull(), F.col("value")).alias("raw"),
        "source",
    )
