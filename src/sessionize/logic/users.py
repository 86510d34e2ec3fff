"""Per stitched user: session numbers, new vs returning, last non-direct attribution and
the `users` rows (docs/design.md, "Identity"), as the session processor's follow-on.

`UsersProcessor` is a `stateful.Processor` keyed by `stitched_user_id` over the sessions
the first step emits in a batch (`event_time` = `closed_at`: an emitted session's close is
never below the watermark before its batch). Its state is one row per stitched user.

A user's sessions are taken in the order they close (`closed_at`), then by start and
session id. That is the order they are emitted: a batch emits the sessions whose close
the watermark has passed, so every session of a later batch closes no earlier than those
of the batches before, and the order is the same however the input was cut into batches
(a stream and hourly batches number alike). It is the start order but where one user's
sessions overlap (two devices at once, or a long session around a short one). In that
order, after those of earlier batches, each session gets:

- `session_number`: the user's sessions so far plus its rank, and `is_new_user` (1);
- `attributed_channel/source/medium/campaign`: its own traffic when its channel is not
  `Direct`, else the user's last non-direct session before it that started at most
  `lookback` before it, else `Direct`, `(direct)`, `(none)`, null.

A user's *span* restarts at a session that closes more than `ttl` after the latest event
of the user's earlier sessions (stored or in the batch): numbering starts at 1 again, and
nothing of before is kept. In the state, a user's timer is its last event + `ttl`; when
it fires the user is removed (and deleted from a `users` table kept current). A session
emitted after that closes after the watermark that fired the timer, so it restarts by the
rule too: a stream and batches agree. Pure
pyarrow/numpy, vectorized over the partition: segmented scans (`_running_max`) instead of
a call per user.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from sessionize.base_schema import ATTRIBUTED, SESSION_NUMBERING, STITCHED_USER_ID, USERS_OUTPUT
from sessionize.core import Context, Output, Processor, Update
from sessionize.core.declared import NEVER_US
from sessionize.logic.channel import GOOGLE_CLICK_IDS, site_kind
from sessionize.schema import conversions_of, has_traffic, numbered, users_of

KEY = STITCHED_USER_ID
# A user's sessions are numbered in the order they close, then by start and id: the order
# they are emitted, the same in a stream and in batches (see the module doc).
ORDER = ("start_time", "session_id")
TS = pa.timestamp("us", tz="UTC")
DIRECT = "Direct"
# The state beyond the `users` columns: the latest event (for the TTL) and the last
# non-direct session's traffic and start (for attribution).
LAST_EVENT = "last_event"
LAST_ND = [
    pa.field("nd_channel", pa.string()),
    pa.field("nd_source", pa.string()),
    pa.field("nd_medium", pa.string()),
    pa.field("nd_campaign", pa.string()),
    pa.field("nd_start", TS),
]


@dataclass(frozen=True)
class UserRules:
    """How long a user is kept after their last event, and how far back a direct session
    looks for the last non-direct one (µs)."""

    ttl_us: int | None
    lookback_us: int


class UsersProcessor(Processor):
    """The follow-on of the session processor with identity (the module doc)."""

    key = KEY
    event_time = "closed_at"
    sorted_rows = False  # ordered here, by start

    def __init__(self, sessions: pa.Schema, rules: UserRules, keeps_current: bool = False):
        self.sessions = sessions
        self.rules = rules
        self.traffic = has_traffic(sessions)
        self.conversions = conversions_of(sessions)
        users = users_of(sessions)
        # A user's row (the whole state here; with revisions, its base row).
        self.base_schema = pa.schema(
            [*users, pa.field(LAST_EVENT, TS, nullable=False), *(LAST_ND if self.traffic else [])]
        )
        self.state_schema = self.base_schema
        kept = Output(users, mode="replace", key=KEY) if keeps_current else users
        self.outputs = {"sessions": numbered(sessions), USERS_OUTPUT: kept}
        self.keeps_current = keeps_current

    def params(self) -> dict:
        return {"user_ttl_us": self.rules.ttl_us, "lookback_us": self.rules.lookback_us}

    def process(self, state: pa.Table, rows: pa.Table, ctx: Context) -> Update:
        out, new_state = self.numbered(state, rows)
        number = out.column(SESSION_NUMBERING[0].name).to_numpy()
        ttl = self.rules.ttl_us
        removed = self._expired(state, new_state, ctx)
        timers = _timers(new_state, ttl)
        users = new_state.select(self.outputs_schema("users").names)
        if ctx.every_key:  # a `users` table rebuilt from the state: every user handed in
            kept = pc.invert(pc.is_in(state.column(KEY), pa.concat_arrays([
                new_state.column(KEY).combine_chunks(), removed])))  # fmt: skip
            users = pa.concat_tables([users, state.filter(kept).select(users.column_names)])
        outputs: dict[str, pa.Table] = {"sessions": out, "users": users}
        deletes = {"users": pa.table({KEY: removed})} if self.keeps_current else None
        return Update(
            state=new_state,
            remove=removed,
            outputs=outputs,
            timers=timers,
            deletes=deletes,
            counters={
                "new_users": int(np.count_nonzero(number == 1)),
                "users_out": users.num_rows,
                "users_expired": len(removed),
            },
        )

    def numbered(self, state: pa.Table, rows: pa.Table) -> tuple[pa.Table, pa.Table]:
        """`rows` (sessions) numbered and attributed after their users' stored rows
        `state`, sorted by user, close, start and id; and the users' rows continued
        by them (one per user with sessions in `rows`)."""
        rows = rows.take(
            pc.sort_indices(
                rows,
                [(KEY, "ascending"), *((c, "ascending") for c in ("closed_at", *ORDER))],
            )
        )
        n = rows.num_rows
        keys = rows.column(KEY).combine_chunks()
        first = _group_starts(keys)
        group = np.cumsum(first) - 1
        starts_at = np.flatnonzero(first)
        stored = _stored_for(state, keys.take(pa.array(starts_at)) if n else keys)
        start = _us(rows, "start_time")
        end = _us(rows, "end_time")
        # The latest event before each session: of the user's earlier sessions in the
        # batch or stored (-1: none, the user is new).
        prior = np.where(first, -1, np.roll(_running_max(end, first), 1)) if n else end
        before = np.maximum(prior, stored[LAST_EVENT][group])
        ttl = self.rules.ttl_us
        # By the session's close, not its start: a session emitted after the user expired
        # closes after the watermark that expired it, so a stream (which forgot the user)
        # and one batch (which did not) restart alike.
        closed = _us(rows, "closed_at")
        restart = (before < 0) | ((closed - before > ttl) if ttl is not None else np.zeros(n, bool))
        # The last restart at or before each session (positions rise, so one global scan).
        last_restart = np.maximum.accumulate(np.where(restart, np.arange(n), -1)) if n else start
        in_span = last_restart >= starts_at[group] if n else restart
        span_start = np.where(in_span, last_restart, starts_at[group])
        carried = ~in_span  # the stored user continues up to this session
        number = np.where(
            carried, stored["sessions"][group] + np.arange(n) - span_start + 1,
            np.arange(n) - span_start + 1,
        )  # fmt: skip
        out = rows.append_column(SESSION_NUMBERING[0], pa.array(number, pa.int64()))
        out = out.append_column(SESSION_NUMBERING[1], pa.array(number == 1))
        if self.traffic:
            out = _attributed(out, rows, start, span_start, carried, group, stored, self.rules)
        return out, self._state(rows, out, group, span_start, carried, stored, start, end)

    def outputs_schema(self, name: str) -> pa.Schema:
        out = self.outputs[name]
        return out.schema if isinstance(out, Output) else out

    def _state(self, rows, out, group, span_start, carried, stored, start, end) -> pa.Table:
        """Each user's new row: the stored one continued, or their latest span's alone."""
        n = rows.num_rows
        if n == 0:
            return self.base_schema.empty_table()
        last = np.flatnonzero(np.append(group[1:] != group[:-1], True))  # a user's last row
        span_of_last = span_start[last]
        live = np.arange(n) >= span_start[last][group]  # in the user's latest span
        cont = carried[last]  # that span continues the stored user

        def summed(values: np.ndarray) -> np.ndarray:
            return np.bincount(group[live], weights=values[live], minlength=len(last)).astype(
                np.int64
            )

        def plus_stored(name: str, values: np.ndarray) -> np.ndarray:
            return summed(values) + np.where(cont, stored[name], 0)

        first_start = _min_by(start, group, live, len(last))
        last_start = _max_by(start, group, live, len(last))
        latest_end = _max_by(end, group, live, len(last))
        cols = {
            KEY: rows.column(KEY).take(pa.array(last)),
            "first_session_start": np.where(
                cont, np.minimum(stored["first_session_start"], first_start), first_start
            ),
            "last_session_start": np.where(
                cont, np.maximum(stored["last_session_start"], last_start), last_start
            ),
            "sessions": out.column("session_number").take(pa.array(last)).to_numpy(),
            "events": plus_stored("events", _int(rows, "event_count")),
            LAST_EVENT: np.where(cont, np.maximum(stored[LAST_EVENT], latest_end), latest_end),
        }
        if self.traffic:
            cols |= _traffic_state(rows, out, group, live, cont, span_of_last, stored, plus_stored)
        for name in self.conversions:
            cols[name + "_count"] = plus_stored(name + "_count", _int(rows, name + "_count"))
            cols[name + "_value"] = _value_sum(rows, name + "_value", group, live, cont, stored)
        return pa.table(
            {
                f.name: cols[f.name].cast(f.type)
                if isinstance(cols[f.name], pa.Array | pa.ChunkedArray)
                else pa.array(cols[f.name], pa.int64()).cast(f.type)
                for f in self.base_schema
            },
            schema=self.base_schema,
        )

    def _expired(self, state: pa.Table, new_state: pa.Table, ctx: Context) -> pa.Array:
        """The users handed in without sessions whose timer fired: removed."""
        if state.num_rows == 0 or ctx.watermark_after is None or self.rules.ttl_us is None:
            return pa.array([], pa.string())
        gone = pc.invert(pc.is_in(state.column(KEY), value_set=new_state.column(KEY)))
        last = state.column(LAST_EVENT).cast(pa.int64()).to_numpy(zero_copy_only=False)
        due = pa.array(last + self.rules.ttl_us < ctx.watermark_after)
        return state.column(KEY).filter(pc.and_(gone, due)).combine_chunks()


def _traffic_state(rows, out, group, live, cont, span_of_last, stored, plus_stored) -> dict:
    """The users' traffic columns and last non-direct session."""
    n_users = len(span_of_last)
    channel = rows.column("channel").combine_chunks()
    engaged = _bools(rows, "engaged")
    at_last = pa.array(np.flatnonzero(np.append(group[1:] != group[:-1], True)))
    nd = _own_nd(rows)
    nd_mask = nd["non_direct"] & live
    nd_pos = np.full(n_users, -1)
    np.maximum.at(nd_pos, group[nd_mask], np.flatnonzero(nd_mask))
    has_nd = nd_pos >= 0
    take = pa.array(np.where(has_nd, nd_pos, 0))
    cols = {
        "page_views": plus_stored("page_views", _int(rows, "page_view_count")),
        "engaged_sessions": plus_stored("engaged_sessions", engaged.astype(np.int64)),
        "first_channel": _pick(cont, stored["first_channel"], channel.take(pa.array(span_of_last))),
        "first_landing_page": _pick(
            cont,
            stored["first_landing_page"],
            rows.column("landing_page").combine_chunks().take(pa.array(span_of_last)),
        ),
        "last_channel": channel.take(at_last),
    }
    for name in ("channel", "source", "medium", "campaign"):
        mine = nd[name].take(take)
        kept = _pick(cont, stored[f"nd_{name}"], pa.nulls(n_users, pa.string()))
        cols[f"nd_{name}"] = pc.if_else(pa.array(has_nd), mine, kept)
    mine_start = pa.array(_us(rows, "start_time")[np.where(has_nd, nd_pos, 0)]).cast(TS)
    kept_start = _pick(cont, stored["nd_start"], pa.nulls(n_users, TS))
    cols["nd_start"] = pc.if_else(pa.array(has_nd), mine_start, kept_start)
    return cols


