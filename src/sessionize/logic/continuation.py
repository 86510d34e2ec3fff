"""Sources kept across split sessions (schema 3; docs/concepts/sessions.md, "Split sessions
keep their source").

A session *continues* the one before it (of the same user) when it was cut from the same
visit: the earlier one ended by `midnight`, `max_duration` or `field_change` (unless the
field is a `utm_*` name read from the URL: a new campaign is a new source), and the later
one starts within its inactivity end (the latest `event_time + gap` over its events), so
the gap and close rules alone would have joined them. A run of sessions each continuing
the one before is one visit: every session of it carries the traffic of the visit's first
event (its URL and referrer: `utm_*`, `gclid`, `referrer_host`, `channel`) and the click id
of the visit's first event carrying one, and names the session it continues in
`continues_session_id`.

The session continued may have been emitted in an earlier batch. So when a session that
a later one may continue is emitted, the user's state keeps *carry rows* standing for it:
event rows (with `carried_session` = its id, `event_time` = its inactivity end) holding
the event its traffic came from (action `traffic`) and the one its click id came from
(action `click_id`). They stay while an on-time event could still continue the session
(the watermark has not passed its inactivity end) or while an open session continues it,
and are replaced when the user's next continuable session is emitted. They are never
events: the cuts, `pages`, counts and `events` never see them.

Pure numpy/pyarrow, like the rest of the logic.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from sessionize.logic.boundaries import FIELD_CHANGE, MAX_DURATION, MIDNIGHT

TRAFFIC, CLICK = "traffic", "click_id"
NONE = -1


@dataclass(frozen=True)
class Carry:
    """The state's carry rows, one visit per user (indices into the step's rows).

    Per carry: `user` (user code), `until` (inactivity end, µs), `session_id`, `traffic`
    (row of its traffic event), `click` (row of its click event, NONE without one).
    """

    user: np.ndarray
    until: np.ndarray
    session_id: pa.Array
    traffic: np.ndarray
    click: np.ndarray

    @classmethod
    def empty(cls) -> Carry:
        none = np.zeros(0, dtype=np.int64)
        return cls(none, none, pa.array([], pa.string()), none, none)


def read_carry(
    ids: pa.Array, actions: pa.Array, user: np.ndarray, time: np.ndarray, offset: int
) -> Carry:
    """The Carry of carry rows (their `carried_session`, `action`, user codes and times;
    their rows in the step start at `offset`)."""
    if len(ids) == 0:
        return Carry.empty()
    is_traffic = pc.equal(actions, TRAFFIC).to_numpy(zero_copy_only=False)
    traffic = np.flatnonzero(is_traffic)
    order = np.argsort(user[traffic], kind="stable")
    traffic = traffic[order]
    click = np.full(len(traffic), NONE, dtype=np.int64)
    clicks = np.flatnonzero(~is_traffic)
    if len(clicks):
        where = np.searchsorted(user[traffic], user[clicks])
        click[where] = clicks + offset
    return Carry(user[traffic], time[traffic], ids.take(pa.array(traffic)), traffic + offset, click)


def continues_previous(
    first_user: np.ndarray,
    start: np.ndarray,
    reason: np.ndarray,
    reach: np.ndarray,
    traffic_change: bool,
) -> np.ndarray:
    """Per session (in order), whether it continues the session before it (see the module
    doc); `reach` is each session's inactivity end."""
    k = len(start)
    out = np.zeros(k, dtype=bool)
    if k < 2:
        return out
    cut = np.isin(reason[:-1], continuable_reasons(traffic_change))
    out[1:] = cut & (first_user[1:] == first_user[:-1]) & (start[1:] <= reach[:-1])
    return out


def continuable_reasons(traffic_change: bool) -> list[int]:
    """The end reasons a later session of the same visit may continue across."""
    return [MIDNIGHT, MAX_DURATION] + ([] if traffic_change else [FIELD_CHANGE])


@dataclass(frozen=True)
class Sources:
    """Per session: the row its traffic comes from, the row its click id comes from
    (NONE: none), and the session it continues (`previous`: True when the session before
    it; `carried`: index into the Carry, NONE otherwise)."""

    traffic: np.ndarray
    click: np.ndarray
    previous: np.ndarray
    carried: np.ndarray


def sources(
    session_user: np.ndarray,
    start: np.ndarray,
    first_row: np.ndarray,
    first_click_row: np.ndarray,
    previous: np.ndarray,
    carry: Carry,
) -> Sources:
    """Each session's traffic and click rows along its visit (see the module doc).

    `first_row` is each session's first event row, `first_click_row` its first event row
    carrying a click id (NONE: none), `previous` continues_previous's answer."""
    k = len(start)
    carried = np.full(k, NONE, dtype=np.int64)
    if len(carry.user) and k:
        # A user's first session continues the user's carry when it starts within it.
        first_of_user = np.ones(k, dtype=bool)
        first_of_user[1:] = session_user[1:] != session_user[:-1]
        at = np.searchsorted(carry.user, session_user)
        found = first_of_user & (at < len(carry.user))
        found[found] = carry.user[at[found]] == session_user[found]
        found[found] &= start[found] <= carry.until[at[found]]
        carried[found] = at[found]
    head = ~previous
    visit = np.cumsum(head) - 1
    heads = np.flatnonzero(head)
    traffic = first_row[heads][visit] if k else first_row
    has_carry = carried >= 0
    traffic = traffic.copy()
    carry_of_visit = np.full(len(heads), NONE, dtype=np.int64)
    carry_of_visit[visit[has_carry]] = carried[has_carry]
    visit_carry = carry_of_visit[visit] if k else carried
    with_carry = visit_carry >= 0
    traffic[with_carry] = carry.traffic[visit_carry[with_carry]]
    # The click id: the visit's first carrying one so far (the carry's, then in order).
    first = _first_so_far(first_click_row >= 0, heads, visit)
    click = np.where(first >= 0, first_click_row[np.maximum(first, 0)], NONE) if k else first
    if with_carry.any():
        carried_click = carry.click[visit_carry[with_carry]]
        click[with_carry] = np.where(carried_click >= 0, carried_click, click[with_carry])
    return Sources(traffic, click, previous, carried)


def _first_so_far(valid: np.ndarray, heads: np.ndarray, group: np.ndarray) -> np.ndarray:
    """Per index i, the first index j of i's group (a run starting at `heads[group[i]]`)
    with j <= i and `valid[j]`; NONE where there is none."""
    k = len(valid)
    at = np.flatnonzero(valid)
    if k == 0 or len(at) == 0:
        return np.full(k, NONE, dtype=np.int64)
    j = np.searchsorted(at, heads[group])
    candidate = at[np.minimum(j, len(at) - 1)]
    ok = (j < len(at)) & (candidate <= np.arange(k))
    return np.where(ok, candidate, NONE)
