"""Where a user's sorted events split into sessions, when each session closes, and why.

The rules are those of docs/design.md, "Semantics". Input is one partition's kept events
sorted by `(user_id, event_time, page)`, as numpy columns; output is per session.

With only the inactivity gap and close actions, whether an event starts a session depends
on its predecessor alone, so one comparison of neighbours finds every start (the default,
fast path). The optional rules depend on where the current session started
(`--max-duration`, `--split-at-midnight`), on its earlier values (`--split-on-change`) or
on the latest `event_time + gap` over its events (`--gap-field`), so they cut greedily from
the first event of each *run*: a stretch of events that no start-independent cut (a new
user, a close action, a gap after every earlier event of the stretch) interrupts. Each
round of the loop below advances every run by one session at once, so the loop turns as
many times as the longest run has sessions, never once per user or per event.

Pure numpy/pyarrow, like the rest of `sessionize.logic`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from sessionize.config import SessionRules
from sessionize.timezones import local_days, next_midnight

US_PER_MS = 1_000
# `end_reason` values; on a tie at `closed_at` the first in this order wins.
END_REASONS = pa.array(
    ["explicit", "field_change", "max_duration", "midnight", "inactivity"], pa.string()
)
EXPLICIT, FIELD_CHANGE, MAX_DURATION, MIDNIGHT, INACTIVITY = range(5)
_NEVER = np.iinfo(np.int64).max
# Sums of microsecond spans stay below this, far from int64's limit.
_SAFE_SUM = 2**61


@dataclass(frozen=True)
class Cuts:
    """Sessions of the sorted events: `starts` (first position of each), and per session
    `closed_at` (µs), `reason` (index into END_REASONS) and `day` (`session_date` as days
    since the epoch)."""

    starts: np.ndarray
    closed_at: np.ndarray
    reason: np.ndarray
    day: np.ndarray


def cut_sessions(
    user: np.ndarray,
    time: np.ndarray,
    is_close: np.ndarray,
    rules: SessionRules,
    change: np.ndarray | None = None,
    gap: np.ndarray | None = None,
) -> Cuts:
    """Split events sorted by (user, time, page) into sessions under `rules`.

    Args:
        user, time, is_close: per event, in sorted order (user codes, µs, close action).
        rules: the session rules.
        change: per event, a code of its `--split-on-change` value (equal values, equal
            codes; -1 for null), or None when the rule is off.
        gap: per event, its own gap in µs (`--gap-field`, nulls already `--gap`), or None.

    Returns:
        The sessions' starts, closing times, end reasons and dates.
    """
    n = len(time)
    plain = (
        change is None
        and gap is None
        and rules.max_duration_us is None
        and not rules.split_at_midnight
    )
    if plain:
        starts = session_starts(user, time, is_close, rules.gap_us)
        ends = np.append(starts[1:], n)[: len(starts)] - 1
        explicit = is_close[ends]
        closed_at = np.where(explicit, time[ends], time[ends] + rules.gap_us)
        reason = np.where(explicit, EXPLICIT, INACTIVITY).astype(np.int8)
        return Cuts(starts, closed_at, reason, local_days(time[starts], rules.timezone))
    return _greedy(user, time, is_close, rules, change, gap)


def session_starts(u: np.ndarray, t: np.ndarray, close: np.ndarray, gap_us: int) -> np.ndarray:
    """Indices of the rows (sorted by user, time, page) that start a session, under the
    inactivity gap and close actions alone."""
    if len(u) == 0:
        return np.zeros(0, dtype=np.int64)
    new = np.ones(len(u), dtype=bool)
    new[1:] = (u[1:] != u[:-1]) | (t[1:] > t[:-1] + gap_us) | close[:-1]
    return np.flatnonzero(new)


def _greedy(user, time, is_close, rules: SessionRules, change, gap) -> Cuts:
    n = len(time)
    if n == 0:
        empty = np.zeros(0, dtype=np.int64)
        return Cuts(empty, empty, empty.astype(np.int8), empty.astype(np.int32))
    reach = time + (gap if gap is not None else np.int64(rules.gap_us))  # inactivity end

    # Runs: cut wherever no choice of session start could keep the event.
    block = np.ones(n, dtype=bool)
    block[1:] = (user[1:] != user[:-1]) | is_close[:-1]
    run = block.copy()
    if gap is None:
        run[1:] |= time[1:] > time[:-1] + rules.gap_us
    else:
        # Past the latest reach since the block's start: past it from any later start too.
        # After such a cut the running maximum restarts at the cut event by itself.
        covered = segmented_cummax(reach, block)
        run[1:] |= time[1:] > covered[:-1]
    run_starts = np.flatnonzero(run)
    run_end = (np.append(run_starts[1:], n) - 1)[np.cumsum(run) - 1]

    # Per possible start s: the first event past the session's time bound (start + D, or
    # the next midnight), and the first event whose value differs from the session's.
    bound = None
    if rules.max_duration_us is not None:
        bound = time + np.int64(rules.max_duration_us)
    if rules.split_at_midnight:
        midnight = next_midnight(time, rules.timezone)
        bound = midnight if bound is None else np.minimum(bound, midnight)
    past_bound = None if bound is None else _first_at_or_after(run, time, bound)
    change_at = None if change is None else _change_cuts(change, run)

    starts, causes = [], []
    active, cause = run_starts, np.full(len(run_starts), INACTIVITY, dtype=np.int8)
    while len(active):
        starts.append(active)
        causes.append(cause)
        limit = run_end[active] + 1
        nxt, why = limit.copy(), np.full(len(active), INACTIVITY, dtype=np.int8)
        if past_bound is not None:
            _take_earlier(nxt, why, past_bound[active], MAX_DURATION)
        at = None if change_at is None else change_at[active]
        if gap is not None:
            # Up to and including the change candidate: an inactivity cut at the same
            # event makes it no change split.
            end = nxt if at is None else np.minimum(nxt, at + 1)
            _take_earlier(nxt, why, _inactivity_cuts(active, end, time, reach), INACTIVITY)
        if at is not None:
            _take_earlier(nxt, why, at, FIELD_CHANGE)
        inside = nxt < limit
        active, cause = nxt[inside], why[inside]

    order = np.argsort(np.concatenate(starts), kind="stable")
    starts_all = np.concatenate(starts)[order]
    cause_all = np.concatenate(causes)[order]
    return _closing(starts_all, cause_all, time, is_close, reach, rules)


def _closing(starts, cause, time, is_close, reach, rules: SessionRules) -> Cuts:
    """`closed_at` as the earliest moment that applies, `end_reason` as the rule giving it
    (first in END_REASONS order on a tie)."""
    n, k = len(time), len(starts)
    ends = np.append(starts[1:], n)[:k] - 1
    next_start = np.append(starts[1:], 0)[:k]
    next_cause = np.append(cause[1:], INACTIVITY)[:k]
    moments = np.full((5, k), _NEVER, dtype=np.int64)
    moments[EXPLICIT] = np.where(is_close[ends], time[ends], _NEVER)
    moments[FIELD_CHANGE] = np.where(next_cause == FIELD_CHANGE, time[next_start], _NEVER)
    start_t = time[starts]
    if rules.max_duration_us is not None:
        moments[MAX_DURATION] = start_t + np.int64(rules.max_duration_us)
    if rules.split_at_midnight:
        moments[MIDNIGHT] = next_midnight(start_t, rules.timezone)
    moments[INACTIVITY] = np.maximum.reduceat(reach, starts) if k else reach[:0]
    reason = np.argmin(moments, axis=0).astype(np.int8)  # the first minimum wins ties
    closed_at = moments[reason, np.arange(k)]
    return Cuts(starts, closed_at, reason, local_days(start_t, rules.timezone))


def _take_earlier(nxt: np.ndarray, why: np.ndarray, at: np.ndarray, reason: int) -> None:
    earlier = at < nxt
    nxt[earlier] = at[earlier]
    why[earlier] = reason


def _first_at_or_after(run: np.ndarray, time: np.ndarray, bound: np.ndarray) -> np.ndarray:
    """Per position s, the first position i of s's run with time[i] >= bound[s] (or past
    the run's end). `time` is sorted within each run and bound[s] > time[s]."""
    n = len(time)
    run_id = np.cumsum(run) - 1
    # Merge the events with the queries, by (run, time), a query before an equal event.
    keys_run = np.concatenate([run_id, run_id])
    keys_time = np.concatenate([time, bound])
    is_query = np.concatenate([np.zeros(n, dtype=np.int8), np.ones(n, dtype=np.int8)])
    merged = np.lexsort((1 - is_query, keys_time, keys_run))
    events_before = np.cumsum(is_query[merged] == 0)
    out = np.empty(n, dtype=np.int64)
    queries = merged >= n
    out[merged[queries] - n] = events_before[queries]
    return out