def _value_sum(rows, name, group, live, cont, stored) -> pa.Array:
    """Each user's sum of a conversion's value over the latest span (with the stored sum
    where it continues), null where no session of it had a value (SQL's SUM)."""
    groups = len(cont)
    column = rows.column(name).combine_chunks()
    valid = np.asarray(column.is_valid().to_numpy(zero_copy_only=False), bool) & live
    values = np.asarray(column.fill_null(0.0).to_numpy(zero_copy_only=False), np.float64)
    total = np.bincount(group[valid], weights=values[valid], minlength=groups)
    seen = np.bincount(group[valid], minlength=groups) > 0
    kept = stored[name]
    has_kept = cont & np.asarray(kept.is_valid().to_numpy(zero_copy_only=False), bool)
    kept_values = np.asarray(kept.fill_null(0.0).to_numpy(zero_copy_only=False), np.float64)
    total = total + np.where(has_kept, kept_values, 0.0)
    return pa.array(total, pa.float64(), mask=~(seen | has_kept))


def _attributed(out, rows, start, span_start, carried, group, stored, rules) -> pa.Table:
    """Each session's own traffic, else the last non-direct one before it in its span,
    within the lookback, else Direct."""
    n = rows.num_rows
    own = _own_nd(rows)
    non_direct = own["non_direct"]
    positions = np.arange(n)
    # The last non-direct session strictly before each one (global scan; checked in span).
    marks = np.where(non_direct, positions, -1)
    prior = np.concatenate([[-1], np.maximum.accumulate(marks)[:-1]]) if n else marks
    from_batch = prior >= span_start
    prior_start = np.where(from_batch, start[np.maximum(prior, 0)], 0)
    stored_start = stored["nd_start_us"][group]
    use_stored = ~from_batch & carried & (stored_start >= 0)
    cand_start = np.where(from_batch, prior_start, stored_start)
    within = (from_batch | use_stored) & (start - cand_start <= rules.lookback_us)
    take_batch = pa.array(np.maximum(prior, 0))
    result = {}
    fallback = {"channel": DIRECT, "source": "(direct)", "medium": "(none)", "campaign": None}
    for name, default in fallback.items():
        batch_value = own[name].take(take_batch)
        stored_value = stored[f"nd_{name}"].take(pa.array(group)) if n else own[name]
        cand = pc.if_else(pa.array(from_batch), batch_value, stored_value)
        other = pc.if_else(pa.array(within), cand, pa.scalar(default, pa.string()))
        result[name] = pc.if_else(pa.array(non_direct), own[name], other)
    for f in ATTRIBUTED:
        out = out.append_column(f, result[f.name.removeprefix("attributed_")])
    return out


