"""The Arrow schemas every event mapping starts from: events, state, the outputs.

They depend on nothing a user sets; `schema.Layout` shapes them to one mapping (the user id's
type, the kept attributes). Below the mapping so that the mapping can refuse a kept name
that is already a column (`RESERVED_COLUMNS`). Timestamps are microseconds in UTC everywhere,
as in Spark.
"""

from __future__ import annotations

import pyarrow as pa

TS = pa.timestamp("us", tz="UTC")
# Columns of several schemas below, each declared once.
_SESSION_ID = pa.field("session_id", pa.string(), nullable=False)
_USER_ID = pa.field("user_id", pa.int64(), nullable=False)
_EVENT_TIME = pa.field("event_time", TS, nullable=False)
_PAGE = pa.field("page", pa.string(), nullable=False)
_ACTION = pa.field("action", pa.string(), nullable=False)
# The first columns of a row of an emitted session's page view or event.
_SESSION_EVENT = [_SESSION_ID, _USER_ID, _EVENT_TIME, _PAGE]
# The attributes an event keeps by default (the mapping's `keep`), and its sessions with it.
_ATTRIBUTES = [
    pa.field(n, pa.string()) for n in ("site", "api_version", "browser", "language", "device_type")
]


def _from(schema: pa.Schema, *names: str) -> list[pa.Field]:
    """The fields `names` of `schema`, as it declares them."""
    return [schema.field(n) for n in names]


# A parsed, valid event: what the session logic consumes.
EVENT = pa.schema(
    [
        _USER_ID,
        _EVENT_TIME,
        _PAGE,
        _ACTION,
        *_ATTRIBUTES,
    ]
)
EVENT_KEY = ("user_id", "event_time", "page")

# State rows: the events of a user's open sessions, plus the user's expiry time
# (the earliest `closed_at` among its open sessions), equal on all rows of a user.
STATE = EVENT.append(pa.field("expires_at", TS, nullable=False))
STATE_KEY = "user_id"
STATE_EXPIRY = "expires_at"
OPEN_SESSIONS = "open_sessions"  # the output replaced by user_id each batch (--open-sessions)
UPDATED_BATCH = "updated_batch"

SESSIONS = pa.schema(
    [
        _SESSION_ID,
        _USER_ID,
        pa.field("start_time", TS, nullable=False),
        pa.field("end_time", TS, nullable=False),
        pa.field("closed_at", TS, nullable=False),
        pa.field("duration_ms", pa.int64(), nullable=False),
        pa.field("event_count", pa.int64(), nullable=False),
        pa.field("pages", pa.list_(pa.string()), nullable=False),
        pa.field("end_reason", pa.string(), nullable=False),
        *_ATTRIBUTES,
        # Partition column: UTC date of start_time.
        pa.field("session_date", pa.date32(), nullable=False),
    ]
)