def _change_cuts(change: np.ndarray, run: np.ndarray) -> np.ndarray:
    """Per position s, the first event after s whose value differs from the last non-null
    value since s (in s's run), or a position past the run when there is none.

    Such an event c differs from the previous non-null value of its run, at p(c) >= s.
    Those p(c) increase with c, so the answer is a binary search over them.
    """
    n = len(change)
    valued = np.flatnonzero(change >= 0)
    if len(valued) < 2:
        return np.full(n, n, dtype=np.int64)
    run_id = np.cumsum(run) - 1
    prev, cur = valued[:-1], valued[1:]
    differs = (run_id[prev] == run_id[cur]) & (change[prev] != change[cur])
    cuts, their_prev = cur[differs], prev[differs]
    idx = np.searchsorted(their_prev, np.arange(n), side="left")
    return np.append(cuts, n)[idx]


def _inactivity_cuts(active, limit, time, reach) -> np.ndarray:
    """Per session starting at `active[k]`, the first position in (active[k], limit[k])
    whose time is past the latest reach of the events before it since the start; or a
    huge number when there is none."""
    lengths = limit - active
    total = int(lengths.sum())
    offsets = np.concatenate([[0], np.cumsum(lengths)[:-1]])
    pos = np.repeat(active - offsets, lengths) + np.arange(total)
    first = np.zeros(total, dtype=bool)
    first[offsets] = True
    covered = segmented_cummax(reach[pos], first)
    cut = np.zeros(total, dtype=bool)
    cut[1:] = (time[pos[1:]] > covered[:-1]) & ~first[1:]
    candidate = np.where(cut, pos, _NEVER)
    return np.minimum.reduceat(candidate, offsets)


