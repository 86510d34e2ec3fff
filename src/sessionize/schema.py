"""Arrow schemas of events, state and the four outputs (docs/design.md, "Events" and "Outputs").

Timestamps are microseconds in UTC everywhere, as in Spark. Partition columns
(`batch_id`, `session_date`) live in directory names, not in the Parquet files.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import pyarrow as pa

from sessionize.content import SessionContent
from sessionize.mapping import CHANGE_COLUMN, GAP_COLUMN, EventMapping

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
OPEN_SESSIONS = "open_sessions"  # the output replaced by user_id each batch (--open-sessions)
UPDATED_BATCH = "updated_batch"

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
        *(CONTENT.field(n) for n in ("utm_source", "utm_medium", "utm_campaign", "utm_term",
                                     "utm_content", "gclid")),  # fmt: skip
        pa.field("click_id_type", pa.string()),
        pa.field("click_id", pa.string()),
        CONTENT.field("referrer_host"),
        CONTENT.field("channel"),
        pa.field("continues_session_id", pa.string()),
        *(CONTENT.field(n) for n in ("page_view_count", "engaged_time_ms", "engaged", "bounce",
                                     "event_counts", "converted")),  # fmt: skip
        pa.field("browser_family", pa.string()),
        pa.field("browser_version", pa.string()),
        pa.field("os_family", pa.string()),
        pa.field("device_category", pa.string(), nullable=False),
    ]
)
# Schema 3's `page_views`: a row per page view (an event of `--page-view-actions`).
PAGE_VIEWS_3 = pa.schema(
    [
        pa.field("session_id", pa.string(), nullable=False),
        pa.field("user_id", pa.int64(), nullable=False),
        pa.field("page_view_id", pa.string(), nullable=False),  # SESSION_ID:POSITION
        pa.field("event_time", TS, nullable=False),
        pa.field("page", pa.string(), nullable=False),
        pa.field("position", pa.int32(), nullable=False),  # 1 = the session's first page view
        pa.field("time_on_page_ms", pa.int64()),
        pa.field("engaged_time_ms", pa.int64(), nullable=False),
    ]
)
# Schema 3's `events`: every event of an emitted session, whatever its action.
EVENTS = pa.schema(
    [
        pa.field("session_id", pa.string(), nullable=False),
        pa.field("user_id", pa.int64(), nullable=False),
        pa.field("event_time", TS, nullable=False),
        pa.field("page", pa.string(), nullable=False),
        pa.field("action", pa.string(), nullable=False),
        pa.field("position", pa.int32(), nullable=False),  # 1 = the session's first event
        pa.field("page_view_id", pa.string()),  # the page view it falls in (none before one)
    ]
)
OUTPUTS["events"] = EVENTS  # every session output's name; a job's own: Layout.outputs

# The state column of schema 3 that marks a row standing for an emitted session that a
# later one may continue (logic/continuation.py): that session's id; null on events.
CARRIED_SESSION = "carried_session"


def content_fields(content: SessionContent, version: int = 2) -> list[pa.Field]:
    """The session columns of schema `version` (2 or 3) after the kept attributes."""
    per_conversion = [
        f
        for c in content.conversions
        for f in (
            pa.field(c.name + "_count", pa.int64(), nullable=False),
            pa.field(c.name + "_value", pa.float64()),
            pa.field(c.name + "_first_at", TS),
        )
    ]
    base = CONTENT_3 if version >= 3 else CONTENT
    return [*base, *per_conversion, pa.field("is_bot", pa.bool_(), nullable=False)]


# The columns every event has before its kept attributes; the attributes follow, named as
# the mapping's `keep` names them (the default: the five above).
CORE = 4
STATE_USER_KEY = "user_key"


@dataclass(frozen=True)
class Layout:
    """The schemas of one event mapping: the user id's type and the kept attributes.

    With string user ids the state rows carry `user_key`, a 64-bit hash of the user id
    computed by Spark (`xxhash64`), as the store's key: our state backends key rows by a
    64-bit integer. Users whose hashes collide share a key and are stored, read and
    written together (the engine hands every user of a key to the session logic).
    """

    user_type: pa.DataType
    attributes: tuple[str, ...]
    change: bool = False
    gap: bool = False
    last: tuple[str, ...] = ()
    mapped: tuple[str, ...] = ()
    values: tuple[str, ...] = ()
    content: SessionContent | None = None
    version: int = 1
    change_query: str | None = None

    @property
    def carries(self) -> bool:
        """Schema 3: page-view rows, `events`, sources kept across split sessions."""
        return self.version >= 3 and self.content is not None

    @functools.cached_property
    def event(self) -> pa.Schema:
        rest = [EVENT.field(i) for i in range(1, CORE)]
        core = [pa.field("user_id", self.user_type, nullable=False), *rest]
        carried = [pa.field(n, pa.string()) for n in (*self.last, *self.mapped, *self.values)]
        return pa.schema(core + [pa.field(a, pa.string()) for a in self.attributes]
                         + self.rule_fields + carried)  # fmt: skip

    @functools.cached_property
    def rule_fields(self) -> list[pa.Field]:
        """The per-event rules' columns, after the kept attributes (only those set):
        `change_value` (--split-on-change) and `gap_us` (--gap-field: microseconds, in
        decimal digits, so that every column after the time is a string, as the engines
        carry them, and copies compare as bytes like every other field)."""
        out = [pa.field(CHANGE_COLUMN, pa.string())] if self.change else []
        return out + ([pa.field(GAP_COLUMN, pa.string())] if self.gap else [])

    @functools.cached_property
    def state_rows(self) -> pa.Schema:
        """A user's stored rows without the expiry: its open events and, with schema 3, a
        row standing for the emitted session a later one may continue (`carried_session`)."""
        if not self.carries:
            return self.event
        return self.event.append(pa.field(CARRIED_SESSION, pa.string()))

    @functools.cached_property
    def state(self) -> pa.Schema:
        """A user's open events, as the session logic reads and writes them."""
        return self.state_rows.append(pa.field(STATE_EXPIRY, TS, nullable=False))

    @functools.cached_property
    def stored(self) -> pa.Schema:
        """State rows as our state store keeps them (keyed by `state_key`)."""
        if not self.string_keys:
            return self.state
        return self.state.append(pa.field(STATE_USER_KEY, pa.int64(), nullable=False))

    @property
    def state_key(self) -> str:
        return STATE_USER_KEY if self.string_keys else STATE_KEY

    @property
    def string_keys(self) -> bool:
        return pa.types.is_string(self.user_type)

    @functools.cached_property
    def sessions(self) -> pa.Schema:
        """SESSIONS with the user's type and the kept attributes (first, then `last:`);
        with schema 2, what a session carries follows them."""
        base = self._with_user(SESSIONS, attrs_after="end_reason")
        at = base.get_field_index("session_date")
        extra = [pa.field(n, pa.string()) for n in self.last]
        extra += content_fields(self.content, self.version) if self.content is not None else []
        for i, f in enumerate(extra):
            base = base.insert(at + i, f)
        return base

    @functools.cached_property
    def page_views(self) -> pa.Schema:
        return self._with_user(PAGE_VIEWS_3 if self.carries else PAGE_VIEWS)

    @functools.cached_property
    def events(self) -> pa.Schema:
        """`events` (schema 3): every event of an emitted session."""
        return self._with_user(EVENTS)

    @functools.cached_property
    def late_events(self) -> pa.Schema:
        return self.event.append(LATE_EVENTS.field("watermark"))

    @functools.cached_property
    def outputs(self) -> dict[str, pa.Schema]:
        out = {
            "sessions": self.sessions,
            "page_views": self.page_views,
            "late_events": self.late_events,
            "invalid_events": INVALID_EVENTS,
        }
        if self.carries:
            out["events"] = self.events
        return out

    @functools.cached_property
    def open_sessions(self) -> pa.Schema:
        """OPEN_SESSIONS (`--open-sessions`): a `sessions` row as known so far, when the
        watermark emits it unless new events extend it, and the batch that wrote it."""
        return self.sessions.append(pa.field(STATE_EXPIRY, TS, nullable=False)).append(
            pa.field(UPDATED_BATCH, pa.int64(), nullable=False)
        )

    def _with_user(self, base: pa.Schema, attrs_after: str | None = None) -> pa.Schema:
        out = []
        for f in base:
            if f.name in EVENT.names[CORE:] or f.name in (CHANGE_COLUMN, GAP_COLUMN):
                continue
            out.append(f.with_type(self.user_type) if f.name == "user_id" else f)
            if f.name == attrs_after:
                out += [pa.field(a, pa.string()) for a in self.attributes]
        return pa.schema(out)


@functools.lru_cache(maxsize=32)
def layout(mapping: EventMapping | None = None) -> Layout:
    """The schemas of `mapping` (the default mapping: EVENT, STATE, SESSIONS, ... above)."""
    mapping = mapping or EventMapping()
    user = pa.string() if mapping.string_keys else pa.int64()
    return Layout(
        user, mapping.attributes, bool(mapping.change_field), bool(mapping.gap),
        last=tuple(name for name, _ in mapping.last),
        mapped=mapping.mapped_columns,
        values=tuple(c.value_column for c in mapping.content.conversions if c.value),
        content=mapping.content if mapping.session_columns >= 2 else None,
        version=mapping.session_columns, change_query=mapping.change_query,
    )  # fmt: skip
