"""Arrow schemas of events, state and the four outputs (docs/design.md, "Events" and "Outputs").

Timestamps are microseconds in UTC everywhere, as in Spark. Partition columns
(`batch_id`, `session_date`) live in directory names, not in the Parquet files.
"""

from __future__ import annotations

import pyarrow as pa

TS = pa.timestamp("us", tz="UTC")

# A parsed, valid event: what the session logic consumes.
EVENT = pa.schema(
    [
        pa.field("user_id", pa.int64(), nullable=False),
        pa.field("event_time", TS, nullable=False),
        pa.field("page", pa.string(), nullable=False),
        pa.field("action", pa.string(), nullable=False),
        pa.field("site", pa.string()),
        pa.field("api_version", pa.string()),
        pa.field("browser", pa.string()),
        pa.field("language", pa.string()),
        pa.field("device_type", pa.string()),
    ]
)
EVENT_KEY = ("user_id", "event_time", "page")

# State rows: the events of a user's open sessions, plus the user's expiry time
# (the earliest `closed_at` among its open sessions), equal on all rows of a user.
STATE = EVENT.append(pa.field("expires_at", TS, nullable=False))
STATE_KEY = "user_id"
STATE_EXPIRY = "expires_at"

SESSIONS = pa.schema(
    [
        pa.field("session_id", pa.string(), nullable=False),
        pa.field("user_id", pa.int64(), nullable=False),
        pa.field("start_time", TS, nullable=False),
        pa.field("end_time", TS, nullable=False),
        pa.field("closed_at", TS, nullable=False),
        pa.field("duration_ms", pa.int64(), nullable=False),
        pa.field("event_count", pa.int64(), nullable=False),
        pa.field("pages", pa.list_(pa.string()), nullable=False),
        pa.field("end_reason", pa.string(), nullable=False),
        pa.field("site", pa.string()),
        pa.field("api_version", pa.string()),
        pa.field("browser", pa.string()),
        pa.field("language", pa.string()),
        pa.field("device_type", pa.string()),
        # Partition column: UTC date of start_time.
        pa.field("session_date", pa.date32(), nullable=False),
    ]
)

PAGE_VIEWS = pa.schema(
    [
        pa.field("session_id", pa.string(), nullable=False),
        pa.field("user_id", pa.int64(), nullable=False),
        pa.field("event_time", TS, nullable=False),
        pa.field("page", pa.string(), nullable=False),
        pa.field("position", pa.int32(), nullable=False),  # 1 = first page of the session
        pa.field("time_on_page_ms", pa.int64(), nullable=False),
    ]
)

LATE_EVENTS = EVENT.append(pa.field("watermark", TS, nullable=False))

# `raw` is the line as read. Bytes that are not UTF-8 are escaped as Python's
# `backslashreplace` does (0xff -> the text `\xff`) rather than kept in a binary column, so
# that `raw` stays a valid string column every Parquet reader can read and print.
INVALID_EVENTS = pa.schema(
    [
        pa.field("raw", pa.string()),
        pa.field("reason", pa.string(), nullable=False),
        pa.field("source", pa.string()),  # file path, or topic/partition/offset
    ]
)

OUTPUTS: dict[str, pa.Schema] = {
    "sessions": SESSIONS,
    "page_views": PAGE_VIEWS,
    "late_events": LATE_EVENTS,
    "invalid_events": INVALID_EVENTS,
}
# Partition columns of each output below its batch directory.
OUTPUT_PARTITIONS: dict[str, tuple[str, ...]] = {"sessions": ("session_date",)}
