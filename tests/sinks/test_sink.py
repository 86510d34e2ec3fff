"""Batches become visible atomically and a re-executed batch replaces its rows
(docs/design.md, "Outputs")."""

from __future__ import annotations

import datetime as dt

import pyarrow as pa
import pyarrow.dataset as ds

from sessionize.schema import INVALID_EVENTS, SESSIONS
from sessionize.sinks.parquet import ParquetSink


def _invalid(n: int, tag: str) -> pa.Table:
    return pa.table(
        {"raw": [f"{tag}{i}" for i in range(n)], "reason": ["x"] * n, "source": ["s"] * n},
        schema=INVALID_EVENTS,
    )


def _read(path) -> pa.Table:
    return ds.dataset(path, format="parquet", partitioning="hive").to_table()


def test_staged_rows_are_invisible_until_published(tmp_path):
    sink = ParquetSink(str(tmp_path))
    sink.write_part("invalid_events", 0, 0, _invalid(3, "a"))
    (tmp_path / "invalid_events").mkdir(exist_ok=True)
    assert _read(tmp_path / "invalid_events").num_rows == 0
    sink.publish(0)
    got = _read(tmp_path / "invalid_events")
    assert sorted(got["raw"].to_pylist()) == ["a0", "a1", "a2"]
    assert set(got["batch_id"].to_pylist()) == {0}


def test_republished_batch_replaces_never_duplicates(tmp_path):
    sink = ParquetSink(str(tmp_path))
    sink.write_part("invalid_events", 5, 0, _invalid(3, "old"))
    sink.write_part("invalid_events", 5, 1, _invalid(2, "old1-"))
    sink.publish(5)
    sink.clear_staging(5)
    sink.write_part("invalid_events", 5, 0, _invalid(1, "new"))
    sink.publish(5)
    assert _read(tmp_path / "invalid_events")["raw"].to_pylist() == ["new0"]


def test_republishing_an_emptied_batch_removes_its_old_rows(tmp_path):
    sink = ParquetSink(str(tmp_path))
    sink.write_part("invalid_events", 1, 0, _invalid(2, "a"))
    sink.publish(1)
    sink.clear_staging(1)  # a rerun of the batch that stages nothing
    sink.publish(1)
    assert sink.published("invalid_events") == []


def test_sessions_are_partitioned_by_session_date_under_the_batch(tmp_path, spark):
    t = dt.datetime(2026, 11, 1, 23, 59, tzinfo=dt.UTC)
    t2 = t + dt.timedelta(minutes=2)
    rows = {
        "session_id": ["1-a", "2-b"], "user_id": [1, 2],
        "start_time": [t, t2], "end_time": [t, t2],
        "closed_at": [t, t], "duration_ms": [0, 0], "event_count": [1, 1],
        "pages": [["home"], ["a"]], "end_reason": ["explicit", "explicit"],
        "site": [None, None], "api_version": [None, None], "browser": [None, None],
        "language": [None, None], "device_type": [None, None],
        "session_date": [dt.date(2026, 11, 1), dt.date(2026, 11, 2)],
    }  # fmt: skip
    sink = ParquetSink(str(tmp_path))
    sink.write_part("sessions", 3, 0, pa.table(rows, schema=SESSIONS))
    sink.publish(3)
    dirs = sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*.parquet"))
    assert dirs == [
        "sessions/batch_id=3/session_date=2026-11-01/part-00000.parquet",
        "sessions/batch_id=3/session_date=2026-11-02/part-00000.parquet",
    ]
    df = spark.read.parquet(str(tmp_path / "sessions"))
    got = sorted((r.user_id, str(r.session_date), r.batch_id) for r in df.collect())
    assert got == [(1, "2026-11-01", 3), (2, "2026-11-02", 3)]


def test_invalidate_from_retires_later_batches(tmp_path):
    sink = ParquetSink(str(tmp_path))
    for b in range(4):
        sink.write_part("invalid_events", b, 0, _invalid(1, f"b{b}-"))
        sink.publish(b)
    assert sink.invalidate_from(2) == [2, 3]
    assert sorted(_read(tmp_path / "invalid_events")["raw"].to_pylist()) == ["b0-0", "b1-0"]
