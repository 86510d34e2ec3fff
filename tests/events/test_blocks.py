"""The block reader of JSON lines against an independent reference (`reference.py`).

Random documents, valid, almost valid and hostile, go through `blocks.read_block` and
`reference.read_line`: every line the reader decides has the reference's reason, and a
valid one the reference's event; every line the reference calls OPEN (read otherwise by
Spark's reader: NaN, lone surrogates, a key twice, ...) is left to the exact path.
"""

from __future__ import annotations

import json

import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from sessionize.events import blocks
from sessionize.mapping import EventMapping
from sessionize.sources.lines import RECORD_SCHEMA

from .reference import OPEN, read_line

DEFAULT = EventMapping()
STRING_EPOCH = EventMapping(
    user="who.id",
    time="ts",
    time_format="epoch-ms",
    user_type="string",
    keep=(("site", "source.site"), ("tag", "k")),
    change="section",
    gap="idle.after",
    last=(("exit", "page.exit"),),
    url="page.url",
)
NOW_US = 1_793_527_200_000_000  # 2026-11-01T10:00:00Z
DAY_US = 86_400_000_000

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**70), 2**70),
    st.floats(allow_nan=False),
    st.text(max_size=8),
    st.sampled_from(["", "5", "-x", "[", "{}", "true", "é" * 130]),
)
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
    st.integers(0, 9999) | st.sampled_from([1970, 2026]),
    digits,
    digits,
    st.sampled_from("T T"),
    digits,
    digits,
    st.sampled_from(["", ":00", ":59", ":60"]) | digits.map(lambda d: ":" + d),
    st.sampled_from(["", ".5", ".123456789", ".1234567"]),
    st.sampled_from(["", "Z", "+02:00", "-0530", "+18:00", "+18:01", "+19:00", "z", "+02", "\n"]),
)
# Numbers written as strings, and strings that look like numbers but are not JSON's.
number_strings = st.one_of(
    st.integers(-(2**70), 2**70).map(str),
    st.floats(allow_nan=False).map(repr),
    st.sampled_from(
        [
            "1793527200000",
            "1793527200000.5",
            "49.90",
            "-0",
            "1e3",
            "1E+2",
            "0.0",
            "01",
            "1.",
            ".5",
            "+1",
            " 1",
            "1 ",
            "1\n",
            "NaN",
            "Infinity",
            "1e400",
            "0x10",
            "1_000",
            "",
            "١٢",
        ]
    ),
)
times = st.one_of(
    iso_times,
    st.sampled_from(["2026-11-01T10:00:00Z", "2026-11-02T10:00:00.000001Z"]),
    st.sampled_from(
        [
            "0001-12-31T23:59:59.999999Z",
            "0002-01-01T00:00:00Z",
            "0002-01-01T00:00:00+00:01",
            "9998-12-31T23:59:59.999999Z",
            "9998-12-31T23:30:00-01:00",
            "9999-01-01T00:00:00Z",
        ]
    ),  # the valid years' ends
    st.sampled_from(
        [-62_104_060_800_000, -62_104_060_800_001, 253_370_764_799_999, 253_370_764_800_000]
    ),
    st.integers(-(2**63), 2**63),
    st.floats(allow_nan=False, allow_infinity=False),
    st.sampled_from([1_793_527_200_000, 253_402_300_800_000, 0.0005, -0.0015, 1e300]),
    number_strings,
    json_values,
)
users = st.one_of(st.integers(-(2**64), 2**64), st.text(max_size=6), json_values)
pages = st.one_of(st.text(max_size=6), json_values)
gaps = st.one_of(
    st.floats(allow_nan=False),
    st.integers(-5, 3_000_000),
    st.sampled_from([0, 1e-7, 2592000]),
    number_strings,
    st.sampled_from(["60", "90.5", "2592000", "2592000.1"]),
    json_values,
)


# String contents: lone surrogates (after an even run of backslashes), pairs, a control
# character, and escaped backslashes before a `u` (no escape of a surrogate).
_ESCAPES = [
    "\\ud800",
    "\\udc00x",
    "a\tb",
    "\\ud83d\\ude00",
    "\\\\ud800",
    "\\\\\\ud800",
    "\\ud800\\ud800\\udc00",
    "\\uDBFF\\uDFFF",
    "\\\\\\ud83d\\ude00",
]


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
        (mapping.user, draw(users)),
        (mapping.time, draw(times)),
        (mapping.page, draw(pages)),
        (mapping.action, draw(st.sampled_from(["view", "click", None]) | json_values)),
        *((path, draw(st.text(max_size=4) | json_values)) for _, path in mapping.keep),
        *(
            (path, draw(st.text(max_size=4) | json_values))
            for _, path in (*mapping.last, *mapping.mapped_pairs)
        ),
        *([(mapping.change, draw(st.text(max_size=4) | json_values))] if mapping.change else []),
        *([(mapping.gap, draw(gaps))] if mapping.gap else []),
    ]:
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
        line = line[:-1] + ', "x": "' + draw(st.sampled_from(_ESCAPES)) + '"}'
    elif edit == 5:
        line = draw(st.sampled_from(["", "   ", "\t", "[1]", "42", "null", '"{}"', "{'a': 1}"]))
    elif edit == 6:
        line = line + draw(st.sampled_from([" ", " x", "{}", "\n"]))
    elif edit == 7:
        line = draw(st.text(max_size=20))
    elif edit == 8:
        line = json.dumps(draw(json_values))
    return line


