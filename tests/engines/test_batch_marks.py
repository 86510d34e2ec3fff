"""Batch marks: every state partition's task learns the size and the latest valid event
time of the whole batch, from every map task, within the one shuffle."""

from __future__ import annotations

import gzip
import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pyspark import TaskContext
from pyspark.sql import functions as F

from sessionize.engines.batch_marks import mark_keys, split_marks, with_marks
from sessionize.engines.partition import check_placement
from sessionize.engines.placement import partition_users, user_partitions
from sessionize.events.marks import LATEST, RECORDS
from sessionize.events.packing import PACKED, unpack
from sessionize.mapping import EventMapping
from sessionize.parsing import RECORDS_SCHEMA, parse, parse_exact
from sessionize.sources.files import LISTED_FILE, decode_listed, listed_files
from tests.events.test_blocks import DAY_US, DEFAULT, NOW_US, documents

T0 = datetime(2026, 11, 1, tzinfo=UTC)
PARTITIONS = 5


def _reports(marked) -> list[dict]:
    """What each partition task learns from the shuffle of `marked` (rows and marks)."""

    # Defined here so that Spark's workers get it by value (tests are not installed).
    def report(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        received = list(batches)
        table = pa.Table.from_batches(received) if received else None
        rows, records, latest = split_marks(table)
        yield pa.RecordBatch.from_pydict(
            {
                "p": [TaskContext.get().partitionId()],
                "records": [records],
                "latest": [latest],
                "events": [0 if rows is None else rows.num_rows],
                "users": [[] if rows is None else [str(u) for u in rows["user_id"].to_pylist()]],
            }
        )

    schema = "p long, records long, latest long, events long, users array<string>"
    shuffled = partition_users(marked, PARTITIONS)
    return [r.asDict() for r in shuffled.mapInArrow(report, schema).collect()]


@pytest.mark.parametrize("user_type", [pa.int64(), pa.string()], ids=["long", "string"])
def test_each_mark_key_is_placed_by_spark_in_its_partition(spark, user_type):
    for partitions in (1, 4, 200):
        keys = mark_keys(partitions, user_type)
        assert keys.type == user_type
        placed = user_partitions(spark, keys, partitions)  # Spark's own shuffle
        assert placed.tolist() == list(range(partitions))


@pytest.mark.parametrize("user_type", [pa.int64(), pa.string()], ids=["long", "string"])
def test_every_partition_learns_the_whole_batch(spark, user_type):
    users = [1, 2, 3, 4, 5, 6, 7, 8, 9]
    times = [T0 + timedelta(minutes=m) for m in (5, 1, 9, 2, 7, 3, 8, 4, 6)]
    reasons = [None] * 9
    # An invalid line dated later than every valid one: it counts as a line, never as the
    # latest event time.
    users.append(10)
    times.append(T0 + timedelta(days=400))
    reasons.append("event_time too far in the future")
    table = pa.table(
        {
            "user_id": pa.array(users).cast(user_type),
            "event_time": pa.array(times, pa.timestamp("us", tz="UTC")),
            "reason": pa.array(reasons, pa.string()),
        }
    )
    parsed = spark.createDataFrame(table).repartition(3)  # three map tasks
    keys = mark_keys(PARTITIONS, user_type)
    out = _reports(with_marks(parsed, keys))
    assert sorted(r["p"] for r in out) == list(range(PARTITIONS))
    latest = int((T0 + timedelta(minutes=9)).timestamp() * 1_000_000)
    assert {(r["records"], r["latest"]) for r in out} == {(10, latest)}
    # The marks are not events: every line reaches exactly one task, once.
    assert sum(r["events"] for r in out) == 10
    placed = sorted(u for r in out for u in r["users"])
    assert placed == sorted(str(u) for u in range(1, 11))
    # The rows travel packed, each in the partition Spark's shuffle gives its key.
    spark_placed = user_partitions(spark, table["user_id"].combine_chunks(), PARTITIONS)
    assert {u: r["p"] for r in out for u in r["users"]} == {
        str(u): int(p) for u, p in zip(users, spark_placed, strict=True)
    }


def test_a_batch_without_rows_sends_no_marks(spark):
    table = pa.table(
        {
            "user_id": pa.array([], pa.int64()),
            "event_time": pa.array([], pa.timestamp("us", tz="UTC")),
            "reason": pa.array([], pa.string()),
        }
    )
    parsed = spark.createDataFrame(table).repartition(2)
    keys = mark_keys(PARTITIONS, pa.int64())
    out = _reports(with_marks(parsed, keys))
    assert {(r["records"], r["latest"], r["events"]) for r in out} <= {(0, None, 0)}


def _expected(spark, lines: list[str], mapping: EventMapping) -> tuple[int, int | None]:
    """(lines, latest valid event time in µs) by Spark's expressions alone, in a plain loop."""
    raw = _raw(spark, lines)
    now = F.timestamp_micros(F.lit(NOW_US))
    exact = parse_exact(raw, now=now, max_future_us=DAY_US, mapping=mapping)
    rows = exact.select("reason", F.unix_micros("event_time").alias("us")).collect()
    latest = None
    for row in rows:
        if row["reason"] is None and (latest is None or row["us"] > latest):
            latest = row["us"]
    return len(rows), latest


def _raw(spark, lines: list[str]):
    raw = spark.createDataFrame(
        [(line, None, f"s{i}") for i, line in enumerate(lines)],
        "value string, error string, source string",
    )
    return raw.repartition(3)  # three reading tasks


def _read_and_marked(spark, lines: list[str], mapping: EventMapping) -> list[dict]:
    keys = mark_keys(PARTITIONS, pa.string() if mapping.string_keys else pa.int64())
    marked = parse(
        _raw(spark, lines),
        now=NOW_US,
        max_future_us=DAY_US,
        mapping=mapping,
        valid_sources=False,
        marks=keys,
    )
    return _reports(marked)


def _unpacked(parsed) -> list[dict]:
    """The rows of a marked parse but its marks, those that travel packed unpacked."""
    table = parsed.toArrow()
    rows = table.filter(pc.is_null(table[RECORDS])).drop_columns([RECORDS, LATEST])
    return unpack(rows).to_pylist()


def _line(user: object, minute: int, page: str = "home") -> str:
    time = (T0 + timedelta(minutes=minute)).strftime("%Y-%m-%dT%H:%M:%SZ")
    return json.dumps({"user_id": user, "event_time": time, "page": {"current": page}})


@pytest.mark.parametrize("string_ids", [False, True], ids=["long", "string"])
def test_the_reading_task_marks_what_the_exact_path_finds_valid(spark, string_ids):
    """The block reader leaves some lines to Spark's expressions, which judge them after the
    reading task has sent its marks: the latest of them still reaches every partition."""
    mapping = EventMapping(user_type="string") if string_ids else DEFAULT
    user = str if string_ids else int
    lines = [
        _line(user(1), 5),
        _line(user(2), 3),
        _line(user(3), 20, page="NaN"),  # left to the exact path, valid: the latest
        _line(user(4), 15) + " ",  # left to the exact path, valid
        '{"user_id": 5, "user_id": 5, "event_time": "2026-11-01T02:00:00Z", "page": {}}',
        "not json",
        "",
    ]
    out = _read_and_marked(spark, lines, mapping)
    latest = int((T0 + timedelta(minutes=20)).timestamp() * 1_000_000)
    assert _expected(spark, lines, mapping) == (len(lines), latest)
    assert sorted(r["p"] for r in out) == list(range(PARTITIONS))
    assert {(r["records"], r["latest"]) for r in out} == {(len(lines), latest)}
    # The marks are not events: every line reaches exactly one task, once.
    assert sum(r["events"] for r in out) == len(lines)


@settings(max_examples=3, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.lists(documents(DEFAULT), min_size=5, max_size=25))
def test_the_reading_tasks_marks_equal_sparks_parse(spark, lines):
    out = _read_and_marked(spark, lines, DEFAULT)
    assert {(r["records"], r["latest"]) for r in out} == {_expected(spark, lines, DEFAULT)}
    assert sum(r["events"] for r in out) == len(lines)


def test_the_task_that_reads_the_files_parses_and_marks_them(spark, tmp_path):
    """From a file's path to typed rows and marks in one task (`decode`): the same rows and
    marks as the files' records parsed in a task of their own, and the batch's figures."""
    (tmp_path / "a.json").write_text(
        "\n".join(
            [_line(1, 5), _line(2, 30), _line(3, 20, page="NaN")]  # the last: the exact path
        )
        + "\n"
    )
    bom = b"\xef\xbb\xbf"
    (tmp_path / "b.json").write_bytes(bom + _line(4, 1).encode() + b"\r\nnot json\n\xff")
    (tmp_path / "c.json").write_bytes(b"")
    # The latest event, then a truncated gzip: an `unreadable file` row.
    (tmp_path / "d.json.gz").write_bytes(gzip.compress(_line(5, 40).encode() + b"\n")[:-8])
    listing = listed_files(spark, [str(tmp_path)]).repartition(3, LISTED_FILE)
    keys = mark_keys(PARTITIONS, pa.int64())
    options = {"now": NOW_US, "max_future_us": DAY_US, "valid_sources": False, "marks": keys}
    fused = parse(listing, decode=decode_listed, **options)
    apart = parse(listing.mapInArrow(decode_listed, RECORDS_SCHEMA), **options)
    rows = _unpacked(fused)
    assert sorted(map(str, rows)) == sorted(map(str, _unpacked(apart)))
    reasons = sorted(str(r["reason"]) for r in rows)
    assert reasons == sorted(
        ["None"] * 5
        + [
            "not a JSON object",
            "not UTF-8 (byte 0)",
            "unreadable file: truncated gzip after 1 lines",
        ]
    )
    out = _reports(fused)
    latest = int((T0 + timedelta(minutes=40)).timestamp() * 1_000_000)
    assert {(r["records"], r["latest"]) for r in out} == {(8, latest)}
    assert sum(r["events"] for r in out) == 8


def test_a_partition_refuses_rows_of_a_key_spark_places_elsewhere():
    keys = mark_keys(PARTITIONS, pa.int64())  # key i is placed in partition i
    rows = pa.table({"user_id": keys.take(pa.array([2, 2]))})
    check_placement(rows, "user_id", 2, PARTITIONS)
    check_placement(None, "user_id", 2, PARTITIONS)
    with pytest.raises(RuntimeError, match="partition 3 of 5 received rows of keys"):
        check_placement(rows, "user_id", 3, PARTITIONS)


def test_the_url_referrer_and_user_agent_come_back_from_the_pack_as_sparks_parse_reads_them(
    spark,
):
    """The mapped URL, referrer and user agent cross packed dictionary-encoded
    (`events.packing`): unpacked, every event holds the values Spark's own expressions
    read from its line, repeated values, missing ones and long ones alike."""
    mapping = EventMapping(
        url="page.url", referrer="page.referrer", user_agent="technical.user_agent"
    )
    agents = ["Mozilla/5.0 (X11; Linux x86_64) Firefox/120.0", "Googlebot/2.1 " + "x" * 3000]
    lines = []
    for i in range(60):
        doc = json.loads(_line(i % 7, i))
        doc["page"]["url"] = f"https://shop.example/p{i % 4}?utm_source=s{i % 3}"
        if i % 5:
            doc["page"]["referrer"] = f"https://ref{i % 2}.example/"
        doc["technical"] = {"user_agent": agents[i % 2]} if i % 6 else {}
        lines.append(json.dumps(doc))
    columns = ["user_id", "event_time", "url", "referrer", "user_agent"]
    parsed = parse(
        _raw(spark, lines),
        now=NOW_US,
        max_future_us=DAY_US,
        mapping=mapping,
        valid_sources=False,
        marks=mark_keys(PARTITIONS, pa.int64()),
    )
    crossed = parsed.toArrow()
    assert crossed.filter(pc.is_valid(crossed[PACKED])).num_rows > 0  # they crossed packed
    now = F.timestamp_micros(F.lit(NOW_US))
    exact = parse_exact(_raw(spark, lines), now=now, max_future_us=DAY_US, mapping=mapping)
    want = [{c: r[c] for c in columns} for r in exact.toArrow().to_pylist()]
    got = [{c: r[c] for c in columns} for r in _unpacked(parsed)]
    assert len(got) == 60 and sorted(got, key=str) == sorted(want, key=str)
