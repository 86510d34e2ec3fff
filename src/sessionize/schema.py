"""Arrow schemas of events, state and the outputs of one event mapping (docs/design.md, "Events"
and "Outputs"): `base_schema`'s, shaped by the user id's type and the kept attributes.

Timestamps are microseconds in UTC everywhere, as in Spark. Partition columns
(`batch_id`, `session_date`) live in directory names, not in the Parquet files.
"""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass

import pyarrow as pa

from sessionize.base_schema import (
    ANONYMOUS_ID,
    ATTRIBUTED,
    CARRIED_SESSION,
    CHANGE_COLUMN,
    CONTENT,
    CONTENT_3,
    CORE,
    EMITTED_REVISION,
    EMITTED_SESSION,
    EMITTED_USER,
    EVENT,
    EVENT_KEY,
    EVENTS,
    GAP_COLUMN,
    IDENTITIES,
    IDENTITY_FIRST_SEEN,
    IDENTITY_USER_TIME,
    INVALID_EVENTS,
    IS_BOT,
    LATE_EVENTS,
    MOVED,
    OPEN_SESSIONS,
    OUTPUT_PARTITIONS,
    OUTPUTS,
    PAGE_VIEWS,
    PAGE_VIEWS_3,
    RELEASE_AT,
    RETRACTED,
    REVISION,
    SENT_USER,
    SESSION_NUMBERING,
    SESSION_TRAFFIC,
    SESSIONS,
    STATE,
    STATE_EXPIRY,
    STATE_KEY,
    STATE_USER_KEY,
    STITCHED_USER_ID,
    TS,
    UPDATED_BATCH,
    USERS,
    USERS_OUTPUT,
    USERS_TRAFFIC,
)
from sessionize.content import CONVERSION_SUFFIXES, SessionContent
from sessionize.mapping import EventMapping