def _read(lines: list[str | None], mapping: EventMapping, errors=None) -> list[dict]:
    batch = pa.RecordBatch.from_pydict(
        {"value": lines, "error": errors or [None] * len(lines), "source": ["s"] * len(lines)},
        schema=RECORD_SCHEMA,
    )
    out = blocks.read_block(batch, blocks.plan(mapping), NOW_US, DAY_US)
    micros = out.column("event_time").cast(pa.int64())
    at = out.schema.get_field_index("event_time")
    return out.set_column(at, "event_time", micros).to_pylist()


def _check(lines: list[str], mapping: EventMapping) -> None:
    for row, line in zip(_read(lines, mapping), lines, strict=True):
        want = read_line(line, mapping, NOW_US, DAY_US)
        if want == OPEN:
            assert row[blocks.EXACT], line
        if row[blocks.EXACT]:
            assert row["raw"] == line and row["reason"] is None
            continue  # left to the exact path, which reads every line as Spark does
        reason, event = want
        assert row["reason"] == reason, line
        assert row["raw"] == (None if reason is None else line)
        if event is not None:
            assert {k: row[k] for k in event} == event, line


@settings(max_examples=40, deadline=None)
@given(st.lists(documents(DEFAULT), min_size=1, max_size=20))
def test_default_mapping_reads_as_the_reference(lines):
    _check(lines, DEFAULT)


@settings(max_examples=40, deadline=None)
@given(st.lists(documents(STRING_EPOCH), min_size=1, max_size=20))
def test_string_ids_epoch_times_and_rule_fields_read_as_the_reference(lines):
    _check(lines, STRING_EPOCH)


def _event(user, time="2026-11-01T10:00:00Z", **extra) -> str:
    return json.dumps({"user_id": user, "event_time": time, "page": {"current": "a"}, **extra})


def test_a_bad_line_leaves_only_itself_to_the_exact_path():
    """Lines around a refused one are read: a block is split, never given up whole."""
    lines = [_event(i) for i in range(3000)]
    lines[1500] = '{"user_id": "7", "event_time": "2026-11-01T10:00:00Z"}'
    lines[2000] = '{"user_id": 8, "user_id": 9}'
    rows = _read(lines, DEFAULT)
    assert [i for i, r in enumerate(rows) if r[blocks.EXACT]] == [1500, 2000]
    assert [r["user_id"] for r in rows if not r[blocks.EXACT]] == [
        i for i in range(3000) if i not in (1500, 2000)
    ]
    assert all(r["reason"] is None for r in rows if not r[blocks.EXACT])


def test_a_deeply_nested_line_is_left_to_the_exact_path():
    """Spark's reader refuses nesting that pyarrow reads: such a line is not decided here."""
    deep = "[" * 65 + "]" * 65
    lines = [_event(0), _event(1)[:-1] + f', "x": {deep}}}', _event(2)[:-1] + ', "x": [[1]]}']
    assert [r[blocks.EXACT] for r in _read(lines, DEFAULT)] == [False, True, False]


def test_without_valid_sources_only_invalid_and_exact_lines_keep_their_source():
    lines = [_event(1), '{"user_id": 2}', '{"user_id": 3, "user_id": 3}']
    batch = pa.RecordBatch.from_pydict(
        {"value": lines, "error": [None] * 3, "source": ["f:0", "f:1", "f:2"]},
        schema=RECORD_SCHEMA,
    )
    out = blocks.read_block(batch, blocks.plan(DEFAULT), NOW_US, DAY_US, valid_sources=False)
    assert out.column("source").to_pylist() == [None, "f:1", "f:2"]
    assert out.column(blocks.EXACT).to_pylist() == [False, False, True]


def test_a_sources_error_and_an_unreadable_record_are_the_reason():
    rows = _read(["\\xff", None, "   "], DEFAULT, errors=["not UTF-8 (byte 0)", None, None])
    assert [r["reason"] for r in rows] == ["not UTF-8 (byte 0)", "unreadable record", "empty line"]
    assert [r[blocks.EXACT] for r in rows] == [False, False, False]


