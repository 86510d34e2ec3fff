"""A stream stops, its state is repartitioned (4 -> 8, 8 -> 3) and migrated between backends,
and the stream continues on the new state: the outputs equal one uninterrupted run."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from sessionize.commands.statetools.moves import move_state
from sessionize.commands.stream import StreamOptions, run_stream
from sessionize.errors import IncompatibleCheckpoint
from tests.helpers import assert_same_as_clean, clean_stream_run


def feed(source: Path, dest: Path, count: int) -> None:
    """Make the first `count` input files (in arrival order) visible under `dest`."""
    files = sorted((p for p in source.rglob("*") if p.is_file()), key=os.path.getmtime)
    for path in files[:count]:
        target = dest / path.relative_to(source)
        if not target.exists():
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(path, target)


def run(spark, root: Path, files: int, state: str, partitions: int) -> None:
    """The stream of `root/run` over the first `files` input files (the clean run's
    input, moved to `root/all`, appears again under `root/in`: the same paths)."""
    feed(root / "all", root / "in", files)
    opts = StreamOptions(
        input=str(root / "in"),
        output=str(root / "run" / "out"),
        checkpoint=str(root / "run" / "chk"),
        state=state,
        partitions=partitions,
        max_files_per_trigger=1,
    )
    run_stream(opts, spark, on_batch=lambda _: None)


def test_repartition_4_to_8_to_3_and_migrate_while_the_stream_goes_on(spark, tmp_path, store):
    """Six input files, one per batch: files then PostgreSQL then Redis then files again,
    4 then 8 then 3 partitions."""
    clean_stream_run(spark, tmp_path)
    (tmp_path / "in").rename(tmp_path / "all")
    chk = str(tmp_path / "run" / "chk")
    run(spark, tmp_path, 2, "files", 4)
    postgres = store("postgres")
    moved = move_state(postgres, checkpoint=chk, partitions=8, spark=spark, on_line=print)
    assert moved is not None and len(moved.partitions) == 8 and moved.users > 0
    with pytest.raises(IncompatibleCheckpoint):  # the old state and count are refused now
        run(spark, tmp_path, 3, "files", 4)
    run(spark, tmp_path, 3, postgres, 8)
    redis = store("redis")
    move_state(redis, checkpoint=chk, partitions=3, spark=spark, on_line=print)
    run(spark, tmp_path, 4, redis, 3)
    files = store("files")
    move_state(files, checkpoint=chk, on_line=print)  # same count: no Spark, no rehash
    run(spark, tmp_path, 6, files, 3)
    assert_same_as_clean(tmp_path, tmp_path / "run")
