"""The parse behind `stateful.source` (sources/typed.py) against a plain loop written here
with `json.loads` and explicit type checks, over valid, almost-valid and hostile lines."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime

import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st

from sessionize.errors import ConfigError
from sessionize.sources.typed import RecordDecoder, typed_batch

from .streams import SETTINGS

SCHEMA = pa.schema(
    [
        pa.field("customer_id", pa.int64(), nullable=False),
        ("amount", pa.float64()),
        ("t", pa.timestamp("us", tz="UTC")),
        ("name", pa.string()),
        ("ok", pa.bool_()),
        ("small", pa.int32()),
    ]
)
_ISO = re.compile(r"\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}:\d{2}(\.\d{1,6})?(Z|[+-]\d{2}:\d{2})?")


class _NotJson(Exception):
    pass


def _no_constants(name: str):
    raise _NotJson(name)  # NaN, Infinity: not JSON


def reference(value: str | None, error: str | None) -> tuple[dict | None, str | None]:
    """(typed row, None) or (None, reason), by the rules of docs/how-to/stateful-job.md."""
    if error is not None:
        return None, error
    if value is None:
        return None, "unreadable record"
    if not value.strip():
        return None, "empty line"
    try:
        pairs = json.loads(value, object_pairs_hook=lambda p: p, parse_constant=_no_constants)
    except (ValueError, _NotJson, RecursionError):
        return None, "not a JSON object"
    if not isinstance(pairs, list) or (pairs and not isinstance(pairs[0], tuple)):
        return None, "not a JSON object"
    row = {}
    for name, v in pairs:  # in the line's order: the first wrong field is named
        if name not in SCHEMA.names or v is None:
            row[name] = None
            continue
        t = SCHEMA.field(name).type
        if pa.types.is_integer(t):
            if type(v) is not int:
                return None, f"{name}: expected an integer"
            top = 2 ** (t.bit_width - 1)
            if not -top <= v < top:
                return None, f"{name}: integer out of range ({t.bit_width}-bit)"
        elif pa.types.is_floating(t):
            if type(v) not in (int, float):
                return None, f"{name}: expected a number"
            if float(v) in (float("inf"), float("-inf")):
                return None, f"{name}: number out of range"
            v = float(v)
        elif pa.types.is_string(t):
            if type(v) is not str:
                return None, f"{name}: expected a string"
        elif pa.types.is_boolean(t):
            if type(v) is not bool:
                return None, f"{name}: expected a boolean"
        else:
            if type(v) is not str:
                return None, f"{name}: expected a string"
            if not _ISO.fullmatch(v):
                return None, f"{name} is not an ISO-8601 timestamp"
            try:
                parsed = datetime.fromisoformat(v.replace("Z", "+00:00"))
            except ValueError:
                return None, f"{name} is not an ISO-8601 timestamp"
            v = parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)
        row[name] = v
    for f in SCHEMA:
        if not f.nullable and row.get(f.name) is None:
            return None, f"missing {f.name}"
    return {name: row.get(name) for name in SCHEMA.names}, None


def expected_rows(records: list[tuple]) -> list[dict]:
    out = []
    for value, error, source in records:
        row, reason = reference(value, error)
        if row is None:
            typed = dict.fromkeys(SCHEMA.names)
            out.append({**typed, "_raw": value, "_reason": reason, "_source": source})
        else:
            if row["t"] is not None:
                row["t"] = row["t"].astimezone(UTC)
            out.append({**row, "_raw": None, "_reason": None, "_source": None})
    return out


def parsed_rows(records: list[tuple]) -> list[dict]:
    batch = pa.RecordBatch.from_pylist(
        [{"value": v, "error": e, "source": s} for v, e, s in records],
        schema=pa.schema([("value", pa.string()), ("error", pa.string()), ("source", pa.string())]),
    )
    rows = typed_batch(RecordDecoder(SCHEMA), batch).to_pylist()
    for row in rows:
        if row["t"] is not None:
            row["t"] = row["t"].astimezone(UTC)
    return rows


HOSTILE = [
    '{"customer_id": 1, "amount": 2.5, "t": "2026-11-01T10:00:00Z", "name": "a", "ok": true}',
    '{"customer_id": 2, "t": "2026-11-01 10:00:00.123456+02:00"}',
    '{"customer_id": 3, "t": "2026-11-01T10:00:00"}',
    '{"customer_id": 4, "amount": 7}',
    '{"customer_id": "5"}',
    '{"customer_id": 5.0}',
    '{"customer_id": true}',
    '{"customer_id": 9223372036854775807}',
    '{"customer_id": 9223372036854775808}',
    '{"customer_id": -9223372036854775809}',
    '{"customer_id": 1, "small": 2147483648}',
    '{"customer_id": 1, "amount": "2"}',
    '{"customer_id": 1, "amount": 1e400}',
    '{"customer_id": 1, "name": 5}',
    '{"customer_id": 1, "ok": 1}',
    '{"customer_id": 1, "t": "yesterday"}',
    '{"customer_id": 1, "t": 1700000000}',
    '{"customer_id": 1, "t": "2026-13-45T99:99:99Z"}',
    '{"customer_id": 1, "t": "2026-11-01"}',
    '{"customer_id": null}',
    '{"amount": 1}',
    "{}",
    "[1]",
    "42",
    "null",
    '"text"',
    "",
    "   ",
    "not json",
    '{"customer_id": 1',
    '{"customer_id": 1} trailing',
    '{"customer_id": 1, "customer_id": 2}',
    '{"customer_id": "x", "customer_id": 2}',
    '{"customer_id": 1, "amount": NaN}',
    '{"customer_id": 1, "extra": {"deep": [1, 2]}}',
    '{"customer_id": 1, "name": "caf\\u00e9 \\u2615 \\" \\\\"}',
    "[" * 50 + "]" * 50,
    '{"customer_id": 1},{"customer_id": 2}',
    '{"name": "a\\u0000b", "customer_id": 6}',
]


def test_valid_almost_valid_and_hostile_lines_match_the_loop():
    records = [(line, None, f"f.jsonl:{n}") for n, line in enumerate(HOSTILE)]
    records += [
        (None, "no payload (null value)", "kafka:t/0/1"),
        ("\\xff x", "not UTF-8 (byte 0)", "kafka:t/0/2"),
        (None, None, "x"),
    ]
    got, want = parsed_rows(records), expected_rows(records)
    for line, g, w in zip(records, got, want, strict=True):
        assert g == w, line
    # the reference agrees with itself on a few: the list holds what it claims
    reasons = [w["_reason"] for w in want]
    assert reasons[0] is None and "customer_id: expected an integer" in reasons
    assert "amount: expected a number" in reasons and "missing customer_id" in reasons


_value = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**64), 2**64),
    st.floats(allow_nan=False),
    st.text(max_size=5),
    st.sampled_from(
        ["2026-11-01T10:00:00Z", "2026-02-30T00:00:00", "2026-11-01 23:59:59.5-01:30", "1999"]
    ),
    st.lists(st.integers(), max_size=2),
)
_line = st.dictionaries(st.sampled_from([*SCHEMA.names, "other"]), _value, max_size=7)


@SETTINGS
@given(lines=st.lists(_line, max_size=20))
def test_random_objects_match_the_loop(lines):
    records = [(json.dumps(d), None, "s") for d in lines]
    assert parsed_rows(records) == expected_rows(records)


def test_an_unsupported_column_type_is_refused_in_one_line():
    with pytest.raises(ConfigError, match="column 'tags' is list<item: string>"):
        RecordDecoder(pa.schema([("tags", pa.list_(pa.string()))]))


def test_rows_marked_invalid_or_without_key_or_time_are_set_aside_with_their_reason():
    from sessionize.core.invalid import split_invalid

    rows = [  # (k, t, _raw, _reason, _source)
        (1, 10, None, None, None), (None, 11, None, None, None), (2, None, None, None, None),
        (None, None, None, None, None), (None, None, "x", "not a JSON object", "f:1"),
        (None, None, None, "no payload (null value)", "kafka:t/0/3"), (3, 12, None, None, None),
    ]  # fmt: skip
    table = pa.table(
        {
            "k": pa.array([r[0] for r in rows], pa.int64()),
            "t": pa.array([r[1] for r in rows], pa.int64()).cast(pa.timestamp("us", tz="UTC")),
            "_raw": [r[2] for r in rows],
            "_reason": [r[3] for r in rows],
            "_source": [r[4] for r in rows],
        }
    )
    valid, invalid = split_invalid(table, "k", "t")
    want_valid, want_invalid = [], []
    for k, t, raw, reason, source in rows:
        why = reason or ("missing k" if k is None else "missing t" if t is None else None)
        if why is None:
            want_valid.append(k)
        elif reason is None:
            when = None if t is None else datetime.fromtimestamp(t / 1e6, UTC).isoformat()
            shown = json.dumps({"k": k, "t": when})
            want_invalid.append((source, shown, why))
        else:
            want_invalid.append((source, raw, why))
    assert valid.column_names == ["k", "t"] and valid.column("k").to_pylist() == want_valid
    got = [(r["source"], r["raw"], r["reason"]) for r in invalid.to_pylist()]
    assert sorted(got, key=str) == sorted(want_invalid, key=str)
