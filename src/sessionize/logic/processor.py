"""Sessionization as a keyed-core processor (docs/design.md, "The keyed core"): the session
logic (`advance`) behind the `stateful.Processor` contract.

Its stored rows are those the session engine has always written: a user's open events, the
user's expiry `expires_at` (the core's timer column) and, with string ids, `user_key` (the
core's store key: the id's xxhash64, as Spark computes it). So a session state written
before the core ran sessions is read and continued as it is.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from sessionize import schema
from sessionize.base_schema import (
    IDENTITY_FIRST_SEEN,
    IDENTITY_USER_TIME,
    PAGE_VIEW_REVISIONS,
    SESSION_CHANGES,
    SESSION_REVISIONS,
    USERS_OUTPUT,
)
from sessionize.config import SessionRules, format_duration
from sessionize.core import Context, FollowOn, Output, Processor, Update
from sessionize.core.declared import NEVER_US
from sessionize.errors import ConfigError
from sessionize.logic.bots import is_bot
from sessionize.logic.identity_step import (
    identity_rows,
    keyed,
    session_changes,
    split_state,
    stitch,
    with_users,
)
from sessionize.logic.result import StepResult
from sessionize.logic.sessions import advance
from sessionize.logic.users import UserRules, UsersProcessor
from sessionize.logic.users_revised import RevisedUsersProcessor

USER = schema.STATE_KEY
LATE = "late_events"
EVENTS = "events"  # schema 3: every event of the emitted sessions
IDENTITIES = "identities"  # with identity: the anonymous ids whose user or times changed
# What `process` counts per call (Update.counters). `open_sessions` and `open_users` are
# changes: added up over a job's batches they give the sessions and users open now.
COUNTERS = (
    "on_time",
    "duplicates",
    "sessions_out",
    "page_views_out",
    "open_sessions",
    "open_users",
)
# Of COUNTERS, the changes: the engine keeps their running sum (the sessions and users open).
GAUGES = ("open_sessions", "open_users")
# What a session job's record calls the events `drop` leaves out (bots, with `--bots drop`).
DROPPED = "bot_events"
# The counters a session job sums over its batches (a record's `totals`, after the engine's
# own), in the words `sessionize status` prints them.
TOTALED = {
    "duplicates": "duplicates dropped",
    "sessions_out": "sessions out",
    DROPPED: "bot events dropped",
}
# The rows of each output a batch writes, by the counter that counts them.
OUTPUT_ROWS = {"sessions": "sessions_out", "page_views": "page_views_out"}


class SessionProcessor(Processor):
    """Sessions per user: the events of a user's open sessions are its state, a session is
    emitted once the watermark passes its close, and a user's timer is the earliest close
    of its open sessions.

    Args:
        rules: the session rules (gap, lateness, close actions, optional cuts).
        layout: the event layout (the user id's type, the kept attributes; default: int64
            ids and the five default attributes).
        open_sessions: also write `open_sessions`, the sessions still open, replaced by
            `user_id` every batch.
        identities_current: with identity, `identities` is replaced by `anonymous_id`
            (one current row per anonymous id, for a sink that keeps such tables) rather
            than appended as a change log.
        numbered: with identity, number the sessions per stitched user (the users step,
            a follow-on: logic/users.py); False: this step alone, its `sessions` keyed
            by anonymous id with their users but not numbered.

    With `rules.revise_within_us` the events of that window behind the watermark revise
    the sessions they join: the emitted sessions stay in the state that long, and the
    outputs add `session_revisions` and `page_view_revisions` (docs/design.md,
    "Revisions"; not yet with schema 3 or `open_sessions`: ConfigError).
    With identity too, a revision also follows a change of the session's user, and a
    retraction carries the user it was last written with.

    With identity (a layout of `--anonymous-field`) the key is the anonymous id: its state
    also holds its identity row, kept after its sessions close (logic/identity_step.py),
    and the outputs name the key `anonymous_id`, the sessions adding `user_id` and
    `stitched_user_id` (docs/design.md, "Identity").

    Example:
        >>> from sessionize.config import SessionRules
        >>> p = SessionProcessor(SessionRules(gap_us=1_800_000_000, lateness_us=0))
        >>> sorted(p.outputs)
        ['late_events', 'page_views', 'sessions']
    """

    key = USER
    event_time = "event_time"
    late_output = LATE
    sorted_rows = False  # `advance` sorts the events by (user, time, page) itself
    gauges = GAUGES
    timer_column = schema.STATE_EXPIRY
    store_key_column = schema.STATE_USER_KEY

    def __init__(
        self,
        rules: SessionRules,
        layout: schema.Layout | None = None,
        open_sessions: bool = False,
        identities_current: bool = False,
        numbered: bool = True,
    ) -> None:
        self.rules = rules
        self.layout = layout or schema.layout()
        if rules.revise_within_us is not None:
            check_revisable(self.layout, open_sessions)
            self.layout = dataclasses.replace(self.layout, revise=True)
            self.allowed_lateness_us = rules.revise_within_us
        self.open_sessions = open_sessions
        self.identities_current = identities_current and self.layout.identity
        lay = self.layout
        self.state_schema = lay.state_rows
        self.late_names = lay.late_names
        outputs: dict[str, pa.Schema | Output] = {
            "sessions": lay.sessions,
            "page_views": lay.page_views,
            LATE: lay.late_events,
        }
        if lay.carries:
            outputs[EVENTS] = lay.events
        if self.identities_current:
            outputs[IDENTITIES] = Output(lay.identities, mode="replace", key=lay.key_name)
        elif lay.identity:
            outputs[IDENTITIES] = lay.identities
        if lay.revise:
            outputs[SESSION_REVISIONS] = lay.first_revisions
            outputs[PAGE_VIEW_REVISIONS] = lay.page_views
        # With revisions the users step takes every change of the sessions and writes
        # `sessions` and `session_revisions` itself (logic/users_revised.py).
        self.hands_changes = lay.revise and lay.identity and numbered
        if self.hands_changes:
            del outputs["sessions"], outputs[SESSION_REVISIONS]
            outputs[SESSION_CHANGES] = lay.session_changes
        if open_sessions:
            outputs[schema.OPEN_SESSIONS] = Output(
                lay.open_sessions, mode="replace", key=lay.key_name
            )
        self.outputs: Mapping[str, pa.Schema | Output] = outputs
        if lay.identity and numbered:  # per stitched user: numbers, attribution, `users`
            rules_of_users = UserRules(rules.user_ttl_us, rules.attribution_lookback_us)
            current = self.identities_current
            if self.hands_changes:
                assert rules.revise_within_us is not None
                window = rules.revise_within_us
                revised = RevisedUsersProcessor(lay.sessions, rules_of_users, window, current)
                self.follow_on = FollowOn(SESSION_CHANGES, revised, job=USERS_OUTPUT)
            else:
                users = UsersProcessor(lay.sessions, rules_of_users, current)
                self.follow_on = FollowOn("sessions", users, job=USERS_OUTPUT)

    @property
    def name(self) -> str:
        return "sessions"

    def params(self) -> dict[str, Any]:
        """The session rules, as the flags spell them (they are part of the state)."""
        r = self.rules
        rules = r.record()
        if not self.layout.identity:
            # meaningless without identity, and absent before it
            del rules["user_ttl"], rules["attribution_lookback"]
        return {
            "gap": format_duration(r.gap_us),
            "lateness": format_duration(r.lateness_us),
            "close_actions": ",".join(r.close_actions),
            **rules,
        }

    def drop(self, rows: pa.Table) -> pa.Array | None:
        """With `--bots drop`, the events of bots: they reach no session, no state and not
        `late_events`."""
        lay = self.layout
        if lay.content is None or lay.content.bots != "drop" or "user_agent" not in lay.mapped:
            return None
        return pa.array(is_bot(rows.column("user_agent")))

    def process(self, state: pa.Table, rows: pa.Table, ctx: Context) -> Update:
        """`advance` over the handed-in users: their new state rows and expiry (timer), the
        users with no open session left removed, the emitted sessions and page views."""
        stored = None
        if self.layout.identity:
            state, stored = split_state(state)
        result = advance(
            state,
            rows,
            rules=self.rules,
            watermark_before=ctx.watermark_before,
            watermark_after=ctx.watermark_after,
            layout=self.layout.inner,
            open_sessions=self.open_sessions,
            identities=stored,
        )
        puts = result.state_puts
        outputs = {"sessions": result.sessions, "page_views": result.page_views}
        if result.events is not None:
            outputs[EVENTS] = result.events
        if result.revisions is not None:
            outputs[SESSION_REVISIONS], outputs[PAGE_VIEW_REVISIONS] = result.revisions
        deletes = {}
        if self.open_sessions:
            outputs[schema.OPEN_SESSIONS] = _tagged(result.open_sessions, ctx.batch_id)
            deletes[schema.OPEN_SESSIONS] = pa.table({USER: result.touched})
        users = puts.column(USER).combine_chunks()
        new_users = pc.count_distinct(
            users.filter(pc.invert(pc.is_in(users, value_set=state.column(USER))))
        ).as_py()
        s = result.stats
        counters = {
            "on_time": s.on_time,
            "duplicates": s.duplicates,
            "sessions_out": s.sessions_out,
            "page_views_out": s.page_views_out,
            "open_sessions": s.open_sessions_after - s.open_sessions_before,
            "open_users": new_users - len(result.state_removes),
        }
        if stored is not None:
            return self._identified(result, state, stored, outputs, deletes, counters, ctx)
        return Update(
            state=puts.select(self.state_schema.names),
            remove=result.state_removes,
            outputs=outputs,
            timers=_expiries(puts),
            counters=counters,
            deletes=deletes,
        )

    def _identified(
        self,
        result: StepResult,
        state: pa.Table,
        stored: pa.Table,
        outputs: dict[str, pa.Table],
        deletes: dict[str, pa.Table],
        counters: dict[str, int],
        ctx: Context,
    ) -> Update:
        """The update with identity: the outputs keyed by `anonymous_id`, the sessions'
        users, and every handed-in id's identity row among its state rows (an id whose
        sessions all closed keeps it, its timer at `last_seen + --user-ttl`, or none
        without a TTL). `identities` gets the ids whose identity changed; kept current and
        rebuilt (`ctx.every_key`), every handed id's. An id whose identity row is due
        (`last_seen + TTL` below the batch's watermark) and has no open session is removed,
        its row deleted from a kept-current `identities`."""
        lay = self.layout
        assert result.runs is not None
        ttl = self.rules.user_ttl_us
        st = stitch(stored, state, result.runs, ttl, revised=result.users is not None)
        if result.users is None:
            outputs["sessions"] = with_users(outputs["sessions"], st.emitted_users, lay.sessions)
        else:  # with revisions, the users known at emission over every event
            w = result.users
            outputs["sessions"] = with_users(outputs["sessions"], w.first, lay.sessions)
            revised = outputs[SESSION_REVISIONS]
            outputs[SESSION_REVISIONS] = with_users(revised, w.again, lay.first_revisions)
            outputs[PAGE_VIEW_REVISIONS] = keyed(outputs[PAGE_VIEW_REVISIONS], lay.page_views)
            if self.hands_changes:
                first, again = outputs.pop("sessions"), outputs.pop(SESSION_REVISIONS)
                outputs[SESSION_CHANGES] = session_changes(first, again, w, lay.session_changes)
        outputs["page_views"] = keyed(outputs["page_views"], lay.page_views)
        timers = _expiries(result.state_puts)
        idle = pc.invert(
            pc.is_in(st.identities.column("anonymous_id"), value_set=timers.column(USER))
        )
        expired = _expired(st.identities.filter(idle), ttl, ctx.watermark_after)
        identities = st.identities.filter(
            pc.invert(pc.is_in(st.identities.column("anonymous_id"), value_set=expired))
        )
        written = st.current if self.identities_current and ctx.every_key else st.changed
        if self.identities_current:
            written = written.filter(
                pc.invert(pc.is_in(written.column("anonymous_id"), value_set=expired))
            )
            deletes[IDENTITIES] = pa.table({lay.key_name: expired})
        outputs[IDENTITIES] = written.select(lay.identities.names).cast(lay.identities)
        if EVENTS in outputs:
            outputs[EVENTS] = keyed(outputs[EVENTS], lay.events)
        if self.open_sessions:
            rows = outputs[schema.OPEN_SESSIONS]
            outputs[schema.OPEN_SESSIONS] = with_users(rows, st.open_users, lay.open_sessions)
            deletes = {
                schema.OPEN_SESSIONS: deletes[schema.OPEN_SESSIONS].rename_columns([lay.key_name])
            }
        events = result.state_puts
        n = events.num_rows
        events = events.append_column(IDENTITY_FIRST_SEEN, pa.nulls(n, schema.TS))
        events = events.append_column(IDENTITY_USER_TIME, pa.nulls(n, schema.TS))
        keys = identities.column("anonymous_id")
        puts = pa.concat_tables(
            [
                events.select(lay.state_rows.names).cast(lay.state_rows),
                identity_rows(identities, lay),
            ]
        ).sort_by(USER)
        only = identities.filter(pc.invert(pc.is_in(keys, value_set=timers.column(USER))))
        timers = pa.concat_tables([timers, _identity_timers(only, ttl)])
        removes = result.state_removes
        removes = removes.filter(pc.invert(pc.is_in(removes, value_set=keys)))
        return Update(
            state=puts,
            remove=pa.concat_arrays([removes, expired.cast(removes.type)]).unique(),
            outputs=outputs,
            timers=timers,
            counters=counters,
            deletes=deletes,
        )


def check_revisable(lay: schema.Layout, open_sessions: bool) -> None:
    """`--revise-within` with what a job does not revise yet is refused (ConfigError)."""
    if lay.carries or open_sessions:
        raise ConfigError(
            "--revise-within does not yet revise continued visits (--session-columns 3) "
            "or --open-sessions: leave one of them out"
        )


def _expired(idle: pa.Table, ttl_us: int | None, watermark_after: int | None) -> pa.Array:
    """The anonymous ids of `idle` identities (no open session) whose `last_seen + TTL` is
    below the batch's watermark: forgotten now (the core's timer rule)."""
    key = idle.column("anonymous_id").combine_chunks()
    if ttl_us is None or watermark_after is None:
        return key.slice(0, 0)
    last = idle.column("last_seen").cast(pa.int64()).to_numpy(zero_copy_only=False)
    return key.filter(pa.array(last + ttl_us < watermark_after))


def _identity_timers(idle: pa.Table, ttl_us: int | None) -> pa.Table:
    """The timers of identities without an open session: `last_seen + TTL` (the core's
    "never" when that is later), none without a TTL."""
    key = idle.column("anonymous_id").combine_chunks()
    if ttl_us is None:
        return pa.table({USER: key, "at": pa.nulls(len(key), pa.int64())})
    last = idle.column("last_seen").cast(pa.int64()).to_numpy(zero_copy_only=False)
    return pa.table({USER: key, "at": pa.array(np.minimum(last + ttl_us, NEVER_US))})


def _tagged(rows: pa.Table, batch_id: int) -> pa.Table:
    """`open_sessions` rows with `updated_batch`: the batch that last changed its user."""
    batch = pa.array(np.full(rows.num_rows, batch_id, np.int64))
    return rows.append_column(schema.UPDATED_BATCH, batch)


def _expiries(puts: pa.Table) -> pa.Table:
    """Each user's timer: its rows' `expires_at` (equal on all of them; `puts` is sorted by
    user), as the core's timer table."""
    users = puts.column(USER).combine_chunks()
    if len(users) == 0:
        return pa.table({USER: users, "at": pa.array([], pa.int64())})
    first = np.flatnonzero(pc.not_equal(users[1:], users[:-1]).to_numpy(zero_copy_only=False)) + 1
    starts = pa.array(np.concatenate([[0], first]))
    at = puts.column(schema.STATE_EXPIRY).combine_chunks().take(starts).cast(pa.int64())
    return pa.table({USER: users.take(starts), "at": at})