def test_string_ids_get_sparks_xxhash64_key(spark):
    from pyspark.sql import functions as F

    ids = ["u1", "é", "x" * 256, "\U0001f600", "a b"]
    lines = [
        json.dumps({"who": {"id": u}, "ts": 1_793_527_200_000, "page": {"current": "p"}})
        for u in ids
    ]
    rows = _read(lines, STRING_EPOCH)
    expected = spark.createDataFrame([(u,) for u in ids], "u string").select(
        F.xxhash64("u").alias("k")
    )
    assert [r[blocks.USER_KEY] for r in rows] == [r.k for r in expected.collect()]


def test_nan_and_infinities_at_any_depth_are_left_to_the_exact_path():
    """pyarrow reads `NaN`, `Inf` and `Infinity` as numbers, Spark's reader its own way."""
    tails = [
        '"x": Inf',
        '"x": -Inf',
        '"x": [1, [2.5, NaN]]',
        '"x": [{"y": {"z": Infinity}}]',
        '"x": [{"y": {"z": 1.5}}]',
        '"x": "NaN Inf"',
    ]
    lines = [_event(i)[:-1] + ", " + tail + "}" for i, tail in enumerate(tails)]
    assert [read_line(line, DEFAULT, NOW_US, DAY_US) == OPEN for line in lines] == [
        True,
        True,
        True,
        True,
        False,
        False,
    ]
    exact = [r[blocks.EXACT] for r in _read(lines, DEFAULT)]
    assert exact == [True, True, True, True, False, False]


def test_a_batch_without_lines_reads_as_no_rows():
    assert _read([], DEFAULT) == []


def test_times_of_the_year_0_or_ending_in_a_line_break_are_left_to_the_exact_path():
    """Java's `$` lets a time end before a line break, and Spark reads the year 0 its own way."""
    at = "2026-11-01T10:00:00Z"
    times = [
        "0000-01-01T00:00:00Z",
        at + "\n",
        at + "\u2028",
        at + "\u0085",
        at + "\u2027",
        "0001-01-01T00:00:00Z",
    ]
    lines = [_event(i, t) for i, t in enumerate(times)]
    assert [read_line(line, DEFAULT, NOW_US, DAY_US) == OPEN for line in lines] == [
        True,
        True,
        True,
        True,
        False,
        False,
    ]
    exact = [r[blocks.EXACT] for r in _read(lines, DEFAULT)]
    assert exact == [True, True, True, True, False, False]


# The JSON value most likely to be read, for each byte a value may start with.
_VALUE_STARTING_WITH = {
    '"': '"x"',
    "{": "{}",
    "[": "[]",
    "t": "true",
    "f": "false",
    "n": "null",
    "-": "-1",
    "N": "NaN",
    "I": "Infinity",
}


def test_a_first_field_the_plan_calls_refused_is_refused_by_pyarrow():
    """The lines `read_block` leaves to the exact path unread, as starting with a field read
    whose value pyarrow refuses for its type, are refused by pyarrow read alone."""
    for mapping in (DEFAULT, STRING_EPOCH):
        plan = blocks.plan(mapping)
        for prefix, allowed in plan.firsts:
            for char in [chr(byte) for byte in range(128)] + ["é", "\u0085", "€", "😀"]:
                line = (prefix + " " + _VALUE_STARTING_WITH.get(char, char + "1") + "}").encode()
                if not allowed[line[len(prefix) + 1]]:
                    assert isinstance(blocks._read(plan, pa.py_buffer(line)), str), line


def test_numeric_strings_are_the_numbers_they_write_in_runs_and_mixed():
    """A block of epoch times and gaps written as strings is read here, not left line by
    line to the exact path; numbers and numeric strings may alternate; a string that is
    not a JSON number is left to the exact path, which names it."""

    def line(ts, gap=None) -> str:
        doc = {"who": {"id": "u"}, "ts": ts, "page": {"current": "p"}}
        return json.dumps(doc if gap is None else {**doc, "idle": {"after": gap}})

    strings = [line(str(1_793_527_200_000 + i), "60") for i in range(5000)]
    rows = _read(strings, STRING_EPOCH)
    assert not any(r[blocks.EXACT] for r in rows)
    assert [r["event_time"] for r in rows[:2]] == [1_793_527_200_000_000, 1_793_527_200_001_000]
    assert {r["gap_us"] for r in rows} == {"60000000"}
    mixed = [
        line("1793527200000.5"),
        line(1_793_527_200_000),
        line("1.7935272e12", 90.5),
        line("abc"),
        line("NaN"),
        line(" 1793527200000"),
        line(1_793_527_200_000, "x"),
    ]
    rows = _read(mixed, STRING_EPOCH)
    assert [r[blocks.EXACT] for r in rows] == [False, False, False, True, True, True, True]
    assert [r["event_time"] for r in rows[:3]] == [
        1_793_527_200_000_500,
        1_793_527_200_000_000,
        1_793_527_200_000_000,
    ]
    assert rows[2]["gap_us"] == "90500000"
