"""A compacted local Parquet output read plainly at `OUT/NAME` (sinks/views.py): every committed
row once with its batch id, for pyarrow, DuckDB, Polars and Spark, and through kill -9 at each
step of building and switching a view."""

from __future__ import annotations

import os
from collections import Counter
from pathlib import Path

import duckdb
import polars as pl
import pyarrow.dataset as ds
import pyarrow.parquet as pq

from sessionize.commands.maintain import maintain
from sessionize.sinks.parquet import ParquetSink
from sessionize.sinks.views import VIEWS, uses_views
from tests.readers import polling_sessions
from tests.sinks.conftest import kill_when_paused
from tests.sinks.rows import invalid, sessions
from tests.sinks.test_compaction import _expected, _publish, _seen


def _rows(table) -> Counter:
    return Counter(zip(table["batch_id"].to_pylist(), table["session_id"].to_pylist(), strict=True))


def _plain(root: str):
    return ds.dataset(f"{root}/sessions", format="parquet", partitioning="hive").to_table()


def _next_view(root: str, name: str) -> int:
    """The version the next view of `name` gets: one past every view there and the current."""
    where = Path(root, VIEWS, name)
    versions = [int(p.name) for p in where.iterdir() if p.name.isdigit()] if where.exists() else []
    current = Path(root, name)
    if current.is_symlink():
        versions.append(int(os.readlink(current).rsplit("/", 1)[-1]))
    return max(versions, default=0) + 1


def test_plain_readers_of_out_name_see_every_committed_row_once_after_compaction(tmp_path, spark):
    root = str(tmp_path / "out")
    sink = ParquetSink(root)
    _publish(sink, {b: "v" for b in range(4)})
    sink.clear_staging(5)  # staged before the first compaction, published after it
    for part in (0, 1):
        tags = [f"v-5-{part}-{i}" for i in range(3)]
        sink.write_part("invalid_events", 5, part, invalid(tags))
        sink.write_part("sessions", 5, part, sessions(tags, first_user=5000 + 100 * part))
    sink.compact(upto=1)  # 0, 1 compacted; 2, 3 written before the output had a view
    sink.publish(5)
    assert all(
        "batch_id" in pq.read_schema(f).names
        for f in Path(root, "_batches", "sessions", "batch_id=5").rglob("*.parquet")
    )
    _publish(sink, {4: "v", 2: "w"})  # a new batch, and a batch published again
    want = _expected({0: "v", 1: "v", 2: "w", 3: "v", 4: "v", 5: "v"})
    out = f"{root}/sessions"
    assert uses_views(root, "sessions") and os.path.islink(out)
    by_pyarrow = ds.dataset(out, format="parquet", partitioning="hive").to_table()
    assert _rows(by_pyarrow) == want
    glob = f"{out}/**/*.parquet"
    assert (
        _rows(
            duckdb.sql(
                f"SELECT * FROM read_parquet('{glob}', hive_partitioning=true)"
            ).to_arrow_table()
        )
        == want
    )
    assert _rows(pl.scan_parquet(glob, hive_partitioning=True).collect().to_arrow()) == want
    by_spark = spark.read.parquet(out)
    assert dict(by_spark.dtypes)["session_date"] == "date"
    assert _rows(by_spark.select("batch_id", "session_id").toArrow()) == want
    assert _seen(root, "sessions") == want  # the documented read path agrees
    flat = ds.dataset(f"{root}/invalid_events", format="parquet").to_table()
    assert Counter(zip(flat["batch_id"].to_pylist(), flat["raw"].to_pylist(), strict=True)) == want


