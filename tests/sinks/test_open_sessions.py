"""`--open-sessions`: the `open_sessions` output replaced by user each batch.

The dashboard test streams three batches into PostgreSQL while another connection polls
`open_sessions` and `sessions`: no session is ever in both, and at each committed batch the
count of open sessions equals a plain loop's count over the events fed so far.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import threading
from datetime import UTC, datetime, timedelta

import psycopg
import pytest

from sessionize.config import SessionRules
from sessionize.errors import ConfigError

T0 = datetime(2026, 11, 1, 10, tzinfo=UTC)
GAP = timedelta(minutes=10)
LATENESS = timedelta(minutes=2)
FILES, MINUTES_PER_FILE, USERS = 3, 20, 40


def _write_events(folder) -> list[list[dict]]:
    """FILES files of events, file k covering minutes [20k, 20k + 20) after T0, written in
    order (their modification times order the stream's batches: one file per batch)."""
    rng = random.Random(5)
    files = []
    hour = folder / "event_date=2026-11-01" / "event_hour=10"
    hour.mkdir(parents=True)
    for k in range(FILES):
        events = []
        for _ in range(60):
            t = T0 + timedelta(
                minutes=MINUTES_PER_FILE * k, seconds=rng.randrange(MINUTES_PER_FILE * 60)
            )
            events.append(
                {
                    "user_id": rng.randrange(1, USERS + 1),
                    "action": "view",
                    "event_time": t.isoformat(),
                    "page": {"current": rng.choice("abc")},
                }
            )
        path = hour / f"part-{k:05d}.json"
        path.write_text("".join(json.dumps(e) + "\n" for e in events))
        os.utime(path, (1_800_000_000 + k, 1_800_000_000 + k))
        files.append(events)
    return files


def _open_count(files: list[list[dict]], batch: int, lateness: timedelta = LATENESS) -> int:
    """Reference: the sessions open after `batch`, by a plain loop over the events of files
    0..batch (a new session after a pause longer than the gap; emitted once the watermark,
    the latest event time minus the lateness, is past its last event plus the gap)."""
    times: dict[int, set[datetime]] = {}
    watermark = None
    for events in files[: batch + 1]:
        for e in events:
            t = datetime.fromisoformat(e["event_time"])
            if watermark is not None and t < watermark:
                continue  # late
            times.setdefault(e["user_id"], set()).add(t)
        latest = max(t for ts in times.values() for t in ts)
        watermark = latest - lateness
    open_sessions = 0
    for ts in times.values():
        ordered = sorted(ts)
        ends = [a for a, b in zip(ordered, ordered[1:], strict=False) if b - a > GAP]
        ends.append(ordered[-1])
        open_sessions += sum(1 for end in ends if not end + GAP < watermark)
    return open_sessions


def test_dashboard_never_sees_a_session_twice_and_counts_the_open_ones(spark, pg_output, tmp_path):
    from sessionize.commands.stream import StreamOptions, run_stream

    files = _write_events(tmp_path / "in")
    schema = pg_output.split("schema=", 1)[1]
    plain = pg_output.split("?")[0]
    seen: list[tuple[int, int, int]] = []  # (batch, open sessions, sessions in both)
    done = threading.Event()
    query = f"""
        SELECT (SELECT max(batch_id) FROM "{schema}"._sessionize_batches),
               (SELECT count(*) FROM "{schema}".open_sessions),
               (SELECT count(*) FROM "{schema}".open_sessions o
                  JOIN "{schema}".sessions s USING (session_id))"""

    def poll() -> None:
        with psycopg.connect(plain, autocommit=True) as conn:
            while not done.is_set():
                # One statement, one snapshot; no table before the first batch made it.
                with contextlib.suppress(psycopg.errors.UndefinedTable):
                    seen.append(conn.execute(query).fetchone())
                done.wait(0.05)

    poller = threading.Thread(target=poll)
    poller.start()
    try:
        opts = StreamOptions(
            input=str(tmp_path / "in"),
            output=pg_output,
            checkpoint=str(tmp_path / "chk"),
            partitions=2,
            max_files_per_trigger=1,
            open_sessions=True,
            rules=SessionRules(
                gap_us=int(GAP.total_seconds() * 1e6),
                lateness_us=int(LATENESS.total_seconds() * 1e6),
            ),
        )
        run_stream(opts, spark, on_batch=lambda _: None)
    finally:
        done.set()
        poller.join()
    with psycopg.connect(plain, autocommit=True) as conn:
        seen.append(conn.execute(query).fetchone())
    committed = [s for s in seen if s[0] is not None]
    assert {s[0] for s in committed} >= {FILES - 1}
    assert all(both == 0 for _, _, both in committed), committed
    for batch, count, _ in committed:
        assert count == _open_count(files, batch), (batch, count)
    final = committed[-1]
    assert 0 < final[1] < sum(len(f) for f in files)
    emitted = conn_count(plain, schema, "sessions")
    assert emitted > 0  # some sessions closed and moved over


def conn_count(plain: str, schema: str, table: str) -> int:
    with psycopg.connect(plain, autocommit=True) as conn:
        return conn.execute(f'SELECT count(*) FROM "{schema}".{table}').fetchone()[0]


@pytest.mark.parametrize(
    ("output", "fmt", "state", "says"),
    [
        ("out/", "parquet", "files", "--output-format delta"),
        ("out/", "delta", "spark-rocksdb", "--state files"),
    ],
)
def test_refused_where_rows_cannot_be_replaced_by_user(output, fmt, state, says):
    from sessionize.engines.choice import engine_for
    from sessionize.sinks.registry import check_open_sessions

    with pytest.raises(ConfigError, match="--open-sessions") as e:
        engine_for(state).check_replaced_by_key()  # as Sessionizer.start asks, first
        check_open_sessions(True, output, fmt)
    assert says in str(e.value) and "\n" not in str(e.value)


def test_a_rewind_rebuilds_open_sessions_from_the_restored_state(spark, tmp_path):
    """Delta: rewound to batch 1, `open_sessions` is emptied with batch 2; the rerun of
    batch 2 hands every user of the restored state to the logic, so sessions open since
    batch 1 that batch 2 does not touch are back: the end state equals the first run's and
    counts what the reference counts, with no session both open and emitted."""
    from sessionize.commands.rewind import rewind
    from sessionize.commands.stream import StreamOptions, run_stream
    from tests.sinks.conftest import read_rows

    files = _write_events(tmp_path / "in")
    out, lateness = str(tmp_path / "out"), timedelta(minutes=30)  # sessions stay open longer
    opts = StreamOptions(
        input=str(tmp_path / "in"),
        output=out,
        checkpoint=str(tmp_path / "chk"),
        partitions=2,
        max_files_per_trigger=1,
        open_sessions=True,
        output_format="delta",
        rules=SessionRules(
            gap_us=int(GAP.total_seconds() * 1e6), lateness_us=int(lateness.total_seconds() * 1e6)
        ),
    )

    def seen() -> tuple[list[tuple[str, int]], list[str]]:
        opened = read_rows("delta", out, "open_sessions")
        emitted = read_rows("delta", out, "sessions")
        pairs = (
            zip(opened["session_id"].to_pylist(), opened["updated_batch"].to_pylist(), strict=True)
            if opened.num_rows
            else []
        )
        return sorted(pairs), sorted(emitted["session_id"].to_pylist()) if emitted.num_rows else []

    run_stream(opts, spark, on_batch=lambda _: None)
    opened, emitted = seen()
    assert len(opened) == _open_count(files, FILES - 1, lateness) and emitted
    untouched = [s for s, b in opened if b < FILES - 1]
    assert untouched  # open since an earlier batch, which the last batch does not touch
    rewind(str(tmp_path / "chk"), FILES - 2, say=lambda _: None)
    assert seen()[0] == []
    run_stream(opts, spark, on_batch=lambda _: None)
    again, emitted_again = seen()
    assert [s for s, _ in again] == [s for s, _ in opened] and emitted_again == emitted
    assert not {s for s, _ in again} & set(emitted_again)
