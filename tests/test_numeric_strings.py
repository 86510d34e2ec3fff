"""Numbers written as strings (`"49.90"`) are the numbers they write, wherever a number is
mapped (an epoch time, a `--gap-field`, a conversion's value), in every parse path: JSON
lines (the block reader and Spark's expressions), a DataFrame's typed columns, Parquet
files. A string that is not a JSON number makes the event invalid, naming the field. The
expected values come from a plain loop over the test's own numbers."""

from __future__ import annotations

import json
import re
from decimal import ROUND_HALF_UP, Decimal

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyspark.sql import functions as F

from sessionize import Sessionizer
from sessionize.columns import parse_columns
from sessionize.content import Conversion, SessionContent
from sessionize.mapping import EventMapping
from sessionize.parsing import parse, parse_exact
from sessionize.sources.parquet import parquet_batch

MAPPING = EventMapping(
    user="uid",
    time="ts",
    time_format="epoch-ms",
    page="url",
    action="type",
    keep=(),
    gap="gap_s",
    session_columns=2,
    content=SessionContent(conversions=(Conversion("purchase", "buy", "revenue"),)),
)
TIMES_ONLY = EventMapping(
    user="uid", time="ts", time_format="epoch-ms", page="url", action="type", keep=(), gap="gap_s"
)
# (ts, gap_s, type, revenue) as the input writes them; None: absent.
EVENTS = [
    (1_793_527_200_000, 60, "view", None),
    ("1793527260000", "90.5", "buy", "49.90"),
    ("1793527320000.5", 120, "buy", 12),
    (1_793_527_380_000, "300", "view", "n/a"),  # not a conversion: its value is not read
    ("1.79352744e12", None, "buy", "1e2"),
    ("soon", 60, "view", None),  # not a number
    (1_793_527_500_000, "ten", "view", None),  # not a number
    (1_793_527_560_000, 60, "buy", "$5"),  # not a number, on a conversion
    ("NaN", 60, "view", None),  # not a JSON number
    (" 1793527620000", 60, "view", None),  # not a JSON number (a space)
]


# JSON's number grammar, written here: a string holding one is that number.
_JSON_NUMBER = re.compile(r"-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?", re.ASCII)


def _number(value) -> float | None:
    if isinstance(value, str):
        return float(value) if _JSON_NUMBER.fullmatch(value) else None
    return float(value)


def _expected(values: bool = True) -> list[tuple]:
    """(uid, event µs, gap µs as text, revenue) of each valid event, or (uid, reason), in
    the order the reasons are checked (time, gap, then a conversion's value); `values`:
    whether the conversion's value is mapped. A plain loop over EVENTS."""
    out = []
    for uid, (ts, gap, kind, revenue) in enumerate(EVENTS):
        t, g = _number(ts), None if gap is None else _number(gap)
        converted = values and kind == "buy" and revenue is not None
        if t is None:
            out.append((uid, "ts: expected a number"))
        elif gap is not None and g is None:
            out.append((uid, "gap_s: expected a number"))
        elif converted and _number(revenue) is None:
            out.append((uid, "revenue: expected a number"))
        else:
            us = int(Decimal(repr(t * 1000)).to_integral_value(ROUND_HALF_UP))
            gap_us = None if g is None else str(int(Decimal(repr(g * 1e6)).to_integral_value()))
            out.append((uid, us, gap_us, _number(revenue) if converted else None))
    return out


def _lines() -> list[str]:
    lines = []
    for uid, (ts, gap, kind, revenue) in enumerate(EVENTS):
        doc = {"uid": uid, "ts": ts, "url": "/p", "type": kind}
        doc.update({k: v for k, v in (("gap_s", gap), ("revenue", revenue)) if v is not None})
        lines.append(json.dumps(doc))
    return lines


def _got(rows) -> list[tuple]:
    out = []
    for r in sorted(rows, key=lambda r: r["uid"] if "uid" in r else r["user_id"]):
        uid = r["user_id"]
        if r["reason"] is not None:
            out.append((uid, r["reason"]))
            continue
        # The value column carries every event's text; a conversion reads it on its own.
        value = r.get("purchase_value_json") if EVENTS[uid][2] == "buy" else None
        out.append((uid, r["event_time_us"], r["gap_us"], None if value is None else float(value)))
    return out


