"""The one table of what a valid event is: fields, types, reasons and limits.

Every parser (Spark's expressions in `parsing`, typed columns in `columns`, JSON blocks in
`events.blocks`) reads its fields and words its reasons from here, so a new mapped field is
one entry in `field_rules` and a new input format one entry in `INPUT_FORMATS`.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from enum import StrEnum

from sessionize.base_schema import CHANGE_COLUMN, GAP_COLUMN
from sessionize.config import MAX_EVENT_GAP_US, MAX_RULE_US
from sessionize.mapping import MAX_USER_KEY_BYTES, EventMapping

# JSON types a field is read as. "object": an enclosing object of a dotted path; "any": read
# as its JSON text and typed later (a conversion's value, checked on its events only).
INTEGER, STRING, NUMBER, OBJECT, ANY = "integer", "string", "number", "object", "any"
ARTICLE = {INTEGER: "an integer", STRING: "a string", OBJECT: "an object", NUMBER: "a number"}

INT64_MIN, INT64_MAX = -(1 << 63), (1 << 63) - 1
# ISO-8601 date and time; looser forms (e.g. '123' as a year) are not times.
ISO_8601 = r"^\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}(:\d{2}(\.\d{1,9})?)?(Z|[+-]\d{2}:?\d{2})?$"
# The event times that are valid, ISO-8601 and epoch alike: the years 0002-9998 (µs,
# inclusive). Every time derived from one then stays within the years 0001-9999 that
# Python, Spark and every sink hold: the watermark (`--lateness` before), `closed_at` (at
# most `--gap` or `--gap-field` after), a local date or midnight in any zone (18 hours).
TIME_YEARS = "0002-9998"
MIN_US, MAX_US = -62_104_060_800_000_000, 253_370_764_799_999_999
# So `--gap`, `--lateness` and `--max-duration` are at most a year.
assert MAX_RULE_US <= 365 * 86_400_000_000 and MAX_EVENT_GAP_US <= MAX_RULE_US
# A JSON number written as a string: wherever a number is mapped (epoch times, a
# `--gap-field`, a conversion's value) a string that holds exactly one (`"49.90"`,
# `"1.7e12"`; no spaces, `+`, `NaN` or `Infinity`) is read as that number. Anchored for RE2
# and Python (`$`: the end of the text) and for Java (`\z`: Java's `$` also matches
# before a final line break).
NUMBER_TEXT = r"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?"
NUMBER_RE2 = f"^{NUMBER_TEXT}$"
NUMBER_JAVA = f"^{NUMBER_TEXT}\\z"
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
# A `\ud800`-style escape with no partner: Spark would read it as `?`, UTF-8 cannot hold it.
LONE_SURROGATE = "a string holds a lone surrogate (an unpaired \\uD800-\\uDFFF escape)"


# A duplicated key's reason: this, then the key.
DUPLICATE_KEY = "duplicate key: "


class FieldReason(StrEnum):
    """A reason about one field: its text, `{path}` standing for the field's path (`at`)."""

    MISSING = "missing {path}"
    INTEGER_OUT_OF_RANGE = "{path}: integer out of range (64-bit)"
    NOT_ISO_8601 = "{path} is not an ISO-8601 timestamp"
    EPOCH_OUT_OF_RANGE = f"{{path}}: epoch time out of range (years {TIME_YEARS})"
    # A valid timestamp outside the years TIME_YEARS (an epoch time: EPOCH_OUT_OF_RANGE).
    TIME_OUT_OF_RANGE = f"{{path}}: time out of range (years {TIME_YEARS})"
    # A JSON number no double holds (`1e309`).
    NUMBER_OUT_OF_RANGE = "{path}: number out of range (double)"
    # An event time more than `--max-future` ahead of the batch's time.
    TOO_FAR_AHEAD = "{path} too far in the future"
    EMPTY_KEY = "{path}: empty string"
    LONG_KEY = f"{{path}}: longer than {KEY_BYTES} bytes (UTF-8)"
    BAD_GAP = "{path}: expected a number of seconds above 0 and at most 30 days"

    def at(self, path: str) -> str:
        return self.value.format(path=path)


def expected(path: str, kind: str) -> str:
    return f"{path}: expected {ARTICLE[kind]}"


def bad_time(path: str, time_format: str) -> str:
    """An event time that `time_format` does not read as a time of the years TIME_YEARS."""
    iso = time_format == "iso8601"
    return (FieldReason.NOT_ISO_8601 if iso else FieldReason.EPOCH_OUT_OF_RANGE).at(path)


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
        FieldRule("user_id", m.key_field, user, "user", required=True),
        FieldRule("event_time", m.time, time, "time", required=True),
        FieldRule("page", m.page, STRING, "page", required=True),
        FieldRule("action", m.action, STRING, "action", default=DEFAULT_ACTION),
        *(FieldRule(name, path, STRING, "keep") for name, path in m.keep),
        *([FieldRule(CHANGE_COLUMN, m.change_field, STRING, "change")] if m.change_field else []),
        *([FieldRule(GAP_COLUMN, m.gap, NUMBER, "gap")] if m.gap else []),
        *(FieldRule(name, path, STRING, "last") for name, path in m.read_last),
        *(FieldRule(name, path, STRING, "mapped") for name, path in m.mapped_pairs),
        *(
            FieldRule(c.value_column, c.value, ANY, "value")
            for c in m.content.conversions
            if c.value
        ),
    )


_CHECK_ORDER = (
    "user",
    "time",
    "action",
    "page",
    "keep",
    "change",
    "gap",
    "last",
    "mapped",
    "value",
)


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
