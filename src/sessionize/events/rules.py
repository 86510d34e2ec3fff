"""The one table of what a valid event is: fields, types, reasons and limits.

Every parser (JSON lines in Python tasks, Spark's typed columns, Parquet) reads its fields
and words its reasons from here, so a new mapped field is one entry in `field_rules` and a
new input format one entry in `INPUT_FORMATS`.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from sessionize.mapping import MAX_USER_KEY_BYTES, EventMapping

# JSON types a field is read as; "object" is an enclosing object of a dotted path.
INTEGER, STRING, NUMBER, OBJECT = "integer", "string", "number", "object"
ARTICLE = {INTEGER: "an integer", STRING: "a string", OBJECT: "an object", NUMBER: "a number"}

INT64_MIN, INT64_MAX = -(1 << 63), (1 << 63) - 1
# ISO-8601 date and time; looser forms (e.g. '123' as a year) are not times.
ISO_8601 = r"^\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}(:\d{2}(\.\d{1,9})?)?(Z|[+-]\d{2}:?\d{2})?$"
# Epoch times map to the years 0001-9999, as ISO-8601 times do (µs).
MIN_US, MAX_US = -62_135_596_800_000_000, 253_402_300_799_999_999
EPOCH_UNIT_US = {"epoch-ms": 1_000, "epoch-s": 1_000_000}
# A string user id that may be a store key: 1 to this many bytes of UTF-8.
KEY_BYTES = MAX_USER_KEY_BYTES
# The seed of the 64-bit hash a string user id is stored under (Spark's `xxhash64`).
KEY_SEED = 42
DEFAULT_ACTION = "view"

# Reasons that name no field.
UNREADABLE = "unreadable record"
EMPTY_LINE = "empty line"
NOT_OBJECT = "not a JSON object"
WRONG_TYPE = "a field has the wrong type"


def missing(path: str) -> str:
    return f"missing {path}"


def expected(path: str, kind: str) -> str:
    return f"{path}: expected {ARTICLE[kind]}"


def out_of_range(path: str) -> str:
    return f"{path}: integer out of range (64-bit)"


def duplicate(key: str) -> str:
    return f"duplicate key: {key}"


def bad_time(path: str, time_format: str) -> str:
    if time_format == "iso8601":
        return f"{path} is not an ISO-8601 timestamp"
    return f"{path}: epoch time out of range (years 0001-9999)"


def too_far_ahead(path: str) -> str:
    """An event time more than `--max-future` ahead of the batch's time."""
    return f"{path} too far in the future"


def empty_key(path: str) -> str:
    return f"{path}: empty string"


def long_key(path: str) -> str:
    return f"{path}: longer than {KEY_BYTES} bytes (UTF-8)"


@dataclass(frozen=True)
class FieldRule:
    """One field of an event: its output column, where it is, what it must be.

    `role` is what the session logic uses it for (user, time, page, action, or an
    attribute it keeps); `required` fields make an event invalid when absent or null,
    optional ones take `default`."""

    name: str
    path: str
    kind: str
    role: str
    required: bool = False
    default: str | None = None


@functools.lru_cache(maxsize=32)
def field_rules(mapping: EventMapping | None = None) -> tuple[FieldRule, ...]:
    """The fields of `mapping`, in output column order (user, time, page, action, kept)."""
    m = mapping or EventMapping()
    user = STRING if m.string_keys else INTEGER
    time = STRING if m.time_format == "iso8601" else NUMBER
    return (
        FieldRule("user_id", m.user, user, "user", required=True),
        FieldRule("event_time", m.time, time, "time", required=True),
        FieldRule("page", m.page, STRING, "page", required=True),
        FieldRule("action", m.action, STRING, "action", default=DEFAULT_ACTION),
        *(FieldRule(name, path, STRING, "keep") for name, path in m.keep),
    )


@functools.lru_cache(maxsize=32)
def read_fields(mapping: EventMapping | None = None) -> tuple[tuple[str, str], ...]:
    """(path, expected JSON type) of every field read, in the order their type errors are
    reported: user, time, action, page, kept; each path's enclosing objects before it."""
    rules = {r.role: r for r in field_rules(mapping)}
    ordered = [rules["user"], rules["time"], rules["action"], rules["page"]]
    ordered += [r for r in field_rules(mapping) if r.role not in ("user", "time", "action", "page")]
    out: dict[str, str] = {}
    for rule in ordered:
        parts = rule.path.split(".")
        for i in range(1, len(parts)):
            out.setdefault(".".join(parts[:i]), OBJECT)
        out.setdefault(rule.path, rule.kind)
    return tuple(out.items())


def role(mapping: EventMapping | None, name: str) -> FieldRule:
    """The rule of the field with `role` name (user, time, page, action)."""
    return next(r for r in field_rules(mapping) if r.role == name)


# Input formats: name -> what reads it (`api.inputs` and the sources resolve these).
INPUT_FORMATS = {
    "json": "JSON lines: one object per line, read by events.json_lines in the reading task",
    "parquet": "Parquet files: typed columns at the mapped paths (columns.parse_columns)",
    "dataframe": "a DataFrame of the Python API: typed columns, or a `value` column of JSON",
}