def segmented_cummax(values: np.ndarray, seg_start: np.ndarray) -> np.ndarray:
    """Running maximum of `values` that restarts where `seg_start` is True.

    Each segment is lifted above every earlier one (by the widths of the earlier
    segments' ranges) so that one `np.maximum.accumulate` does all segments; segments are
    taken in groups whose lifts fit in int64."""
    n = len(values)
    if n == 0:
        return values.copy()
    seg = np.cumsum(seg_start) - 1
    heads = np.flatnonzero(seg_start)
    low = np.minimum.reduceat(values, heads)
    width = np.maximum.reduceat(values, heads) - low + 1
    out = np.empty(n, dtype=np.int64)
    group = (np.cumsum(width.astype(np.float64)) // _SAFE_SUM).astype(np.int64)
    for g in np.unique(group):  # one group unless the spans sum past 2**61 µs
        segs = np.flatnonzero(group == g)
        lo, hi = heads[segs[0]], (heads[segs[-1] + 1] if segs[-1] + 1 < len(heads) else n)
        s = seg[lo:hi]
        lift = np.cumsum(width[segs]) - width[segs]  # exclusive
        lifted = values[lo:hi] - low[s] + lift[s - segs[0]]
        out[lo:hi] = np.maximum.accumulate(lifted) - lift[s - segs[0]] + low[s]
    return out
