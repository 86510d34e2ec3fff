"""Kept sessions that a batch cannot change, left out of its re-cut (`--revise-within`;
docs/design.md, "Revisions", "Re-cutting").

An event at `t` changes only sessions with `closed_at >= t`, and a kept session closed
before the watermark that judged the batch, so a user whose batch holds no event behind
that watermark keeps its kept sessions as they are: its open and new events are cut as a
job without a window cuts them, and its kept rows are carried into the new state, less
the sessions the window has passed. Only users with a late event re-cut their kept
history. Pure and vectorized over every user of the step, like the rest of the logic.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from sessionize import schema
from sessionize.logic.boundaries import Cuts
from sessionize.logic.ids import same_millisecond


@dataclass(frozen=True)
class Aside:
    """The state rows set aside (`rows`: indices into the step's rows, which start with
    the state's), per row its user code and its session's `release + window` (`hold`)."""

    rows: np.ndarray
    user: np.ndarray
    hold: np.ndarray

    def kept(self, watermark_after: int | None) -> np.ndarray:
        """Per row: still kept after the batch (its session is dropped once the watermark
        after the batch is past its hold, as `revisions.revise` drops them)."""
        if watermark_after is None:
            return np.ones(len(self.rows), dtype=bool)
        return self.hold >= watermark_after


def set_aside(
    from_state: np.ndarray,
    cuts: Cuts,
    user: np.ndarray,
    time: np.ndarray,
    unmarked: np.ndarray,
    late_users: np.ndarray,
    window_us: int,
) -> Aside:
    """The rows of the kept sessions of users not in `late_users`.

    `from_state` are the state's rows in sorted order and `cuts` their sessions (the cut
    the state was stored from: its first event starts a session as it did, so each kept
    session is one of them, with the same `closed_at`); `user` and `time` per row of the
    step, `unmarked` per state position (True: an open session's event).
    """
    k = len(cuts.starts)
    if not k:
        empty = np.zeros(0, dtype=np.int64)
        return Aside(empty, empty, empty)
    kept = np.add.reduceat(unmarked.astype(np.int64), cuts.starts) == 0
    first = from_state[cuts.starts]
    _, release = same_millisecond(user[first], time[first], cuts.closed_at)
    chosen = kept & ~np.isin(user[first], late_users)
    starts = np.zeros(len(from_state), dtype=np.int64)
    starts[cuts.starts] = 1
    session = np.cumsum(starts) - 1
    pick = chosen[session]
    rows = from_state[pick]
    return Aside(rows, user[rows], (release + window_us)[session[pick]])


def with_aside(
    puts: pa.Table,
    stored,
    state: pa.Table,
    aside: Aside,
    watermark_after: int | None,
    lay: schema.Layout,
) -> tuple[pa.Table, np.ndarray]:
    """The new state rows `puts` (of `stored`'s sessions not emitted: a `sessions._Split`,
    sorted by user) with the set-aside rows still kept, sorted by user, every row of a
    user with its timer (the earliest of its open sessions' releases and its kept
    sessions' holds); and the users of those kept rows."""
    still = aside.kept(watermark_after)
    if not still.any():
        return puts, np.zeros(0, dtype=np.int64)
    rows = aside.rows[still]
    users = np.concatenate([aside.user[still], stored.user[~stored.row_emitted]])
    timer = np.concatenate(
        [
            aside.hold[still],
            puts[schema.STATE_EXPIRY].combine_chunks().cast(pa.int64()).to_numpy(),
        ]
    )
    order = np.argsort(users, kind="stable")  # a user's kept rows, then its open ones
    users, timer = users[order], timer[order]
    first = np.flatnonzero(np.append(True, users[1:] != users[:-1]))
    run = np.zeros(len(users), dtype=np.int64)
    run[first] = 1
    earliest = np.minimum.reduceat(timer, first)[np.cumsum(run) - 1]
    # One take over the state's rows (handed in without their timer) and the new ones.
    timerless = lay.state.remove(lay.state.get_field_index(schema.STATE_EXPIRY))
    source = pa.concat_tables([state.select(timerless.names).cast(timerless),
                               puts.select(timerless.names)])  # fmt: skip
    taken = np.concatenate([rows, state.num_rows + np.arange(puts.num_rows)])[order]
    both = source.take(pa.array(taken)).append_column(
        schema.STATE_EXPIRY, pa.array(earliest, pa.int64()).view(schema.TS)
    )
    table = both.select(lay.state.names).cast(lay.state).combine_chunks()
    return table, np.unique(aside.user[still])
