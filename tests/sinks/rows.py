"""Small output tables for sink tests; each row's tag says which attempt wrote it."""

from __future__ import annotations

import datetime as dt

import pyarrow as pa

from sessionize.schema import INVALID_EVENTS, SESSIONS

T0 = dt.datetime(2026, 11, 1, 23, 58, tzinfo=dt.UTC)


def invalid(tags: list[str]) -> pa.Table:
    n = len(tags)
    return pa.table({"raw": tags, "reason": ["x"] * n, "source": ["s"] * n}, schema=INVALID_EVENTS)


def sessions(tags: list[str], first_user: int = 0) -> pa.Table:
    """One session per tag, alternating between two session dates (two partitions)."""
    n = len(tags)
    starts = [T0 + dt.timedelta(minutes=3 * (i % 2)) for i in range(n)]
    return pa.table(
        {
            "session_id": tags,
            "user_id": list(range(first_user, first_user + n)),
            "start_time": starts,
            "end_time": starts,
            "closed_at": starts,
            "duration_ms": [0] * n,
            "event_count": [1] * n,
            "pages": [["home"]] * n,
            "end_reason": ["explicit"] * n,
            "site": [None] * n,
            "api_version": [None] * n,
            "browser": [None] * n,
            "language": [None] * n,
            "device_type": [None] * n,
            "session_date": [s.date() for s in starts],
        },
        schema=SESSIONS,
    )


def stage(sink, batch_id: int, tag: str, n: int = 3) -> None:
    """What a batch's tasks do: two partitions stage rows of two outputs."""
    for part in (0, 1):
        tags = [f"{tag}-{batch_id}-{part}-{i}" for i in range(n)]
        sink.write_part("invalid_events", batch_id, part, invalid(tags))
        sink.write_part("sessions", batch_id, part, sessions(tags, first_user=100 * part))
