"""What one call of `advance` returns: the step's outputs and its counters."""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields

import numpy as np
import pyarrow as pa


@dataclass(frozen=True)
class StepStats:
    """Counters of one partition for one micro-batch; `+` sums partitions or batches.

    `events_in = on_time + late`; `duplicates` counts the copies dropped by deduplication
    (an on-time event equal to another of the batch or to a state row: one copy each).
    The `open_*` counters describe the users handed to `advance`, not the whole store.
    """

    events_in: int = 0
    on_time: int = 0
    late: int = 0
    duplicates: int = 0
    sessions_out: int = 0
    page_views_out: int = 0
    open_sessions_before: int = 0
    open_sessions_after: int = 0
    open_users_after: int = 0
    bot_events: int = 0  # events of bots dropped before sessionization (`--bots drop`)

    def __add__(self, other: StepStats) -> StepStats:
        if not isinstance(other, StepStats):
            return NotImplemented
        return StepStats(
            **{f.name: getattr(self, f.name) + getattr(other, f.name) for f in fields(self)}
        )

    def as_dict(self) -> dict[str, int]:
        return asdict(self)


@dataclass(frozen=True)
class SessionSpans:
    """Every session of the handed-in users, emitted or open, as a run of its events in
    sorted (user, time, page) order: what identity stitching reads (logic/identity.py)."""

    keys: pa.Array  # per event: the key (the anonymous id with identity)
    times: pa.Array  # per event: its time
    sent: pa.Array  # per event: the user id it was sent with (null: none)
    starts: np.ndarray  # per session: its first event's index
    ends: np.ndarray  # per session: one past its last event's index
    emitted: np.ndarray  # per session: its events leave the state in this batch
    # With a window (`--revise-within`): the events of the kept sessions set aside
    # (logic/set_aside.py) that leave the state in this batch, and those still kept.
    aside_left: pa.Table | None = None
    aside_kept: pa.Table | None = None


@dataclass(frozen=True)
class WrittenUsers:
    """With identity and revisions, per `sessions` row (`first`) and per
    `session_revisions` row (`again`): the user id it carries (a retraction's: the one it
    was last written with) and its session's release (µs; -1 on a retraction); per
    `session_revisions` row, the user id its id was last written with (`previous`,
    meaningful where `had`: not a new id)."""

    first: pa.Array
    first_release: np.ndarray
    again: pa.Array
    again_release: np.ndarray
    previous: pa.Array
    had: np.ndarray


@dataclass(frozen=True)
class StepResult:
    """The outputs of advancing one partition by one micro-batch.

    Tables conform exactly to the schemas in `sessionize.schema`:
    `sessions` (SESSIONS), `page_views` (PAGE_VIEWS), `late` (LATE_EVENTS) and
    `state_puts` (STATE: the complete new rows of every handed-in user that still has
    open events). `state_removes` lists, ascending, the users of the input state that
    have no open events left. With `advance(open_sessions=True)`: `open_sessions` (the
    OPEN_SESSIONS rows of the handed-in users) and `touched` (those users, ascending).
    With schema 3, `events` (every event of the emitted sessions); `state_puts` then also
    holds the users' carry rows (logic/continuation.py).
    """

    sessions: pa.Table
    page_views: pa.Table
    late: pa.Table
    state_puts: pa.Table
    state_removes: pa.Array
    stats: StepStats
    open_sessions: pa.Table | None = None
    touched: pa.Array | None = None
    events: pa.Table | None = None  # EVENTS rows of the emitted sessions (schema 3)
    runs: SessionSpans | None = None  # with `sent_user_id` among the events (identity)
    # With `--revise-within`: the `session_revisions` rows (revisions, then retractions)
    # and the page views of the revised sessions.
    revisions: tuple[pa.Table, pa.Table] | None = None
    # With both and identity: the users of the written sessions.
    users: WrittenUsers | None = None