def _own_nd(rows: pa.Table) -> dict:
    """Each session's own traffic (channel, source, medium, campaign) and whether it is
    non-direct: source is the lower-cased `utm_source`, else a Google click id's, else the
    referrer host; medium the `utm_medium`, else the click id's, else organic or referral
    by the referrer (`logic/channel.ga4_facts`'s rule)."""
    channel = rows.column("channel").combine_chunks()
    utm_source = pc.utf8_lower(rows.column("utm_source").combine_chunks())
    utm_medium = pc.utf8_lower(rows.column("utm_medium").combine_chunks())
    campaign = pc.utf8_lower(rows.column("utm_campaign").combine_chunks())
    referrer = rows.column("referrer_host").combine_chunks()
    clicks, click_codes = _distinct(
        rows.column("click_id_type").combine_chunks()
        if "click_id_type" in rows.column_names
        else pa.nulls(rows.num_rows, pa.string())
    )
    by_click = [GOOGLE_CLICK_IDS.get(c, (None, None)) if c else (None, None) for c in clicks]
    click_source = pa.array([c[0] for c in by_click], pa.string()).take(click_codes)
    click_medium = pa.array([c[1] for c in by_click], pa.string()).take(click_codes)
    hosts, host_codes = _distinct(referrer)
    kinds = [None if h is None else "organic" if site_kind(h) == "search" else "referral"
             for h in hosts]  # fmt: skip
    ref_medium = pa.array(kinds, pa.string()).take(host_codes)
    source = pc.if_else(pc.is_valid(click_source), click_source, pc.coalesce(utm_source, referrer))
    no_utm_source = pc.if_else(pc.is_valid(utm_source), pa.scalar(None, pa.string()), ref_medium)
    medium = pc.if_else(
        pc.is_valid(click_medium), click_medium, pc.coalesce(utm_medium, no_utm_source)
    )
    non_direct = np.asarray(
        pc.fill_null(pc.not_equal(channel, pa.scalar(DIRECT)), False).to_numpy(
            zero_copy_only=False
        ),
        bool,
    )
    return {
        "channel": channel.cast(pa.string()),
        "source": source.cast(pa.string()),
        "medium": medium.cast(pa.string()),
        "campaign": campaign.cast(pa.string()),
        "non_direct": non_direct,
    }