# The fixed schemas are read from here too, as they always were.
__all__ = [
    "CARRIED_SESSION",
    "CONTENT",
    "CONTENT_3",
    "CORE",
    "EVENT",
    "EVENT_KEY",
    "EVENTS",
    "INVALID_EVENTS",
    "LATE_EVENTS",
    "OPEN_SESSIONS",
    "OUTPUT_PARTITIONS",
    "OUTPUTS",
    "PAGE_VIEWS",
    "PAGE_VIEWS_3",
    "SESSIONS",
    "STATE",
    "STATE_EXPIRY",
    "STATE_KEY",
    "STATE_USER_KEY",
    "TS",
    "UPDATED_BATCH",
    "Layout",
    "content_fields",
    "layout",
]


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
    return [*base, *per_conversion, pa.field(IS_BOT, pa.bool_(), nullable=False)]


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
    # `--anonymous-field` (docs/design.md, "Identity"): the events carry `sent_user_id`,
    # the state an identity row per anonymous id, and the outputs name the key
    # `anonymous_id`, the sessions adding `user_id` and `stitched_user_id`.
    identity: bool = False
    sent_user: bool = False  # the event column `sent_user_id` (identity's inner layout)
    # `--revise-within`: the state also keeps emitted sessions' events, marked with the id
    # and revision they were written under (docs/design.md, "Revisions").
    revise: bool = False

    @functools.cached_property
    def inner(self) -> Layout:
        """The layout the session logic (`advance`) runs on: with identity, the same events
        (`sent_user_id` among them) without the identity rows and the outputs' renames."""
        return dataclasses.replace(self, identity=False, sent_user=self.identity)

    @property
    def key_name(self) -> str:
        """The outputs' name for the key: `anonymous_id` with identity, else `user_id`."""
        return ANONYMOUS_ID if self.identity else "user_id"

    @property
    def carries(self) -> bool:
        """Schema 3: page-view rows, `events`, sources kept across split sessions."""
        return self.version >= 3 and self.content is not None

    @functools.cached_property
    def event(self) -> pa.Schema:
        rest = [EVENT.field(i) for i in range(1, CORE)]
        core = [pa.field("user_id", self.user_type, nullable=False), *rest]
        sent = (SENT_USER,) if self.sent_user or self.identity else ()
        names = (*self.last, *sent, *self.mapped, *self.values)
        carried = [pa.field(n, pa.string()) for n in names]
        return pa.schema(
            core + [pa.field(a, pa.string()) for a in self.attributes] + self.rule_fields + carried
        )

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
        rows = (
            self.event.append(pa.field(CARRIED_SESSION, pa.string()))
            if self.carries
            else self.event
        )
        if self.identity:
            rows = rows.append(pa.field(IDENTITY_FIRST_SEEN, TS)).append(
                pa.field(IDENTITY_USER_TIME, TS)
            )
        if self.revise:
            rows = rows.append(pa.field(EMITTED_SESSION, pa.string())).append(
                pa.field(EMITTED_REVISION, pa.int64())
            )
            if self.identity or self.sent_user:
                rows = rows.append(pa.field(EMITTED_USER, pa.string()))
        return rows

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
        if not self.identity:
            return base
        at = base.get_field_index("user_id") + 1
        base = base.insert(at, pa.field(STITCHED_USER_ID, pa.string(), nullable=False))
        base = base.insert(at, pa.field("user_id", pa.string()))
        return base.set(at - 1, pa.field(ANONYMOUS_ID, self.user_type, nullable=False))

    @functools.cached_property
    def page_views(self) -> pa.Schema:
        return self._keyed(self._with_user(PAGE_VIEWS_3 if self.carries else PAGE_VIEWS))

    @functools.cached_property
    def events(self) -> pa.Schema:
        """`events` (schema 3): every event of an emitted session."""
        return self._keyed(self._with_user(EVENTS))

    @functools.cached_property
    def late_events(self) -> pa.Schema:
        """The late events as read; with identity the key is `anonymous_id` and the user
        id an event was sent with is `user_id`."""
        late = self.event.append(LATE_EVENTS.field("watermark"))
        if not self.identity:
            return late
        return pa.schema([f.with_name(self.late_names.get(f.name, f.name)) for f in late])

    @property
    def late_names(self) -> dict[str, str]:
        """The late output's names for event columns (the keyed core's `late_names`)."""
        return {"user_id": ANONYMOUS_ID, SENT_USER: "user_id"} if self.identity else {}

    @functools.cached_property
    def identities(self) -> pa.Schema:
        """`identities` (with identity): an anonymous id's current user, first and last seen."""
        return IDENTITIES.set(0, IDENTITIES.field(0).with_type(self.user_type))

    @functools.cached_property
    def numbered_sessions(self) -> pa.Schema:
        """`sessions` as published with identity (`numbered`)."""
        return numbered(self.sessions)

    @functools.cached_property
    def users(self) -> pa.Schema:
        """`users` (with identity): a row per stitched user."""
        return users_of(self.sessions)

    @functools.cached_property
    def outputs(self) -> dict[str, pa.Schema]:
        """Every output as published (with identity, `sessions` numbered and `users`)."""
        out = {
            "sessions": self.numbered_sessions if self.identity else self.sessions,
            "page_views": self.page_views,
            "late_events": self.late_events,
            "invalid_events": INVALID_EVENTS,
        }
        if self.carries:
            out["events"] = self.events
        if self.identity:
            out["identities"] = self.identities
            out[USERS_OUTPUT] = self.users
        return out

    @functools.cached_property
    def open_sessions(self) -> pa.Schema:
        """OPEN_SESSIONS (`--open-sessions`): a `sessions` row as known so far, when the
        watermark emits it unless new events extend it, and the batch that wrote it."""
        return self.sessions.append(pa.field(STATE_EXPIRY, TS, nullable=False)).append(
            pa.field(UPDATED_BATCH, pa.int64(), nullable=False)
        )

    @functools.cached_property
    def session_revisions(self) -> pa.Schema:
        """`session_revisions` (`--revise-within`): `session_id`, `revision`, `retracted`,
        then the other `sessions` columns (numbered with identity), null on a retraction."""
        return revisions_of(self.numbered_sessions if self.identity else self.sessions)

    @functools.cached_property
    def first_revisions(self) -> pa.Schema:
        """The first step's `session_revisions`: of its `sessions`, not numbered."""
        return revisions_of(self.sessions)

    @functools.cached_property
    def session_changes(self) -> pa.Schema:
        """What the first step hands the users step with identity and revisions: the
        `session_revisions` columns, `moved` and `release_at` (base_schema)."""
        return self.first_revisions.append(pa.field(MOVED, pa.bool_(), nullable=False)).append(
            pa.field(RELEASE_AT, TS, nullable=False)
        )

    def _keyed(self, output: pa.Schema) -> pa.Schema:
        """`output` with its `user_id` named `anonymous_id` when identity is on."""
        if not self.identity:
            return output
        return output.set(
            0 if output.names[0] == "user_id" else output.get_field_index("user_id"),
            output.field("user_id").with_name(ANONYMOUS_ID),
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


def has_traffic(sessions: pa.Schema) -> bool:
    """Whether `sessions` carry their traffic source (`--content`)."""
    return all(n in sessions.names for n in SESSION_TRAFFIC)


def revisions_of(sessions: pa.Schema) -> pa.Schema:
    """The revisions of `sessions`: `session_id`, `revision`, `retracted`, then the other
    columns, null on a retraction."""
    rest = [f.with_nullable(True) for f in sessions if f.name != "session_id"]
    head = [
        sessions.field("session_id"),
        pa.field(REVISION, pa.int64(), nullable=False),
        pa.field(RETRACTED, pa.bool_(), nullable=False),
    ]
    return pa.schema(head + rest)


def numbered(sessions: pa.Schema) -> pa.Schema:
    """`sessions` numbered per stitched user and, with traffic, attributed (the columns
    logic/users.py adds), before the date the output is partitioned by."""
    added = [*SESSION_NUMBERING, *(ATTRIBUTED if has_traffic(sessions) else [])]
    at = sessions.get_field_index("session_date")
    at = len(sessions) if at < 0 else at
    for i, f in enumerate(added):
        sessions = sessions.insert(at + i, f)
    return sessions


def users_of(sessions: pa.Schema) -> pa.Schema:
    """The `users` output of a job whose sessions are `sessions`: with traffic, and each
    conversion's count and value summed (named as the sessions' ones)."""
    traffic = USERS_TRAFFIC if has_traffic(sessions) else []
    summed = [
        f
        for name in conversions_of(sessions)
        for f in (
            pa.field(name + "_count", pa.int64(), nullable=False),
            pa.field(name + "_value", pa.float64()),
        )
    ]
    return pa.schema([*USERS, *traffic, *summed])


def conversions_of(sessions: pa.Schema) -> list[str]:
    """The conversion names NAME of `sessions` (`--conversion`): those with every column
    `content_fields` gives one (NAME_count, NAME_value, NAME_first_at), in order."""
    names = sessions.names
    return [
        n.removesuffix("_count")
        for n in names
        if n.endswith("_count")
        and all(n.removesuffix("_count") + s in names for s in CONVERSION_SUFFIXES)
    ]


@functools.lru_cache(maxsize=32)
def layout(mapping: EventMapping | None = None) -> Layout:
    """The schemas of `mapping` (the default mapping: EVENT, STATE, SESSIONS, ... above)."""
    mapping = mapping or EventMapping()
    user = pa.string() if mapping.string_keys else pa.int64()
    return Layout(
        user,
        mapping.attributes,
        bool(mapping.change_field),
        bool(mapping.gap),
        last=tuple(name for name, _ in mapping.last),
        mapped=mapping.mapped_columns,
        values=tuple(c.value_column for c in mapping.content.conversions if c.value),
        content=mapping.content if mapping.session_columns >= 2 else None,
        version=mapping.session_columns,
        change_query=mapping.change_query,
        identity=bool(mapping.anonymous),
    )
