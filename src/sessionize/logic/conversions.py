"""Counts per action and conversions of a session.

- `event_counts`: a map from each action to the number of the session's events with it
  (keys in UTF-8 order).
- Per `--conversion NAME=ACTION[,value=PATH]`: `NAME_count` (events with ACTION),
  `NAME_value` (the float64 sum of their values; null when none has one), `NAME_first_at`
  (the first one's time; null without one); `converted`: any conversion.

Values arrive as the text of a JSON number (parsing checked it on the conversion's events
only). Vectorized over the batch's emitted sessions, `session` being each event's session.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

TS = pa.timestamp("us", tz="UTC")
_NO_TIME = np.iinfo(np.int64).max
# event_counts counts in a dense (session, action) table while it holds at most this many
# cells per event; beyond (many distinct actions), it sorts the events' cells instead.
DENSE_CELLS_PER_EVENT = 4


def event_counts(actions: pa.Array, session: np.ndarray, n_sessions: int) -> pa.Array:
    """Per session, a map<string, int64> from action to its number of events (`actions`
    may come dictionary-encoded)."""
    encoded = actions if pa.types.is_dictionary(actions.type) else pc.dictionary_encode(actions)
    names = encoded.dictionary
    ordered = pc.sort_indices(names)
    rank = np.empty(len(names), dtype=np.int64)
    rank[ordered.to_numpy()] = np.arange(len(names))
    by_rank = names.take(ordered)
    code = rank[encoded.indices.to_numpy(zero_copy_only=False).astype(np.int64)]
    width = max(len(names), 1)
    cells = session * width + code
    if n_sessions * width <= DENSE_CELLS_PER_EVENT * len(cells) + 1024:
        # A count per (session, action) cell: no sort of the events.
        table = np.bincount(cells, minlength=n_sessions * width)
        keys = np.flatnonzero(table)
        counts = table[keys]
    else:  # many sessions and many actions: only the cells that occur
        keys, counts = np.unique(cells, return_counts=True)
    per_session = np.bincount(keys // width, minlength=n_sessions)
    offsets = np.concatenate([[0], np.cumsum(per_session)]).astype(np.int32)
    return pa.MapArray.from_arrays(
        pa.array(offsets), by_rank.take(pa.array(keys % width)), pa.array(counts, pa.int64())
    )


def conversion_columns(
    is_conversion: np.ndarray,
    values: pa.Array | None,
    time: np.ndarray,
    session: np.ndarray,
    starts: np.ndarray,
) -> tuple[np.ndarray, pa.Array, pa.Array]:
    """Per session: (count, value sum or null, first time or null) of one conversion."""
    n = len(starts)
    count = np.bincount(session[is_conversion], minlength=n).astype(np.int64)
    if values is None:
        value = pa.nulls(n, pa.float64())
    else:
        # Other events' values are not the conversion's: never read (nor cast).
        numbers = pc.cast(pc.if_else(pa.array(is_conversion), values, None), pa.float64())
        has = is_conversion & pc.is_valid(numbers).to_numpy(zero_copy_only=False)
        filled = pc.fill_null(numbers, 0.0).to_numpy(zero_copy_only=False)
        total = np.bincount(session[has], weights=filled[has], minlength=n)
        valued = np.bincount(session[has], minlength=n) > 0
        value = pa.array(total, pa.float64(), mask=~valued)
    first = np.minimum.reduceat(np.where(is_conversion, time, _NO_TIME), starts) if n else time[:0]
    first_at = pa.array(first, pa.int64(), mask=count == 0).view(TS) if n else pa.array([], TS)
    return count, value, first_at