def _distinct(values: pa.Array) -> tuple[list, pa.Array]:
    """The distinct values (a Python list) and each row's index into them."""
    encoded = pc.dictionary_encode(values.cast(pa.string()), null_encoding="encode")
    return encoded.dictionary.to_pylist(), encoded.indices


def _stored_for(state: pa.Table, keys: pa.Array) -> dict:
    """The stored rows of `keys` (the batch's users in order) as numpy/arrow columns;
    `has` marks the users stored, -1 (or null) where not."""
    at = pc.index_in(keys, value_set=state.column(KEY).combine_chunks())
    has = np.asarray(pc.is_valid(at).to_numpy(zero_copy_only=False), bool)
    idx = pa.array(np.where(has, pc.fill_null(at, 0).to_numpy(zero_copy_only=False), 0))
    out: dict = {"has": has}
    for f in state.schema:
        if f.name == KEY:
            continue
        col = state.column(f.name).combine_chunks()
        taken = col.take(idx) if state.num_rows else pa.nulls(len(keys), f.type)
        if pa.types.is_timestamp(f.type) or pa.types.is_integer(f.type):
            arr = np.asarray(taken.cast(pa.int64()).fill_null(-1).to_numpy(zero_copy_only=False))
            out[f.name] = np.where(has, arr, -1 if pa.types.is_timestamp(f.type) else 0)
            if f.name == "nd_start":
                out["nd_start_us"] = out[f.name]
                out[f.name] = pc.if_else(pa.array(has), taken, pa.nulls(len(keys), f.type))
        else:
            out[f.name] = pc.if_else(pa.array(has), taken, pa.nulls(len(keys), f.type))
    return out


