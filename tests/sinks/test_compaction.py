"""Compaction of local Parquet outputs (sinks/compaction.py): every committed row once through
kill -9 at each step, for the documented reader and for plain glob readers; rewind and
republished batches retire exactly their rows, also inside compacted files."""

from __future__ import annotations

import threading
from collections import Counter
from pathlib import Path

import pytest

from sessionize.commands.maintain import maintain
from sessionize.sinks.compaction import read_manifest
from sessionize.sinks.parquet import ParquetSink
from sessionize.sinks.registry import committed_rows
from sessionize.sinks.views import batches_root
from tests.readers import polling_sessions
from tests.sinks.conftest import kill_when_paused
from tests.sinks.rows import invalid, sessions

NAMES = ("sessions", "invalid_events")


def _expected(batches: dict[int, str]) -> Counter:
    """(batch_id, tag) of every row `rows.stage` wrote for {batch: its tag}: a plain loop."""
    rows = Counter()
    for b, tag in batches.items():
        for part in (0, 1):
            for i in range(3):
                rows[(b, f"{tag}-{b}-{part}-{i}")] += 1
    return rows


def _seen(root: str, name: str) -> Counter:
    data = committed_rows(root, name)
    if data is None:
        return Counter()
    t = data.to_table()
    tag = "raw" if name == "invalid_events" else "session_id"
    return Counter(zip(t["batch_id"].to_pylist(), t[tag].to_pylist(), strict=True))


def _publish(sink: ParquetSink, batches: dict[int, str]) -> None:
    """Each batch as two tasks stage it; users differ between batches (readers.py counts a
    (user, start) twice as a row seen twice)."""
    for b, tag in batches.items():
        sink.clear_staging(b)
        for part in (0, 1):
            tags = [f"{tag}-{b}-{part}-{i}" for i in range(3)]
            sink.write_part("invalid_events", b, part, invalid(tags))
            sink.write_part("sessions", b, part, sessions(tags, first_user=1000 * b + 100 * part))
        sink.publish(b)


def _batch_dirs(root: str, name: str) -> list[int]:
    where = Path(batches_root(root, name))
    return sorted(int(p.name.split("=")[1]) for p in where.glob("batch_id=*"))


def test_kill_9_at_each_step_of_a_compaction_loses_and_doubles_nothing(tmp_path):
    root = str(tmp_path / "out")
    sink = ParquetSink(root)
    batches = {b: "t" for b in range(6)}
    _publish(sink, batches)
    expected = {name: _expected(batches) for name in NAMES}
    problems: list[str] = []
    done = threading.Event()

    reads = Counter()

    def documented_reader() -> None:  # committed_rows, as the docs read an output
        while not done.wait(0.02):
            for name in NAMES:
                for _attempt in range(3):
                    try:
                        seen = _seen(root, name)
                    except FileNotFoundError:  # a file retired after listing: read again
                        continue
                    except Exception as e:  # noqa: BLE001 - every error is a finding
                        problems.append(f"{name}: {type(e).__name__}: {e}")
                        return
                    reads[name] += 1
                    if seen != expected[name]:
                        problems.append(f"{name}: {sorted(seen ^ expected[name])[:4]}")
                    break
                else:
                    problems.append(f"{name}: files kept vanishing")

    def documented_read_now() -> None:
        for name in NAMES:
            assert _seen(root, name) == expected[name], name

    reader = threading.Thread(target=documented_reader)
    whole = Counter({b: 6 for b in batches})
    reader.start()
    try:
        with polling_sessions(Path(root, "sessions"), whole, retires=True) as polled:
            # killed after writing the compacted files, before the manifest: they are
            # unreferenced and the batch directories still hold the rows
            kill_when_paused(
                "tests.sinks.compact_proc", root, "3", point="compacted-files-sessions:1"
            )
            assert _batch_dirs(root, "sessions") == list(range(6))
            documented_read_now()
            # killed after the manifest: it covers 0..3 while their directories remain
            kill_when_paused(
                "tests.sinks.compact_proc", root, "3", point="compacted-manifest-sessions:1"
            )
            assert read_manifest(*sink._fs(), "sessions").batches == {0, 1, 2, 3}
            assert _batch_dirs(root, "sessions") == list(range(6))
            documented_read_now()
            maintain(root, say=lambda _line: None)  # finishes the interrupted compaction
            assert _batch_dirs(root, "sessions") == [4, 5]
        # the rest, invalid_events included (a glob over no file at all fails in Polars: the
        # poller reads only while a batch directory is there)
        sink.compact()
    finally:
        done.set()
        reader.join()
    assert not problems, problems[:5]
    assert all(reads[name] for name in NAMES), reads
    polled.assert_clean()
    for name in NAMES:
        assert _seen(root, name) == expected[name]
        assert _batch_dirs(root, name) == []
        assert sink.published(name) == list(range(6))
    compacted = [p for p in Path(root, "_compacted").rglob("*.parquet")]
    assert len(compacted) == 3, compacted  # two session dates, one commit day


