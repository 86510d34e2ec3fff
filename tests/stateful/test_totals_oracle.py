"""The oracle: examples/running_totals.py (no event time) on the store engine emits, batch by
batch, what Spark's own streaming `groupBy(customer_id).agg(count, sum)` emits in update
mode without a watermark, over the same files (Spark's read with its JSON reader, ours with
`stateful.source` as the example does), on files state and on PostgreSQL."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pyarrow.dataset as ds
import pytest
from pyspark.sql import functions as F

from examples.running_totals import SOURCE_SCHEMA, RunningTotals
from sessionize import stateful

from .helpers import ORDER_COLUMNS

BATCHES = [[(1, 5.0), (2, 1.0), (1, 2.0)], [(3, 4.0)], [(2, 8.0), (2, 1.0), (4, 3.0), (1, 1.0)]]


def _orders(inp: Path) -> None:
    inp.mkdir()
    for n, batch in enumerate(BATCHES):
        path = inp / f"{n}.jsonl"
        path.write_text(
            "".join(json.dumps({"customer_id": c, "amount": a}) + "\n" for c, a in batch)
        )
        os.utime(path, (1_000_000 + n, 1_000_000 + n))


def _read(spark, inp: Path):
    return spark.readStream.schema(ORDER_COLUMNS).option("maxFilesPerTrigger", 1).json(str(inp))


def _source(spark, inp: Path):
    """The input as the example reads it."""
    return stateful.source(spark, str(inp), SOURCE_SCHEMA, options={"maxFilesPerTrigger": "1"})


@pytest.mark.parametrize("state", ["files", "postgres"], indirect=True)
def test_running_totals_equal_sparks_streaming_aggregation_in_update_mode(spark, tmp_path, state):
    _orders(tmp_path / "in")
    spark_batches: dict[int, set[tuple]] = {}

    def collect(df, batch_id: int) -> None:
        spark_batches[batch_id] = {(r[0], r[1], r[2]) for r in df.collect()}

    aggregated = (
        _read(spark, tmp_path / "in")
        .groupBy("customer_id")
        .agg(F.count(F.lit(1)).alias("orders"), F.sum("amount").alias("total"))
    )
    query = (
        aggregated.writeStream.outputMode("update")
        .foreachBatch(collect)
        .option("checkpointLocation", str(tmp_path / "spark_chk"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()

    run = stateful.start(
        _source(spark, tmp_path / "in"),
        RunningTotals(),
        output=str(tmp_path / "out"),
        checkpoint=str(tmp_path / "chk"),
        state=state(),
        partitions=2,
    )
    records = run.wait()
    assert [r["batch"]["counters"]["orders"] for r in records] == [len(b) for b in BATCHES]

    ours: dict[int, set[tuple]] = {}
    totals = ds.dataset(str(tmp_path / "out" / "totals"), partitioning="hive").to_table()
    for row in totals.to_pylist():
        ours.setdefault(row["batch_id"], set()).add(
            (row["customer_id"], row["orders"], row["total"])
        )
    assert len(spark_batches) == len(BATCHES)
    assert ours == spark_batches
