"""The Python reading of JSON lines against an independent reference (`reference.py`).

Random documents, valid, almost valid and hostile, go through `json_lines.parse_batch` and
`reference.read_line`: every line the reading decides has the reference's reason, and a
valid one the reference's event; every line the reference calls OPEN (read otherwise by
Spark's reader) is left to the exact fallback. The fallback itself is held to the Python
reading in test_parse_equal.py.
"""

from __future__ import annotations

import json

import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from sessionize.events import json_lines
from sessionize.mapping import EventMapping

from .reference import OPEN, read_line

DEFAULT = EventMapping()
STRING_EPOCH = EventMapping(
    user="who.id", time="ts", time_format="epoch-ms", user_type="string",
    keep=(("site", "source.site"), ("tag", "k")),
)  # fmt: skip
NOW_US = 1_793_527_200_000_000  # 2026-11-01T10:00:00Z
DAY_US = 86_400_000_000

scalars = st.one_of(
    st.none(), st.booleans(), st.integers(-(2**70), 2**70), st.floats(allow_nan=False),
    st.text(max_size=8), st.sampled_from(["", "5", "-x", "[", "{}", "true", "é" * 130]),
)  # fmt: skip
json_values = st.recursive(
    scalars,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3)
    ),
    max_leaves=8,
)
digits = st.integers(0, 99).map(lambda n: f"{n:02d}")
iso_times = st.builds(
    lambda y, mo, d, sep, h, mi, s, frac, zone: f"{y:04d}-{mo}-{d}{sep}{h}:{mi}{s}{frac}{zone}",
    st.integers(1, 9999) | st.sampled_from([1970, 2026]), digits, digits, st.sampled_from("T T"),
    digits, digits, st.sampled_from(["", ":00", ":59", ":60"]) | digits.map(lambda d: ":" + d),
    st.sampled_from(["", ".5", ".123456789", ".1234567"]),
    st.sampled_from(["", "Z", "+02:00", "-0530", "+18:00", "+18:01", "+19:00", "z", "+02", "\n"]),
)  # fmt: skip
times = st.one_of(
    iso_times, st.sampled_from(["2026-11-01T10:00:00Z", "2026-11-02T10:00:00.000001Z"]),
    st.integers(-(2**63), 2**63), st.floats(allow_nan=False, allow_infinity=False),
    st.sampled_from([1_793_527_200_000, 253_402_300_800_000, 0.0005, -0.0015, 1e300]),
    json_values,
)  # fmt: skip
users = st.one_of(st.integers(-(2**64), 2**64), st.text(max_size=6), json_values)
pages = st.one_of(st.text(max_size=6), json_values)


def _set(doc: dict, path: str, value: object) -> None:
    parts = path.split(".")
    for part in parts[:-1]:
        doc = doc.setdefault(part, {}) if isinstance(doc.get(part, {}), dict) else {}
    doc[parts[-1]] = value


@st.composite
def documents(draw, mapping: EventMapping) -> str:
    """One line: an event with some fields replaced, dropped or duplicated, or noise."""
    doc: dict = {}
    for path, value in [
        (mapping.user, draw(users)), (mapping.time, draw(times)), (mapping.page, draw(pages)),
        (mapping.action, draw(st.sampled_from(["view", "click", None]) | json_values)),
        *((path, draw(st.text(max_size=4) | json_values)) for _, path in mapping.keep),
    ]:  # fmt: skip
        if draw(st.integers(0, 9)) > 0:
            _set(doc, path, value)
    if draw(st.booleans()):
        doc[draw(st.text(max_size=3))] = draw(json_values)
    dotted = [p for _, p in mapping.fields() if "." in p]
    if dotted and draw(st.integers(0, 3)) == 0:  # an enclosing object of another type
        _set(doc, draw(st.sampled_from(dotted)).rsplit(".", 1)[0], draw(json_values))
    line = json.dumps(doc, ensure_ascii=draw(st.booleans()))
    edit = draw(st.integers(0, 12))
    if edit == 1 and len(line) > 2:  # a key twice
        line = line[:-1] + ", " + line[1:]
    elif edit == 2:  # truncated
        line = line[: draw(st.integers(0, len(line)))]
    elif edit == 3:
        line = line[:-1] + ', "x": ' + draw(st.sampled_from(["NaN", "Infinity", "-Infinity"])) + "}"
    elif edit == 4:
        line = (
            line[:-1] + ', "x": "' + draw(st.sampled_from(["\\ud800", "\\udc00x", "a\tb"])) + '"}'
        )
    elif edit == 5:
        line = draw(st.sampled_from(["", "   ", "\t", "[1]", "42", "null", '"{}"', "{'a': 1}"]))
    elif edit == 6:
        line = line + draw(st.sampled_from([" ", " x", "{}", "\n"]))
    elif edit == 7:
        line = draw(st.text(max_size=20))
    elif edit == 8:
        line = json.dumps(draw(json_values))
    return line


def _python(lines: list[str], mapping: EventMapping) -> list[tuple]:
    batch = pa.RecordBatch.from_pydict(
        {"value": lines, "error": [None] * len(lines), "source": ["s"] * len(lines)},
        schema=pa.schema([("value", pa.string()), ("error", pa.string()), ("source", pa.string())]),
    )
    out = json_lines.parse_batch(batch, json_lines.plan(mapping), NOW_US, DAY_US)
    micros = out.column("event_time").cast(pa.int64())
    out = out.set_column(out.schema.get_field_index("event_time"), "event_time", micros)
    out = out.to_pylist()
    return [(r, line) for r, line in zip(out, lines, strict=True)]


def _check(lines: list[str], mapping: EventMapping) -> None:
    for row, line in _python(lines, mapping):
        want = read_line(line, mapping, NOW_US, DAY_US)
        if want == OPEN:
            assert not row[json_lines.EXACT], line
            continue
        if not row[json_lines.EXACT]:
            continue  # left to the fallback: decided there (test_parse_equal.py)
        reason, event = want
        assert row["reason"] == reason, line
        assert row["raw"] == (None if reason is None else line)
        if event is not None:
            assert {k: row[k] for k in event} == event, line


@settings(max_examples=60, deadline=None)
@given(st.lists(documents(DEFAULT), min_size=1, max_size=20))
def test_default_mapping_reads_as_the_reference(lines):
    _check(lines, DEFAULT)


@settings(max_examples=60, deadline=None)
@given(st.lists(documents(STRING_EPOCH), min_size=1, max_size=20))
def test_string_ids_and_epoch_times_read_as_the_reference(lines):
    _check(lines, STRING_EPOCH)


def test_most_valid_lines_are_decided_in_python():
    """The fallback is for rare lines: a plain event never goes there."""
    line = json.dumps(
        {"user_id": 7, "event_time": "2026-11-01T10:00:00Z", "page": {"current": "a"}}
    )
    ((row, _),) = _python([line], DEFAULT)
    assert row[json_lines.EXACT] and row["reason"] is None
