"""Batch marks: every state partition's task learns the size and the latest valid event
time of the whole batch, from every map task, within the one shuffle."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pyarrow as pa
import pytest
from pyspark import TaskContext

from sessionize.engines.batch_marks import mark_keys, split_marks, with_marks
from sessionize.engines.placement import partition_users

T0 = datetime(2026, 11, 1, tzinfo=UTC)
PARTITIONS = 5


def _reports(parsed, keys: pa.Array) -> list[dict]:
    """What each partition task learns from the marked shuffle of `parsed`."""

    # Defined here so that Spark's workers get it by value (tests are not installed).
    def report(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        received = list(batches)
        table = pa.Table.from_batches(received) if received else None
        rows, records, latest = split_marks(table)
        yield pa.RecordBatch.from_pydict({
            "p": [TaskContext.get().partitionId()], "records": [records], "latest": [latest],
            "events": [0 if rows is None else rows.num_rows],
            "users": [[] if rows is None else [str(u) for u in rows["user_id"].to_pylist()]],
        })  # fmt: skip

    schema = "p long, records long, latest long, events long, users array<string>"
    marked = partition_users(with_marks(parsed, keys), PARTITIONS)
    return [r.asDict() for r in marked.mapInArrow(report, schema).collect()]


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
    table = pa.table({
        "user_id": pa.array(users).cast(user_type),
        "event_time": pa.array(times, pa.timestamp("us", tz="UTC")),
        "reason": pa.array(reasons, pa.string()),
    })  # fmt: skip
    parsed = spark.createDataFrame(table).repartition(3)  # three map tasks
    keys = mark_keys(spark, PARTITIONS, user_type)
    out = _reports(parsed, keys)
    assert sorted(r["p"] for r in out) == list(range(PARTITIONS))
    latest = int((T0 + timedelta(minutes=9)).timestamp() * 1_000_000)
    assert {(r["records"], r["latest"]) for r in out} == {(10, latest)}
    # The marks are not events: every line reaches exactly one task, once.
    assert sum(r["events"] for r in out) == 10
    placed = sorted(u for r in out for u in r["users"])
    assert placed == sorted(str(u) for u in range(1, 11))


def test_a_batch_without_rows_sends_no_marks(spark):
    table = pa.table({
        "user_id": pa.array([], pa.int64()),
        "event_time": pa.array([], pa.timestamp("us", tz="UTC")),
        "reason": pa.array([], pa.string()),
    })  # fmt: skip
    parsed = spark.createDataFrame(table).repartition(2)
    keys = mark_keys(spark, PARTITIONS, pa.int64())
    out = _reports(parsed, keys)
    assert {(r["records"], r["latest"], r["events"]) for r in out} <= {(0, None, 0)}
