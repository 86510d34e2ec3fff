"""A small hand-made state with known open sessions, for the state tools' tests.

Job `shop`, 2 partitions, gap 10m, close action browser_close, versions 6 and 7 committed
(version 7 is the one the tools read). At version 7:

- partition 0: user 1: view a 10:00, view b 10:05 (session 1: closes 10:15) and view c 10:30
  (session 2: closes 10:40); expires 10:15.
- partition 1: user 2: view x 11:00, browser_close y 11:02 (one explicit session, closed at
  11:02); user 3: view z 09:50 (one session, closes 10:00, the oldest).

Totals: 3 open users, 4 open sessions, 6 rows, oldest open session 2026-11-01T09:50:00Z.

The settings are the job's settings entry, or with `settings_in_records` part of each job
record instead (a store without the entry, which the tools read just as well).
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pyarrow as pa

from sessionize.schema import STATE
from sessionize.state import StateBackend

JOB = "shop"
VERSION = 7
SETTINGS = {"gap": "10m", "lateness": "10m", "close_actions": "browser_close", "partitions": 2}


def t(hhmm: str) -> datetime:
    h, m = hhmm.split(":")
    return datetime(2026, 11, 1, int(h), int(m), tzinfo=UTC)


def rows(events: list[tuple[int, str, str, str, str]]) -> pa.Table:
    """(user, time, page, action, expires) -> STATE rows (site etc. set to fixed values)."""
    cols = {name: [] for name in STATE.names}
    for user, time, page, action, expires in events:
        for name, value in (
            ("user_id", user),
            ("event_time", t(time)),
            ("page", page),
            ("action", action),
            ("site", "shop.example"),
            ("api_version", "v3"),
            ("browser", None),
            ("language", "en"),
            ("device_type", "phone"),
            ("expires_at", t(expires)),
        ):
            cols[name].append(value)
    return pa.table(cols, schema=STATE)


PARTITION_ROWS = {
    0: rows(
        [
            (1, "10:00", "a", "view", "10:15"),
            (1, "10:05", "b", "view", "10:15"),
            (1, "10:30", "c", "view", "10:15"),
        ]
    ),
    1: rows(
        [
            (2, "11:00", "x", "view", "11:02"),
            (2, "11:02", "y", "browser_close", "11:02"),
            (3, "09:50", "z", "view", "10:00"),
        ]
    ),
}
META = {0: {"open_sessions": 2, "open_users": 1}, 1: {"open_sessions": 2, "open_users": 2}}


def build(backend: StateBackend, *, settings_in_records: bool = False) -> None:
    """Versions 6 (user 4 only, removed again at 7) and 7 of every partition, both job
    records and the settings."""
    for p in (0, 1):
        with backend.open(JOB, p, -1) as tx:
            tx.put_many(rows([(4, "08:00", "old", "view", "08:10")]))
            tx.commit(6, {"open_sessions": 1, "open_users": 1})
        with backend.open(JOB, p, 6) as tx:
            tx.remove_many([4])
            tx.put_many(PARTITION_ROWS[p])
            tx.commit(VERSION, META[p])
    with_settings = {"settings": SETTINGS} if settings_in_records else {}
    if not settings_in_records:
        backend.write_job_settings(JOB, SETTINGS)
    for v in (6, VERSION):
        backend.write_job_record(JOB, v, {"version": v, "watermark": 1, **with_settings})


def checkpoint(root: Path, state: str) -> Path:
    """A stopped stream's checkpoint over the state: its settings and Spark's commit log
    up to batch 7."""
    chk = root / "chk"
    (chk / "commits").mkdir(parents=True)
    for v in range(VERSION + 1):
        (chk / "commits" / str(v)).write_text('v1\n{"nextBatchWatermarkMs":0}\n')
    settings = {**SETTINGS, "state": state, "job": JOB, "output_format": "parquet"}
    (chk / "sessionize.json").write_text(json.dumps(settings, indent=2, sort_keys=True))
    return chk
