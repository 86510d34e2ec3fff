"""`stateful.run`: each bounded pass is the next version of the job's state, so totals
continue from one run to the next (also on a store whose job records carry the settings);
other settings on the same state are refused."""

from __future__ import annotations

import pyarrow.dataset as ds
import pytest

from examples.running_totals import RunningTotals
from sessionize import stateful
from sessionize.errors import ConfigError
from sessionize.state import open_backend
from tests.settings_in_records import move_settings_into_records

from . import test_running_totals
from .helpers import ORDER_COLUMNS

SPLIT = [
    [
        {"customer_id": 1, "amount": 2.0},
        {"customer_id": 2, "amount": 1.0},
        {"customer_id": 1, "amount": 4.0},
    ],
    [{"customer_id": 2, "amount": 8.0}, {"customer_id": 3, "amount": 0.5}],
]


def test_each_run_is_the_next_version_and_totals_continue(spark, tmp_path):
    out = str(tmp_path / "out")
    records = []
    for batch in SPLIT:
        df = spark.createDataFrame(batch, ORDER_COLUMNS)
        records.append(stateful.run(df, RunningTotals(), output=out, state="files", partitions=2))
        if not records[1:]:
            settings = move_settings_into_records(tmp_path / "out" / "_state", "stateful")
            with pytest.raises(ConfigError, match=r"partitions 2 \(now 3\)"):
                stateful.run(df, RunningTotals(), output=out, state="files", partitions=3)
    assert [r["version"] for r in records] == [0, 1]
    state = open_backend(f"files:{tmp_path / 'out' / '_state'}")
    assert state.read_job_settings("stateful") == settings
    assert "settings" not in state.read_job_record("stateful", 1)
    # `customers` is a gauge: each batch shows the customers held after it, not its change
    seen = [len({o["customer_id"] for b in SPLIT[: i + 1] for o in b}) for i in range(2)]
    assert [r["batch"]["counters"]["customers"] for r in records] == seen == [2, 3]
    assert records[1]["totals"]["counters"] == {"orders": 5, "customers": 3}
    got = [set() for _ in SPLIT]
    totals = ds.dataset(f"{out}/totals", partitioning="hive").to_table()
    for row in totals.to_pylist():
        got[row["batch_id"]].add((row["customer_id"], row["orders"], row["total"]))
    assert got == test_running_totals.reference(SPLIT)
    with pytest.raises(ConfigError, match=r"partitions 2 \(now 3\)"):
        stateful.run(
            spark.createDataFrame(SPLIT[0], ORDER_COLUMNS),
            RunningTotals(),
            output=out,
            state="files",
            partitions=3,
        )


@pytest.mark.parametrize("state", ["spark-rocksdb", "spark-hdfs"])
def test_spark_managed_state_is_refused_for_a_processor(spark, tmp_path, state):
    """Spark's state store runs sessions only: a processor's job on it is refused in one
    line, before anything is written (not a files store in a directory of that name)."""
    bounded = spark.createDataFrame(SPLIT[0], ORDER_COLUMNS)
    streaming = spark.readStream.format("rate").load()
    for call, kwargs in [(stateful.run, {}), (stateful.stream, {"checkpoint": str(tmp_path)})]:
        df = bounded if call is stateful.run else streaming
        with pytest.raises(ConfigError, match="runs sessions only") as e:
            call(df, RunningTotals(), output=str(tmp_path / "out"), state=state, **kwargs)
        assert "\n" not in str(e.value)
    assert list(tmp_path.iterdir()) == []