def test_rewind_and_republish_retire_exactly_their_rows_inside_compacted_files(tmp_path):
    root = str(tmp_path / "out")
    sink = ParquetSink(root)
    batches = {b: "a" for b in range(6)}
    _publish(sink, batches)
    sink.compact(upto=3)
    assert sink.rows_from("sessions", 2) == 4 * 6
    assert sink.invalidate_from(2) == [2, 3, 4, 5]  # 2, 3 compacted, 4, 5 directories
    batches = {0: "a", 1: "a"}
    for name in NAMES:
        assert _seen(root, name) == _expected(batches)
    _publish(sink, {2: "b", 3: "b"})
    sink.compact()
    _publish(sink, {1: "c"})  # a compacted batch published again replaces its rows
    batches.update({2: "b", 3: "b", 1: "c"})
    for name in NAMES:
        assert _seen(root, name) == _expected(batches)
    assert sink.published("sessions") == [0, 1, 2, 3]
    assert sink.invalidate_from(0) == [0, 1, 2, 3]  # as far back as before compacting
    assert _seen(root, "sessions") == Counter()
    assert not list(Path(root, "_compacted").rglob("*.parquet"))


@pytest.mark.parametrize("target_mb", [0.004])
def test_files_are_cut_at_the_target_size(tmp_path, target_mb):
    root = str(tmp_path / "out")
    sink = ParquetSink(root)
    batches = {b: "z" * 400 for b in range(20)}
    _publish(sink, batches)
    sink.compact(target_mb=target_mb)
    files = list(Path(root, "_compacted", "invalid_events").glob("*.parquet"))
    assert len(files) > 1
    assert _seen(root, "invalid_events") == _expected(batches)


def test_readers_read_the_compacted_layout_as_the_docs_show(tmp_path, spark):
    """docs/concepts/outputs.md, "Compacted outputs": pyarrow (committed_rows), DuckDB,
    Polars and Spark over `committed_files` read every row once, batch ids included."""
    import duckdb
    import polars as pl

    root = str(tmp_path / "out")
    sink = ParquetSink(root)
    batches = {b: "r" for b in range(4)}
    _publish(sink, batches)
    sink.compact(upto=1)  # batches 0, 1 compacted; 2, 3 in their directories
    want = _expected(batches)
    files = sink.committed_files("sessions")
    assert files["batches"] and files["compacted"]

    def rows(table) -> Counter:
        return Counter(
            zip(table["batch_id"].to_pylist(), table["session_id"].to_pylist(), strict=True)
        )

    assert _seen(root, "sessions") == want  # pyarrow
    sql = (
        f"SELECT * FROM read_parquet({files['batches']}, hive_partitioning=true) UNION ALL "
        f"BY NAME SELECT * FROM read_parquet({files['compacted']}, hive_partitioning=true)"
    )
    assert rows(duckdb.sql(sql).to_arrow_table()) == want
    scans = [pl.scan_parquet(files[k], hive_partitioning=True) for k in ("batches", "compacted")]
    assert rows(pl.concat(scans, how="diagonal_relaxed").collect().to_arrow()) == want
    plain = spark.read.option("basePath", f"{root}/_batches/sessions").parquet(*files["batches"])
    compacted = spark.read.option("basePath", f"{root}/_compacted/sessions").parquet(
        *files["compacted"]
    )
    both = plain.unionByName(compacted)
    assert dict(both.dtypes)["session_date"] == "date"
    assert rows(both.toArrow()) == want


def test_maintain_compacts_and_a_failed_compaction_in_a_stream_is_one_line(tmp_path):
    from sessionize.api.query import Compactor, check_compactable
    from sessionize.errors import ConfigError

    root = str(tmp_path / "out")
    sink = ParquetSink(root)
    batches = {b: "m" for b in range(3)}
    _publish(sink, batches)
    lines: list[str] = []
    report = maintain(root, compact=True, say=lines.append)
    assert report["compacted"]["sessions"]["batches"] == 3
    assert "sessions: compacted 3 batches, 12 files into 2" in lines, lines
    assert _seen(root, "sessions") == _expected(batches)
    # the stream's compactor: every 2nd batch; a compaction that fails is one line
    said: list[str] = []
    compactor = Compactor(sink, 2, say=said.append)
    _publish(sink, {3: "m"})
    compactor({"version": 2})
    assert said == [] and _batch_dirs(root, "sessions") == [3]
    blocker = Path(root, "_compacted", "sessions", "_manifest", "00000002.json")
    blocker.mkdir()  # the next generation's place is taken: this compaction fails
    compactor({"version": 3})
    blocker.rmdir()
    assert len(said) == 1 and said[0].startswith("compaction after batch 3 failed: "), said
    compactor({"version": 5})  # the next one finishes it
    assert said[1:] == ["compacted 1 batches: 9 files into 3"], said  # 2+4 and 1+2 files
    assert _seen(root, "sessions") == _expected({**batches, 3: "m"})
    refused = (("s3://b/out", "parquet", 2), (root, "delta", 2), (root, "parquet", 0))
    for output, fmt, every in refused:
        with pytest.raises(ConfigError) as err:
            check_compactable(output, fmt, every)
        assert "\n" not in str(err.value)


def test_a_compaction_rewrites_only_the_groups_its_batches_reach(tmp_path):
    root = str(tmp_path / "out")
    sink = ParquetSink(root)
    _publish(sink, {0: "g", 1: "g"})  # sessions on 2026-11-01 and 2026-11-02
    sink.compact()
    before = set(read_manifest(*sink._fs(), "sessions").files)
    sink.clear_staging(2)
    sink.write_part("sessions", 2, 0, sessions(["late-2"], first_user=5000))  # 11-01 only
    sink.publish(2)
    sink.compact()
    after = set(read_manifest(*sink._fs(), "sessions").files)
    assert {f.split("/")[0] for f in before - after} == {"session_date=2026-11-01"}
    assert {f.split("/")[0] for f in before & after} == {"session_date=2026-11-02"}
    seen = _seen(root, "sessions")
    assert seen == _expected({0: "g", 1: "g"}) + Counter({(2, "late-2"): 1})
