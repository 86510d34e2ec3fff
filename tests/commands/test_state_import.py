"""A stream on Spark's own state stops (RocksDB: a ListState per user; HDFS-backed: one Arrow
IPC value per user), its state is imported into one of our stores, and the stream continues
on the store engine: every row equals an uninterrupted store-engine run's (batch
ids aside: Spark's engine emits a session one batch later)."""

from __future__ import annotations

from pathlib import Path

import pytest

from sessionize.commands.statetools.spark_import import import_spark_state
from sessionize.commands.stream import StreamOptions, run_stream
from tests.commands.test_state_stream import feed
from tests.helpers import OUTPUTS, generate, read_output


def stream(spark, root: Path, name: str, state: str) -> None:
    opts = StreamOptions(
        input=str(root / "in"),
        output=str(root / name / "out"),
        checkpoint=str(root / name / "chk"),
        state=state,
        partitions=2,
        max_files_per_trigger=1,
    )
    run_stream(opts, spark, on_batch=lambda _: None)


@pytest.mark.parametrize(
    "provider,target", [("spark-rocksdb", "redis"), ("spark-hdfs", "postgres")]
)
def test_import_spark_state_then_continue(spark, tmp_path, store, provider, target):
    generate(tmp_path / "all", hours=1, users=40, events_per_hour=600, invalid_rate=0.01)
    feed(tmp_path / "all", tmp_path / "in", 99)
    stream(spark, tmp_path, "clean", "files")
    (tmp_path / "in").rename(tmp_path / "clean-in")
    feed(tmp_path / "all", tmp_path / "in", 1)
    stream(spark, tmp_path, "run", provider)
    ours = store(target)
    result = import_spark_state(str(tmp_path / "run" / "chk"), ours, spark=spark, on_line=print)
    assert result is not None and result.users > 0
    feed(tmp_path / "all", tmp_path / "in", 99)
    stream(spark, tmp_path, "run", ours)
    for name in OUTPUTS:
        expected = read_output(tmp_path / "clean" / "out", name, with_batch=False)
        assert read_output(tmp_path / "run" / "out", name, with_batch=False).equals(expected)