PAGE_VIEWS = pa.schema(
    [
        *_SESSION_EVENT,
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


# The session columns read from its first event's URL query (UTM parameters, Google's click id).
QUERY_COLUMNS = ("utm_source", "utm_medium", "utm_campaign", "utm_term", "utm_content", "gclid")
# The session columns of its engagement and conversions.
_ENGAGEMENT = (
    "page_view_count",
    "engaged_time_ms",
    "engaged",
    "bounce",
    "event_counts",
    "converted",
)

# What a session carries from its events (schema 2, docs/concepts/sessions.md), before
# each conversion's columns and `is_bot`.
CONTENT = pa.schema(
    [
        pa.field("landing_page", pa.string(), nullable=False),
        pa.field("exit_page", pa.string(), nullable=False),
        pa.field("utm_source", pa.string()),
        pa.field("utm_medium", pa.string()),
        pa.field("utm_campaign", pa.string()),
        pa.field("utm_term", pa.string()),
        pa.field("utm_content", pa.string()),
        pa.field("gclid", pa.string()),
        pa.field("referrer_host", pa.string()),
        pa.field("channel", pa.string(), nullable=False),
        pa.field("page_view_count", pa.int64(), nullable=False),
        pa.field("engaged_time_ms", pa.int64(), nullable=False),
        pa.field("engaged", pa.bool_(), nullable=False),
        pa.field("bounce", pa.bool_(), nullable=False),
        pa.field("event_counts", pa.map_(pa.string(), pa.int64()), nullable=False),
        pa.field("converted", pa.bool_(), nullable=False),
    ]
)


# Schema 3 (docs/concepts/sessions.md, "What a session carries"): GA4's channel group, the
# click id, the session a split one continues, engaged time per page view, user agents.
CONTENT_3 = pa.schema(
    [
        pa.field("landing_page", pa.string()),  # the first page view's (none: null)
        pa.field("exit_page", pa.string()),
        *_from(CONTENT, *QUERY_COLUMNS),
        pa.field("click_id_type", pa.string()),
        pa.field("click_id", pa.string()),
        CONTENT.field("referrer_host"),
        CONTENT.field("channel"),
        pa.field("continues_session_id", pa.string()),
        *_from(CONTENT, *_ENGAGEMENT),
        pa.field("browser_family", pa.string()),
        pa.field("browser_version", pa.string()),
        pa.field("os_family", pa.string()),
        pa.field("device_category", pa.string(), nullable=False),
    ]
)
# Schema 3's `page_views`: a row per page view (an event of `--page-view-actions`).
PAGE_VIEWS_3 = pa.schema(
    [
        _SESSION_ID,
        _USER_ID,
        pa.field("page_view_id", pa.string(), nullable=False),  # SESSION_ID:POSITION
        _EVENT_TIME,
        _PAGE,
        pa.field("position", pa.int32(), nullable=False),  # 1 = the session's first page view
        pa.field("time_on_page_ms", pa.int64()),
        pa.field("engaged_time_ms", pa.int64(), nullable=False),
    ]
)
# Schema 3's `events`: every event of an emitted session, whatever its action.
EVENTS = pa.schema(
    [
        *_SESSION_EVENT,
        _ACTION,
        pa.field("position", pa.int32(), nullable=False),  # 1 = the session's first event
        pa.field("page_view_id", pa.string()),  # the page view it falls in (none before one)
    ]
)
OUTPUTS["events"] = EVENTS  # every session output's name; a job's own: Layout.outputs

# The state column of schema 3 that marks a row standing for an emitted session that a
# later one may continue (logic/continuation.py): that session's id; null on events.
CARRIED_SESSION = "carried_session"

# Revisions (`--revise-within`, docs/design.md "Revisions"): the outputs of a batch's
# revised and retracted sessions and their page views, their added columns, and the state
# columns that mark a kept event of an emitted session with the id and revision it was
# last written under (null on the events of open sessions).
SESSION_REVISIONS = "session_revisions"
PAGE_VIEW_REVISIONS = "page_view_revisions"
REVISION = "revision"
RETRACTED = "retracted"
EMITTED_SESSION = "emitted_session"
EMITTED_REVISION = "emitted_revision"
# With identity, also the user id the session was last written with (null: none known).
EMITTED_USER = "emitted_user_id"
# With identity, what the first step hands the users step (logic/users_revised.py): every
# session it wrote or retracted (`session_revisions`' columns, a first write's revision 0)
# with its release, and a `moved` retraction under the stitched user a revised session
# left.
SESSION_CHANGES = "session_changes"
MOVED = "moved"
RELEASE_AT = "release_at"

# The columns every event has before its kept attributes; the attributes follow, named as
# the mapping's `keep` names them (the default: the five above).
CORE = 4
STATE_USER_KEY = "user_key"

# The event columns that carry the values of `--split-on-change` and `--gap-field`.
CHANGE_COLUMN = "change_value"
GAP_COLUMN = "gap_us"
# The event columns of the mapped page URL, referrer and user agent (`EventMapping.url`, ...).
MAPPED_COLUMNS = ("url", "referrer", "user_agent")
# Identity (`--anonymous-field`; docs/design.md, "Identity"): the event column of the user
# id an event was sent with (null: none), the state columns of an anonymous id's identity
# row (a non-null `identity_first_seen` marks it), the columns outputs name the anonymous id
# and the stitched user by, and the `identities` output (replaced by `anonymous_id`).
SENT_USER = "sent_user_id"
IDENTITY_FIRST_SEEN = "identity_first_seen"
IDENTITY_USER_TIME = "identity_user_time"
ANONYMOUS_ID = "anonymous_id"
STITCHED_USER_ID = "stitched_user_id"
IDENTITIES = pa.schema(
    [
        pa.field(ANONYMOUS_ID, pa.string(), nullable=False),
        pa.field("user_id", pa.string()),
        pa.field("first_seen", TS, nullable=False),
        pa.field("last_seen", TS, nullable=False),
    ]
)
# Per stitched user (the session processor's follow-on, logic/users.py): the columns it
# adds to `sessions` (attribution where the sessions carry their traffic) and its `users`
# output, a row per stitched user (the traffic columns with traffic).
USERS_OUTPUT = "users"
SESSION_NUMBERING = [
    pa.field("session_number", pa.int64(), nullable=False),
    pa.field("is_new_user", pa.bool_(), nullable=False),
]
ATTRIBUTED = [
    pa.field(f"attributed_{n}", pa.string()) for n in ("channel", "source", "medium", "campaign")
]
USERS = pa.schema(
    [
        pa.field(STITCHED_USER_ID, pa.string(), nullable=False),
        pa.field("first_session_start", TS, nullable=False),
        pa.field("last_session_start", TS, nullable=False),
        pa.field("sessions", pa.int64(), nullable=False),
        pa.field("events", pa.int64(), nullable=False),
    ]
)
USERS_TRAFFIC = [
    pa.field("page_views", pa.int64(), nullable=False),
    pa.field("engaged_sessions", pa.int64(), nullable=False),
    pa.field("first_channel", pa.string()),
    pa.field("first_landing_page", pa.string()),
    pa.field("last_channel", pa.string()),
]
# What a session must carry for the traffic columns (`--content`).
SESSION_TRAFFIC = ("channel", "utm_source", "utm_medium", "utm_campaign", "referrer_host")
IDENTITY_COLUMNS = (
    SENT_USER,
    IDENTITY_FIRST_SEEN,
    IDENTITY_USER_TIME,
    ANONYMOUS_ID,
    STITCHED_USER_ID,
)
# The last column of schema 2's and 3's sessions, after each conversion's.
IS_BOT = "is_bot"
# Columns added on the way out: every output's `batch_id`, the PostgreSQL staging tables'
# `part`, the row kind of the Spark processor's one wide output (`engines/spark_processor`).
ADDED_COLUMNS = ("batch_id", "part", "kind")


def _reserved() -> frozenset[str]:
    schemas = (
        STATE,
        SESSIONS,
        PAGE_VIEWS,
        PAGE_VIEWS_3,
        EVENTS,
        LATE_EVENTS,
        INVALID_EVENTS,
        CONTENT,
        CONTENT_3,
    )
    names = {n for s in schemas for n in s.names}
    names |= {UPDATED_BATCH, CARRIED_SESSION, STATE_USER_KEY, CHANGE_COLUMN, GAP_COLUMN, IS_BOT}
    names |= {*MAPPED_COLUMNS, *ADDED_COLUMNS}
    names |= {f.name for f in (*SESSION_NUMBERING, *ATTRIBUTED)}
    # The kept attributes' columns are the mapping's to name.
    return frozenset(names - set(EVENT.names[CORE:]))


# Columns every event or output already has: a kept attribute cannot take these names.
RESERVED_COLUMNS = _reserved()
# With `--anonymous-field` these too (and without it a kept attribute may take them).
IDENTITY_RESERVED = frozenset({*IDENTITY_COLUMNS, *IDENTITIES.names}) - RESERVED_COLUMNS
