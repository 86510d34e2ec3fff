"""The report's aggregates on a small hand-written output tree whose answers are known."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from sessionize.report.data import integer_histogram, load_outputs
from sessionize.report.progress import read_progress
from sessionize.schema import INVALID_EVENTS, PAGE_VIEWS, SESSIONS

H = 3_600_000_000  # µs
T0 = 1_793_491_200_000_000  # 2026-11-01T00:00Z


def _write(root: Path, rel: str, table: pa.Table) -> None:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, path)


def _sessions(starts_h: list[float], pages: list[list[str]], reasons: list[str]) -> pa.Table:
    n = len(starts_h)
    start = [T0 + int(h * H) for h in starts_h]
    cols = {
        "session_id": [f"s{i}" for i in range(n)],
        "user_id": [i % 2 for i in range(n)],
        "start_time": start,
        "end_time": [s + 60_000_000 for s in start],
        "closed_at": [s + 660_000_000 for s in start],
        "duration_ms": [60_000] * n,
        "event_count": [len(p) for p in pages],
        "pages": pages,
        "end_reason": reasons,
    }
    schema = pa.schema([f for f in SESSIONS if f.name in cols])
    return pa.table(cols, schema=schema)


def test_outputs_are_aggregated_and_underscore_names_skipped(tmp_path):
    out = tmp_path / "out"
    s1 = _sessions(
        [0.1, 0.2, 2.5],
        [["a", "b", "c"], ["b"], ["a", "c"]],
        ["inactivity", "explicit", "inactivity"],
    )
    s2 = _sessions([2.9], [["c", "a"]], ["inactivity"])
    _write(out, "sessions/batch_id=1/session_date=2026-11-01/part-00000.parquet", s1)
    _write(out, "sessions/batch_id=2/session_date=2026-11-01/part-00000.parquet", s2)
    # Staged rows of an unpublished batch are not data.
    _write(out, "sessions/_staging/batch_id=3/session_date=2026-11-01/part-00000.parquet", s2)
    views = pa.table(
        {
            "session_id": ["s0"] * 3,
            "user_id": [0] * 3,
            "event_time": [T0 + 10, T0 + 20, T0 + 2 * H + 5],
            "page": ["a", "b", "c"],
            "position": [1, 2, 3],
            "time_on_page_ms": [0, 0, 0],
        },
        schema=PAGE_VIEWS,
    )
    _write(out, "page_views/batch_id=1/part-00000.parquet", views)
    invalid = pa.table(
        {
            "raw": ["x", "y", "z"],
            "reason": ["not a JSON object", "missing page", "missing page"],
            "source": ["f"] * 3,
        },
        schema=INVALID_EVENTS,
    )
    _write(out, "invalid_events/batch_id=2/part-00000.parquet", invalid)

    d = load_outputs(str(out))

    assert (d.sessions, d.users, d.page_views, d.late, d.invalid) == (4, 2, 3, 0, 3)
    assert d.batches == ["1", "2"]
    assert d.sessions_per_hour.counts.tolist() == [2, 0, 2]  # the empty hour 01 is a zero
    assert str(d.sessions_per_hour.hours[0]) == "2026-11-01T00"
    assert d.events_per_hour.counts.tolist() == [2, 0, 1]
    assert d.end_reasons.as_dict() == {"inactivity": 3, "explicit": 1}
    assert d.entry_pages.as_dict() == {"a": 2, "b": 1, "c": 1}
    assert d.exit_pages.as_dict() == {"a": 1, "b": 1, "c": 2}
    assert d.top_pages.as_dict() == {"a": 3, "c": 3, "b": 2}
    assert d.invalid_per_batch.as_dict() == {"2": 3}
    assert d.invalid_reasons.labels == ["missing page", "not a JSON object"]
    assert d.late_per_batch.labels == []


def test_integer_histogram_keeps_the_tail_in_its_last_bin():
    values = np.array([1] * 50 + [2] * 30 + [3] * 19 + [500])
    h = integer_histogram(values)
    assert h.counts.sum() == len(values)
    assert h.tail_from == 4.0 and h.counts[-1] == 1
    assert h.counts[:3].tolist() == [50, 30, 19]


def test_progress_log_skips_a_torn_line_and_a_missing_log_says_so(tmp_path):
    log = tmp_path / "progress.jsonl"
    rows = [
        {
            "version": 0,
            "watermark": None,
            "duration_s": 2.0,
            "committed_at": "2026-11-22T10:00:00Z",
            "batch": {"records": 100, "open_sessions": 5},
            "totals": {},
        },
        {
            "version": 1,
            "watermark": 5,
            "duration_s": 4.0,
            "committed_at": "2026-11-22T11:00:00+01:00",
            "batch": {"records": 1000, "open_sessions": 7, "state_bytes_read": 9},
            "totals": {},
        },
    ]
    log.write_text("".join(json.dumps(r) + "\n" for r in rows) + '{"version": 2, "bat')

    p = read_progress(str(log))

    assert p.missing is None and p.skipped_lines == 1
    assert p.version.tolist() == [0, 1]
    assert p.events_per_s.tolist() == [50.0, 250.0]
    assert p.committed_at.tolist()[1].isoformat() == "2026-11-22T10:00:00"  # in UTC
    assert np.isnan(p.state_bytes_read[0]) and p.state_bytes_read[1] == 9
    gone = read_progress(str(tmp_path / "none.jsonl"))
    assert gone.batches == 0 and "no progress log at" in gone.missing


def test_a_delta_output_is_read_at_its_current_version(tmp_path):
    """A replayed batch leaves the replaced files in the table's directory: the report counts
    the table's current version, not every Parquet file under it."""
    from sessionize.sinks.registry import open_sink
    from tests.sinks.rows import stage

    out = str(tmp_path / "out")
    sink = open_sink(out, "delta", job="j")
    for tag, n in (("old", 3), ("new", 2)):  # batch 0 published, then run again
        sink.clear_staging(0)
        stage(sink, 0, tag, n=n)
        sink.publish(0)
    assert len(list((tmp_path / "out" / "sessions").rglob("*.parquet"))) > 2

    d = load_outputs(out)

    assert (d.sessions, d.invalid, d.batches) == (4, 4, ["0"])  # 2 partitions x 2 rows


