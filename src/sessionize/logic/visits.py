"""The visits of a step's sessions (schema 3): which session continues which, where each
one's traffic and click id come from, and the carry rows each user keeps
(continuation.py says why and when).

Pure numpy/pyarrow, like the rest of the logic.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from sessionize import schema
from sessionize.config import SessionRules
from sessionize.logic.continuation import (
    CLICK,
    NONE,
    TRAFFIC,
    Carry,
    continuable_reasons,
    continues_previous,
    sources,
)
from sessionize.logic.ids import session_ids
from sessionize.logic.traffic import CLICK_IDS, click_id, per_distinct

CLICK_ID_NAMES = "(" + "|".join(CLICK_IDS) + ")="

_Split = Any  # sessions._Split (sessions.py imports this module)


@dataclass(frozen=True)
class Kept:
    """The carry rows a step leaves, one visit per user: `user` (codes, ascending),
    `until`, `session_id`, `traffic` and `click` (rows of the step; NONE: none)."""

    user: np.ndarray
    until: np.ndarray
    session_id: pa.Array
    traffic: np.ndarray
    click: np.ndarray


def with_visits(
    split: _Split,
    rules: SessionRules,
    lay: schema.Layout,
    carry: Carry,
    watermark_after: int | None,
    gap: np.ndarray | None,
) -> _Split:
    """`split` with each session's id, visit sources and the carry rows kept."""
    k = len(split.starts)
    first_user = split.user[split.starts]
    start = split.time[split.starts]
    first_rows = split.order[split.starts]
    users = split.rows["user_id"].take(pa.array(first_rows)).combine_chunks()
    ids = session_ids(users, start, split.rank)
    reach_each = split.time + (gap if gap is not None else rules.gap_us)
    reach = np.maximum.reduceat(reach_each, split.starts) if k else reach_each[:0]
    previous = continues_previous(
        first_user, start, split.reason, reach, traffic_change=lay.change_query is not None
    )
    has_click = _has_click(split)
    first_click = _first_per_session(has_click, split.session, k)
    first_click_row = np.where(first_click >= 0, split.order[np.maximum(first_click, 0)], NONE)
    found = sources(first_user, start, first_rows, first_click_row, previous, carry)
    prev_ids = pa.concat_arrays([pa.nulls(1, pa.string()), ids[:-1]]) if k else ids
    continues = pc.if_else(pa.array(previous), prev_ids, pa.nulls(k, pa.string()))
    if (found.carried >= 0).any():
        from_carry = carry.session_id.take(pa.array(np.maximum(found.carried, 0)))
        continues = pc.if_else(pa.array(found.carried >= 0), from_carry, continues)
    kept = _kept(
        split,
        first_user,
        reach,
        found,
        previous,
        carry,
        ids,
        watermark_after,
        lay.change_query is not None,
    )
    return dataclasses.replace(split, ids=ids, visit=found, continues_id=continues, kept=kept)


def _has_click(split: _Split) -> np.ndarray:
    """Per position, whether its event's URL carries a click id: judged once per distinct
    URL of the step (a visit's URL repeats on its pings), then looked up per event."""
    if "url" not in split.rows.column_names or not len(split.order):
        return np.zeros(len(split.order), dtype=bool)
    encoded = pc.dictionary_encode(split.rows["url"].combine_chunks())
    urls = encoded.dictionary
    # Only URLs that name a click id are parsed (RE2 over the distinct URLs first).
    named = pc.fill_null(pc.match_substring_regex(urls, CLICK_ID_NAMES, ignore_case=True), False)
    has = named.to_numpy(zero_copy_only=False).astype(bool)
    if has.any():
        kind = per_distinct(urls.filter(named), click_id, 2)[0]
        has[has] = pc.is_valid(kind).to_numpy(zero_copy_only=False).astype(bool)
    # A null URL carries nothing: its code is one past the distinct URLs.
    has = np.append(has, False)
    codes = encoded.indices.fill_null(len(urls)).to_numpy(zero_copy_only=False)
    return has[codes[split.order]]


def _first_per_session(flag: np.ndarray, session: np.ndarray, k: int) -> np.ndarray:
    """Per session, its first position with `flag` (NONE: none)."""
    out = np.full(k, NONE, dtype=np.int64)
    at = np.flatnonzero(flag)
    if len(at):
        s, first = np.unique(session[at], return_index=True)
        out[s] = at[first]
    return out


