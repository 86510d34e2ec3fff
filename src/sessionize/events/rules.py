"""The one table of what a valid event is: fields, types, reasons and limits.

Every parser (Spark's expressions in `parsing`, typed columns in `columns`, JSON blocks in
`events.blocks`) reads its fields and words its reasons from here, so a new mapped field is
one entry in `field_rules` and a new input format one entry in `INPUT_FORMATS`.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from sessionize.config import MAX_EVENT_GAP_US
from sessionize.mapping import CHANGE_COLUMN, GAP_COLUMN, MAX_USER_KEY_BYTES, EventMapping

# JSON types a field is read as. "object": an enclosing object of a dotted path; "any": read
# as its JSON text and typed later (a conversion's value, checked on its events only).
INTEGER, STRING, NUMBER, OBJECT, ANY = "integer", "string", "number", "object", "any"
ARTICLE = {INTEGER: "an integer", STRING: "a string", OBJECT: "an object", NUMBER: "a number"}

INT64_MIN, INT64_MAX = -(1 << 63), (1 << 63) - 1
# ISO-8601 date and time; looser forms (e.g. '123' as a year) are not times.
ISO_8601 = r"^\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}(:\d{2}(\.\d{1,9})?)?(Z|[+-]\d{2}:?\d{2})?$"
# Epoch times map to the years 0001-9999, as ISO-8601 times do (µs).
MIN_US, MAX_US = -62_135_596_800_000_000, 253_402_300_799_999_999
EPOCH_UNIT_US = {"epoch-ms": 1_000, "epoch-s": 1_000_000}
# A string user id that may be a store key: 1 to this many bytes of UTF-8.
KEY_BYTES = MAX_USER_KEY_BYTES
# A `--gap-field` value: above 0 and at most this many µs once rounded.
MAX_GAP_US = MAX_EVENT_GAP_US
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


def bad_gap(path: str) -> str:
    return f"{path}: expected a number of seconds above 0 and at most 30 days"


@dataclass(frozen=True)
class FieldRule:
    """One field of an event: its output column, where it is, what it must be.

    `role` is what the session logic uses it for (user, time, page, action, keep, change,
    gap, last, mapped, value); `required` fields make an event invalid when absent or
    null, optional ones take `default`."""

    name: str
    path: str
    kind: str
    role: str
    required: bool = False
    default: str | None = None


@functools.lru_cache(maxsize=32)
def field_rules(mapping: EventMapping | None = None) -> tuple[FieldRule, ...]:
    """The fields of `mapping`, in event column order (`parsing.event_columns`)."""
    m = mapping or EventMapping()
    user = STRING if m.string_keys else INTEGER
    time = STRING if m.time_format == "iso8601" else NUMBER
    return (
        FieldRule("user_id", m.user, user, "user", required=True),
        FieldRule("event_time", m.time, time, "time", required=True),
        FieldRule("page", m.page, STRING, "page", required=True),
        FieldRule("action", m.action, STRING, "action", default=DEFAULT_ACTION),
        *(FieldRule(name, path, STRING, "keep") for name, path in m.keep),
        *([FieldRule(CHANGE_COLUMN, m.change, STRING, "change")] if m.change else []),
        *([FieldRule(GAP_COLUMN, m.gap, NUMBER, "gap")] if m.gap else []),
        *(FieldRule(name, path, STRING, "last") for name, path in m.last),
        *(FieldRule(name, path, STRING, "mapped") for name, path in m.mapped_pairs),
        *(FieldRule(c.value_column, c.value, ANY, "value")
          for c in m.content.conversions if c.value),
    )  # fmt: skip


_CHECK_ORDER = ("user", "time", "action", "page", "keep", "change", "gap", "last", "mapped",
                "value")  # fmt: skip


@functools.lru_cache(maxsize=32)
def read_fields(mapping: EventMapping | None = None) -> tuple[tuple[str, str], ...]:
    """(path, expected JSON type) of every field read, in the order their type errors are
    reported: user, time, action, page, kept, change, gap, last, mapped, conversion values;
    each path's enclosing objects before it."""
    rules = field_rules(mapping)
    ordered = [r for role in _CHECK_ORDER for r in rules if r.role == role]
    out: dict[str, str] = {}
    for rule in ordered:
        parts = rule.path.split(".")
        for i in range(1, len(parts)):
            out.setdefault(".".join(parts[:i]), OBJECT)
        out.setdefault(rule.path, rule.kind)
    return tuple(out.items())


# Input formats: name -> what reads it.
INPUT_FORMATS = {
    "json": "JSON lines: one object per line (parsing.parse; events.blocks per block)",
    "parquet": "Parquet files: typed columns at the mapped paths (columns.parse_columns)",
    "dataframe": "a DataFrame of the Python API: typed columns, or a `value` column of JSON",
}