def test_bots_sessions_are_left_out_of_the_session_figures_and_counted(tmp_path):
    out = tmp_path / "out"
    s = _sessions([0.1, 0.2, 1.5, 2.5], [["a"], ["b", "c"], ["a"], ["c"]], ["inactivity"] * 4)
    s = s.append_column("is_bot", pa.array([False, True, True, None]))
    _write(out, "sessions/batch_id=1/session_date=2026-11-01/part-00000.parquet", s)
    data = load_outputs(str(out))
    assert (data.sessions, data.bots_left_out) == (2, 2)  # a missing flag is no bot
    assert sorted(data.entry_pages.labels) == ["a", "c"]
    assert int(data.sessions_per_hour.counts.sum()) == 2
    everyone = load_outputs(str(out), with_bots=True)
    assert (everyone.sessions, everyone.bots_left_out) == (4, 0)


def test_with_identity_users_are_counted_by_their_stitched_id(tmp_path):
    # Three visitors: one logged in as "ann" on two devices, two never logged in. A count
    # of `user_id` would say 1 (nulls are not counted); the visitors are 3.
    out = tmp_path / "out"
    n = 4
    start = [T0 + i * H for i in range(n)]
    sessions = pa.table(
        {
            "session_id": [f"s{i}" for i in range(n)],
            "anonymous_id": ["d1", "d2", "d3", "d4"],
            "user_id": ["ann", "ann", None, None],
            "stitched_user_id": ["ann", "ann", "d3", "d4"],
            "start_time": pa.array(start, pa.timestamp("us", "UTC")),
            "end_time": pa.array([s + 60_000_000 for s in start], pa.timestamp("us", "UTC")),
            "duration_ms": [60_000] * n,
            "event_count": [1] * n,
            "pages": [["a"]] * n,
            "end_reason": ["inactivity"] * n,
        }
    )
    _write(out, "sessions/batch_id=1/session_date=2026-11-01/part-00000.parquet", sessions)
    data = load_outputs(str(out))
    assert (data.sessions, data.users) == (4, 3)