def _group_starts(keys: pa.Array) -> np.ndarray:
    n = len(keys)
    if n == 0:
        return np.zeros(0, bool)
    same = pc.equal(keys.slice(1), keys.slice(0, n - 1)).to_numpy(zero_copy_only=False)
    return np.concatenate([[True], ~np.asarray(same, bool)])


def _running_max(values: np.ndarray, first: np.ndarray) -> np.ndarray:
    """The running maximum of `values` within each run that `first` starts (a segmented
    inclusive scan, Hillis-Steele: log2(n) vectorized steps)."""
    out = values.copy()
    group = np.cumsum(first)
    shift = 1
    while shift < len(out):
        same = group[shift:] == group[:-shift]
        out[shift:] = np.where(same, np.maximum(out[shift:], out[:-shift]), out[shift:])
        shift *= 2
    return out


def _max_by(values: np.ndarray, group: np.ndarray, mask: np.ndarray, groups: int) -> np.ndarray:
    out = np.full(groups, np.iinfo(np.int64).min)
    np.maximum.at(out, group[mask], values[mask])
    return out


def _min_by(values: np.ndarray, group: np.ndarray, mask: np.ndarray, groups: int) -> np.ndarray:
    out = np.full(groups, np.iinfo(np.int64).max)
    np.minimum.at(out, group[mask], values[mask])
    return out


def _pick(cond: np.ndarray, stored: pa.Array, batch: pa.Array) -> pa.Array:
    return pc.if_else(pa.array(cond), stored, batch)


def _us(rows: pa.Table, name: str) -> np.ndarray:
    col = rows.column(name).combine_chunks()
    return np.asarray(col.cast(TS).cast(pa.int64()).to_numpy(zero_copy_only=False), np.int64)


def _int(rows: pa.Table, name: str) -> np.ndarray:
    return np.asarray(rows.column(name).fill_null(0).to_numpy(), np.int64)


def _bools(rows: pa.Table, name: str) -> np.ndarray:
    return np.asarray(rows.column(name).fill_null(False).to_numpy(zero_copy_only=False), bool)


def _timers(state: pa.Table, ttl: int | None) -> pa.Table:
    last = state.column(LAST_EVENT).cast(pa.int64()).to_numpy(zero_copy_only=False)
    at = np.minimum(last + ttl, NEVER_US) if ttl is not None else np.full(len(last), NEVER_US)
    return pa.table({KEY: state.column(KEY), "at": pa.array(at, pa.int64())})