def _collect(df) -> list[tuple]:
    return _got(
        r.asDict() for r in df.withColumn("event_time_us", F.unix_micros("event_time")).collect()
    )


def _raw(spark):
    return spark.createDataFrame(
        [(line, None, "s") for line in _lines()], "value string, error string, source string"
    )


def test_json_lines_read_numeric_strings_on_both_paths(spark):
    """With a conversion's value mapped, Spark's expressions read every line; without it,
    the block reader reads what it can and leaves the rest to them: the same answers."""
    assert _collect(parse_exact(_raw(spark), mapping=MAPPING)) == _expected()
    for parser in (parse, parse_exact):
        assert _collect(parser(_raw(spark), mapping=TIMES_ONLY)) == _expected(values=False)


def test_a_dataframe_of_string_columns_reads_as_json_lines(spark):
    rows = [
        (
            uid,
            None if ts is None else str(ts),
            "/p",
            kind,
            None if gap is None else str(gap),
            None if rev is None else str(rev),
        )
        for uid, (ts, gap, kind, rev) in enumerate(EVENTS)
    ]
    df = spark.createDataFrame(
        rows, "uid long, ts string, url string, type string, gap_s string, revenue string"
    )
    assert _collect(parse_columns(df, MAPPING)) == _expected()


def test_parquet_files_of_numbers_and_of_numeric_strings_read_alike(spark, tmp_path):
    """One file holds the numbers as strings, another as numbers (where they are): the
    rows are those of the JSON lines."""

    def column(i: int) -> list:
        return [e[i] for e in EVENTS]

    strings = pa.table(
        {
            "uid": list(range(len(EVENTS))),
            "ts": [str(t) for t in column(0)],
            "url": ["/p"] * 10,
            "type": column(2),
            "gap_s": [None if g is None else str(g) for g in column(1)],
            "revenue": [None if r is None else str(r) for r in column(3)],
        }
    )
    pq.write_table(strings, tmp_path / "strings.parquet")
    numeric = [i for i, e in enumerate(EVENTS) if all(not isinstance(v, str) for v in (e[0], e[1]))]
    numbers = pa.table(
        {
            "uid": pa.array(numeric, pa.int64()),
            "ts": pa.array([EVENTS[i][0] for i in numeric]),
            "url": ["/p"] * len(numeric),
            "type": [EVENTS[i][2] for i in numeric],
            "gap_s": pa.array([EVENTS[i][1] for i in numeric], pa.float64()),
            "revenue": pa.array([None] * len(numeric), pa.float64()),
        }
    )
    pq.write_table(numbers, tmp_path / "numbers.parquet")
    got = _collect(
        parse_columns(parquet_batch(spark, [str(tmp_path / "strings.parquet")], MAPPING), MAPPING)
    )
    assert got == _expected()
    got = _collect(
        parse_columns(parquet_batch(spark, [str(tmp_path / "numbers.parquet")], MAPPING), MAPPING)
    )
    want = [e for e in _expected(values=False) if e[0] in numeric]  # no revenue there
    assert [g[:3] for g in got] == [w[:3] for w in want]


@pytest.mark.parametrize("as_text", [0, 1, 24])
def test_revenue_inferred_as_text_by_spark_read_json_counts_every_purchase(
    spark, tmp_path, as_text
):
    """`spark.read.json` infers a column of strings as soon as one value is a string: the
    purchases still count, with their values."""
    values = [round(10 + i * 1.25, 2) for i in range(24)]
    lines = [
        json.dumps(
            {
                "uid": 1,
                "ts": 1_793_527_200_000 + i * 60_000,
                "url": f"/p{i}",
                "type": "buy",
                "revenue": str(v) if i < as_text else v,
            }
        )
        for i, v in enumerate(values)
    ]
    (tmp_path / "e.json").write_text("\n".join(lines) + "\n")
    df = spark.read.json(str(tmp_path / "e.json"))
    result = Sessionizer(
        user="uid",
        time="ts",
        time_format="epoch-ms",
        page="url",
        action="type",
        keep={},
        conversions=["purchase=buy,value=revenue"],
        partitions=1,
    ).sessions(df)
    assert result.invalid.count() == 0
    (session,) = result.sessions.collect()
    assert session["purchase_count"] == 24
    assert session["purchase_value"] == pytest.approx(sum(values))
