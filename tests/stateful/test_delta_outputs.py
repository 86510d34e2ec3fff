"""A processor's outputs as Delta tables: appended ones per batch, one replaced by key (a
MERGE per batch), both against the plain loop of test_running_totals through restarts."""

from __future__ import annotations

import pyarrow as pa
import pytest
from deltalake import DeltaTable

from examples.running_totals import TOTALS, RunningTotals
from sessionize import stateful
from sessionize.errors import ConfigError
from sessionize.sinks.delta import DeltaSink
from sessionize.sinks.outputs import Outputs, OutputSpec, named

from . import test_running_totals
from .helpers import ORDER_COLUMNS

SPLIT = [
    [
        {"customer_id": 1, "amount": 2.0},
        {"customer_id": 2, "amount": 1.0},
        {"customer_id": 1, "amount": 4.0},
    ],
    [{"customer_id": 2, "amount": 8.0}, {"customer_id": 3, "amount": 0.5}],
    [{"customer_id": 1, "amount": None}, {"customer_id": 3, "amount": 1.5}],
]


def latest_totals() -> RunningTotals:
    """Running totals, appended per batch and also kept as one row per customer (a local
    class: Spark's workers receive it by value)."""

    class LatestTotals(RunningTotals):
        latest = stateful.Output(TOTALS, mode="replace", key="customer_id")
        outputs = {"totals": TOTALS, "latest": latest}

        def process(self, state, rows, ctx):
            update = super().process(state, rows, ctx)
            both = {**update.outputs, "latest": update.outputs["totals"]}
            return stateful.Update(state=update.state, outputs=both, counters=update.counters)

    return LatestTotals()


def test_delta_outputs_equal_the_loop_through_restarts(spark, tmp_path):
    out = str(tmp_path / "out")
    for batch in SPLIT:  # every run is a new engine on the same output and state: a restart
        df = spark.createDataFrame(batch, ORDER_COLUMNS)
        stateful.run(
            df, latest_totals(), output=out, state="files", partitions=2, output_format="delta"
        )
    got = [set() for _ in SPLIT]
    for row in DeltaTable(f"{out}/totals").to_pyarrow_table().to_pylist():
        got[row["batch_id"]].add((row["customer_id"], row["orders"], row["total"]))
    assert got == test_running_totals.reference(SPLIT)
    latest = DeltaTable(f"{out}/latest").to_pyarrow_table()
    assert latest.schema == TOTALS  # created from the declared schema, no batch_id
    (final,) = test_running_totals.reference([[o for b in SPLIT for o in b]])
    rows = [tuple(r.values()) for r in latest.to_pylist()]
    assert sorted(rows) == sorted(final)  # one row per customer: no duplicates

    with pytest.raises(ConfigError, match=r"output_format 'delta' \(now 'parquet'\)"):
        stateful.run(
            spark.createDataFrame(SPLIT[0], ORDER_COLUMNS),
            RunningTotals(),
            output=out,
            state="files",
            partitions=2,
        )


def test_replace_by_key_is_refused_on_parquet_in_one_line(spark, tmp_path):
    df = spark.createDataFrame(SPLIT[0], ORDER_COLUMNS)
    with pytest.raises(ConfigError) as caught:
        stateful.run(df, latest_totals(), output=str(tmp_path / "out"), state="files")
    assert "'latest' is replaced by key" in str(caught.value)
    assert "output_format='delta'" in str(caught.value) and "\n" not in str(caught.value)


def _stage(sink: DeltaSink, batch_id: int, rows: list[tuple], deleted: list[int]) -> None:
    table = pa.Table.from_pylist(
        [dict(zip(TOTALS.names, r, strict=True)) for r in rows], schema=TOTALS
    )
    keys = pa.table({"customer_id": pa.array([r[0] for r in rows] + deleted, pa.int64())})
    sink.clear_staging(batch_id)
    sink.write_replaced("latest", batch_id, 0, keys, table)


def test_a_replayed_merge_gives_the_same_table(tmp_path):
    sink = DeltaSink(
        str(tmp_path), "job", Outputs((OutputSpec("latest", TOTALS, key=("customer_id",)),))
    )
    _stage(sink, 0, [(1, 1, 2.0), (2, 1, 1.0), (3, 1, 5.0)], [])
    sink.publish(0)
    for _ in range(2):  # the batch, then its replay after a failure before the state commit
        _stage(sink, 1, [(1, 2, 6.0)], [2])
        sink.publish(1)
        sink.publish(1)  # a repeated publish with nothing newly staged commits nothing
        got = DeltaTable(f"{tmp_path}/latest").to_pyarrow_table().to_pylist()
        assert sorted(tuple(r.values()) for r in got) == [(1, 2, 6.0), (3, 1, 5.0)]
    # a sink made from a checkpoint's output names (rewind) finds the replaced table
    from_names = DeltaSink(str(tmp_path), "job", named(("latest",)))
    with pytest.raises(ConfigError, match="latest are replaced by key and cannot be set back"):
        from_names.invalidate_from(1)
