"""A stream's per-batch DataFrame analysed once per query (`engines/plan_once.py`): built over
the first micro-batch, run over every later one with that batch's input in its place, giving
the rows that building it anew gives; a plan it cannot take apart is built anew every time."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from sessionize.engines.plan_once import PlanOnce, properties_reach_jobs
from tests.helpers import read_output


def _files(root: Path, batches: int) -> Path:
    root.mkdir()
    for b in range(batches):
        (root / f"{b}.txt").write_text("".join(f"{b}-{i}-{'x' * i}\n" for i in range(10 + b)))
    return root


def _each_batch(spark, root: Path, chk: Path, build, plan: PlanOnce) -> list[tuple]:
    """(rows of `plan.over(batch, build)`, rows of `build(batch)`) for every micro-batch of
    a stream of `root`'s files, one file a batch."""
    got: list[tuple] = []

    def run(df: DataFrame, batch_id: int) -> None:
        once = sorted(plan.over(df, build).collect())
        anew = sorted(build(df).collect())
        got.append((once, anew))

    query = (
        spark.readStream.format("text")
        .option("maxFilesPerTrigger", 1)
        .load(str(root))
        .writeStream.foreachBatch(run)
        .option("checkpointLocation", str(chk))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    return got


@pytest.mark.needs_spark("plan_once")
def test_later_batches_run_on_the_first_batchs_plan_with_their_own_input(spark, tmp_path):
    builds = []

    def build(df: DataFrame) -> DataFrame:
        builds.append(1)
        parts = df.select(F.split("value", "-").alias("p"), F.length("value").alias("n"))
        steps = parts.select(F.col("p")[0].alias("batch"), "n").where(F.col("n") > 4)
        return steps.groupBy("batch").agg(F.count("*").alias("lines"), F.sum("n").alias("chars"))

    plan = PlanOnce()
    got = _each_batch(spark, _files(tmp_path / "in", 3), tmp_path / "chk", build, plan)
    assert len(got) == 3 and plan.reused == 2
    assert len(builds) == 1 + 3  # the first batch's plan, and the plans built anew to compare
    files = []
    for once, anew in got:
        assert once == anew
        b = int(once[0]["batch"])  # the file of this batch (Spark picks the order)
        files.append(b)
        # that file's lines: the reference, counted by a plain loop
        lines = [f"{b}-{i}-{'x' * i}" for i in range(10 + b)]
        kept = [len(x) for x in lines if len(x) > 4]
        assert [tuple(r) for r in once] == [(str(b), len(kept), sum(kept))]
    assert sorted(files) == [0, 1, 2]


def test_a_plan_with_two_inputs_is_built_anew_for_every_batch(spark, tmp_path):
    def build(df: DataFrame) -> DataFrame:
        return df.join(df.select("value"), "value").select(F.count("*").alias("n"))

    plan = PlanOnce()
    got = _each_batch(spark, _files(tmp_path / "in", 2), tmp_path / "chk", build, plan)
    assert plan.reused == 0
    assert sorted(once[0]["n"] for once, _ in got) == [10, 11]


_UNPINNED_STREAM = textwrap.dedent("""
    import sys
    from sessionize.commands.stream import StreamOptions, run_stream
    from sessionize.engines.plan_once import properties_reach_jobs
    from sessionize.spark_session import get_spark

    spark = get_spark("unpinned", shuffle_partitions=2)
    print(properties_reach_jobs(spark.range(1)))
    root = sys.argv[1]
    opts = StreamOptions(input=f"{root}/in", output=f"{root}/out", checkpoint=f"{root}/chk",
                         partitions=2, max_files_per_trigger=1, max_future_us=3_600_000_000)
    print(len(run_stream(opts, spark, on_batch=lambda _: None)))
""")


@pytest.mark.needs_spark("plan_once")
def test_a_local_property_reaches_the_jobs_of_a_pinned_driver(spark):
    assert properties_reach_jobs(spark.range(1))  # PySpark's default: the engine plans once


def test_a_driver_whose_threads_are_not_pinned_builds_every_batchs_parse(tmp_path):
    """With PYSPARK_PIN_THREAD=false a local property the batch function sets may miss the
    job's JVM thread: such a driver builds every batch's parse with its time in the plan."""
    lines = {
        "00": [{"user_id": 1, "event_time": "2026-11-01T00:00:00Z"}],
        "01": [
            {"user_id": 2, "event_time": "2099-01-01T00:00:00Z"},
            {"user_id": 3, "event_time": "2026-11-01T01:00:00Z"},
        ],
    }
    for hour, events in lines.items():
        d = tmp_path / "in" / "event_date=2026-11-01" / f"event_hour={hour}"
        d.mkdir(parents=True)
        text = "".join(json.dumps({**e, "page": {"current": "p"}}) + "\n" for e in events)
        (d / "a.json").write_text(text)
    env = {**os.environ, "PYSPARK_PIN_THREAD": "false"}
    run = subprocess.run(
        [sys.executable, "-c", _UNPINNED_STREAM, str(tmp_path)],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.stdout.split()[-2:] == ["False", "2"]  # no property reaches a job; 2 batches
    invalid = read_output(tmp_path / "out", "invalid_events")
    assert ["2099" in raw for raw in invalid["raw"].to_pylist()] == [True]