def test_kill_9_while_a_view_is_built_or_switched_loses_and_doubles_nothing(tmp_path):
    root = str(tmp_path / "out")
    sink = ParquetSink(root)
    batches = {b: "k" for b in range(4)}
    _publish(sink, batches)
    committed = set(batches)
    whole = Counter({b: 6 for b in range(20)})
    with polling_sessions(
        Path(root, "sessions"), whole, retires=True, committed=lambda: set(committed)
    ) as polled:
        # the first compaction, killed before its link and the batch directory swap places
        kill_when_paused("tests.sinks.compact_proc", root, "1", point="view-converting-sessions:1")
        assert not uses_views(root, "sessions")
        assert _rows(_plain(root)) == _expected(batches)
        maintain(root, say=lambda _line: None)  # takes the layout on, finishes the compaction
        assert uses_views(root, "sessions")
        b = 4
        steps = ("view-linking", "view-built", "view-switched", "view-dropping")
        for step in steps:
            _publish(sink, {b: "k"})
            committed.add(b)
            point = f"{step}-sessions:{_next_view(root, 'sessions')}"
            kill_when_paused("tests.sinks.compact_proc", root, str(b), point=point)
            want = _expected({k: "k" for k in committed})
            assert _seen(root, "sessions") == want, step
            assert _rows(_plain(root)) == want, step
            b += 1
        _publish(sink, {b: "k"})  # the next publish builds a view of all and drops the rest
        committed.add(b)
        sink.compact(upto=b - 1)
        _publish(sink, {b + 1: "k"})
        committed.add(b + 1)
    polled.assert_clean()
    want = _expected({k: "k" for k in committed})
    assert _seen(root, "sessions") == want
    assert _rows(_plain(root)) == want
    assert len(list(Path(root, VIEWS, "sessions").iterdir())) == 1  # the current view only


def test_without_an_atomic_exchange_the_first_compaction_converts_with_two_renames(
    tmp_path, monkeypatch
):
    from sessionize.sinks import views

    monkeypatch.setattr(views, "_exchange", lambda _a, _b: False)  # not Linux, or no support
    root = str(tmp_path / "out")
    sink = ParquetSink(root)
    _publish(sink, {0: "x", 1: "x"})
    sink.compact(upto=0)
    assert uses_views(root, "sessions") and os.path.islink(f"{root}/sessions")
    assert _rows(_plain(root)) == _expected({0: "x", 1: "x"})


def test_a_read_of_the_links_target_sees_whole_batches_during_publishes(tmp_path):
    """os.path.realpath(OUT/sessions) pins one view: each batch whole, also while batches
    are published. A read that meets a deleted view reads again: the view is moved out of
    its path first, so a read that starts after fails, and one under way at that instant
    (which may miss files) finds its view gone once it is done."""
    import threading

    root = str(tmp_path / "out")
    sink = ParquetSink(root)
    _publish(sink, {0: "r"})
    sink.compact()
    done, problems, reads = threading.Event(), [], Counter()

    def publish_loop() -> None:
        try:
            _publish(sink, {b: "r" for b in range(1, 25)})
        finally:
            done.set()

    writer = threading.Thread(target=publish_loop)
    writer.start()
    try:
        while not done.is_set():
            try:
                view = os.path.realpath(f"{root}/sessions")
                table = ds.dataset(view, format="parquet", partitioning="hive").to_table()
            except FileNotFoundError:  # the view was deleted after the switch: read again
                reads["again"] += 1
                continue
            if not os.path.exists(view):  # deleted while it was listed: read again
                reads["again"] += 1
                continue
            seen = Counter(table["batch_id"].to_pylist())
            if any(n != 6 for n in seen.values()) or sorted(seen) != list(range(len(seen))):
                problems.append(dict(seen))
            reads["whole"] += 1
    finally:
        writer.join()  # a failed read leaves no writer behind to touch the next test
    assert not problems, problems[:3]
    assert reads["whole"] > 1, reads


def test_a_read_of_an_old_view_while_it_is_deleted_fails_rather_than_reading_part(
    tmp_path, monkeypatch
):
    """A reader that resolved the link before a publish and lists the view while its files
    are being deleted gets "file not found" (and reads again), never part of the view."""
    from sessionize import faults

    root = str(tmp_path / "out")
    sink = ParquetSink(root)
    _publish(sink, {0: "r", 1: "r"})
    sink.compact()
    old = os.path.realpath(f"{root}/sessions")
    outcomes: list = []

    def read_the_old_view(name: str, version: int) -> None:
        if name == "view-dropping-sessions" and not outcomes:  # one file of it deleted
            try:
                table = ds.dataset(old, format="parquet", partitioning="hive").to_table()
                outcomes.append(table.num_rows)
            except FileNotFoundError:
                outcomes.append("file not found")

    monkeypatch.setattr(faults, "pause_point", read_the_old_view)
    _publish(sink, {2: "r"})
    assert outcomes == ["file not found"]
    assert _rows(_plain(root)) == _expected({0: "r", 1: "r", 2: "r"})