def _kept(
    split: _Split,
    first_user: np.ndarray,
    reach: np.ndarray,
    found,
    previous: np.ndarray,
    carry: Carry,
    ids: pa.Array,
    watermark_after: int | None,
    traffic_change: bool,
) -> Kept:
    """Per user, the visit its state keeps: its last emitted session that a later one may
    continue (else its old carry), while the watermark has not passed its inactivity end
    or the user's first open session continues it."""
    k = len(split.starts)
    emitted = split.emitted
    # The last emitted session of each user that has one (emitted sessions are a prefix).
    last = (
        np.flatnonzero(
            emitted & np.append((first_user[1:] != first_user[:-1]) | ~emitted[1:], True)
        )
        if k
        else np.zeros(0, int)
    )
    nxt = last + 1
    # A session a later one may continue: cut by a rule continues_previous joins across.
    could = np.isin(split.reason[last], continuable_reasons(traffic_change))
    cand_user, cand_until = first_user[last][could], reach[last][could]
    cand_id = ids.take(pa.array(last[could]))
    cand_traffic, cand_click = found.traffic[last][could], found.click[last][could]
    held = np.zeros(len(cand_user), dtype=bool)
    follow = nxt[could]
    ok = follow < k
    held[ok] = previous[follow[ok]] & ~emitted[follow[ok]]
    # Users with no emitted session keep their old carry.
    emitted_users = np.unique(first_user[last]) if len(last) else first_user[:0]
    old = ~np.isin(carry.user, emitted_users)
    old_held = np.zeros(len(carry.user), dtype=bool)
    if old.any() and k:
        first_open = np.flatnonzero(~emitted)
        is_first = np.ones(len(first_open), dtype=bool)
        is_first[1:] = first_user[first_open[1:]] != first_user[first_open[:-1]]
        heads = first_open[is_first]
        held_users = first_user[heads][found.carried[heads] >= 0]
        old_held = np.isin(carry.user, held_users)
    users = np.concatenate([cand_user, carry.user[old]])
    until = np.concatenate([cand_until, carry.until[old]])
    held_all = np.concatenate([held, old_held[old]])
    # An on-time event of a later batch is at or after this batch's watermark.
    keep = (
        np.ones(len(users), dtype=bool)
        if watermark_after is None
        else (held_all | (until >= watermark_after))
    )
    order = np.argsort(users[keep], kind="stable")
    session_id = pa.concat_arrays([cand_id, carry.session_id.filter(pa.array(old))])
    return Kept(
        users[keep][order],
        until[keep][order],
        session_id.filter(pa.array(keep)).take(pa.array(order)),
        np.concatenate([cand_traffic, carry.traffic[old]])[keep][order],
        np.concatenate([cand_click, carry.click[old]])[keep][order],
    )


def carry_table(split: _Split, kept: Kept, expires: np.ndarray, lay: schema.Layout) -> pa.Table:
    """The carry rows of `kept` as state rows: its traffic and click events' rows, with
    `event_time` the inactivity end, action `traffic` / `click_id`, `carried_session` the
    session's id and the user's expiry (its open sessions' or, with none, `until`)."""
    rows = np.concatenate([kept.traffic, kept.click[kept.click >= 0]])
    kinds = [TRAFFIC] * len(kept.traffic) + [CLICK] * int((kept.click >= 0).sum())
    which = np.concatenate([np.arange(len(kept.user)), np.flatnonzero(kept.click >= 0)])
    table = split.rows.take(pa.array(rows))
    user_expiry = _user_expiry(split, kept, expires)
    table = table.set_column(
        table.schema.get_field_index("event_time"),
        "event_time",
        pa.array(kept.until[which], pa.int64()).view(schema.TS),
    )
    table = table.set_column(
        table.schema.get_field_index("action"), "action", pa.array(kinds, pa.string())
    )
    table = table.append_column(
        schema.STATE_EXPIRY, pa.array(user_expiry[which], pa.int64()).view(schema.TS)
    )
    table = table.append_column(schema.CARRIED_SESSION, kept.session_id.take(pa.array(which)))
    return table.select(lay.state.names)


def _user_expiry(split: _Split, kept: Kept, expires: np.ndarray) -> np.ndarray:
    """Per kept user, the expiry of its open sessions' rows, else its carry's `until`."""
    out = kept.until.copy()
    open_sessions = np.flatnonzero(~split.emitted)
    if len(open_sessions):
        users = split.user[split.starts[open_sessions]]
        at = np.searchsorted(users, kept.user)
        hit = at < len(users)
        hit[hit] = users[at[hit]] == kept.user[hit]
        out[hit] = expires[open_sessions[at[hit]]]
    return out
