"""The per-event columns `sessions.advance` reads besides the key and time, and its late
and bot-free inputs: pure and vectorized, like the rest of the logic."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from sessionize import schema
from sessionize.base_schema import CHANGE_COLUMN, GAP_COLUMN
from sessionize.config import SessionRules
from sessionize.logic.bots import is_bot
from sessionize.logic.traffic import per_distinct, query_value


def int_numpy(col: pa.ChunkedArray) -> np.ndarray:
    """An int64 column as numpy (empty when it has no chunks)."""
    if col.num_chunks == 0:
        return np.zeros(0, dtype=np.int64)
    return col.to_numpy().astype(np.int64, copy=False)


def late_table(late_events: pa.Table, watermark: int, lay: schema.Layout) -> pa.Table:
    """LATE_EVENTS rows, sorted by all event columns so the order never depends on arrival."""
    keys = [(name, "ascending") for name in lay.event.names]
    idx = pc.sort_indices(late_events, sort_keys=keys)  # nulls last
    table = late_events.take(idx).append_column(
        "watermark", pa.array(np.full(late_events.num_rows, watermark, np.int64)).view(schema.TS)
    )
    return table.cast(lay.late_events).combine_chunks()


def without_bots(events: pa.Table, lay: schema.Layout) -> tuple[pa.Table, int]:
    """With `--bots drop`, the events without those of bots, and how many were dropped:
    they never reach a session, the state or `late_events`."""
    if lay.content is None or lay.content.bots != "drop" or "user_agent" not in lay.mapped:
        return events, 0
    bots = is_bot(events["user_agent"])
    if not bots.any():
        return events, 0
    return events.filter(pa.array(~bots)), int(bots.sum())


def string_rank(col: pa.ChunkedArray) -> np.ndarray:
    """Dense rank of each string (UTF-8 byte order): equal strings, equal ranks."""
    if len(col) == 0:
        return np.zeros(0, dtype=np.int64)
    distinct = pc.unique(col)
    rank = np.empty(len(distinct), dtype=np.int64)
    rank[pc.sort_indices(distinct).to_numpy()] = np.arange(len(distinct))
    return rank[int_numpy(pc.index_in(col, distinct))]


def is_close(actions: pa.ChunkedArray, close_actions: tuple[str, ...]) -> np.ndarray:
    if len(actions) == 0:
        return np.zeros(0, dtype=bool)
    found = pc.is_in(actions, value_set=pa.array(close_actions, pa.string()))
    return pc.fill_null(found, False).to_numpy(zero_copy_only=False).astype(bool, copy=False)


def rule_columns(rows: pa.Table, rules: SessionRules, lay: schema.Layout):
    """The per-event rules' inputs, when their columns are there: the split-on-change
    value as a code (equal values, equal codes; -1 for null; a `utm_*` name from the URL's
    query with schema 3), and each event's gap in µs (null: `--gap`; parsing wrote it as
    decimal digits of a positive number)."""
    change = gap = None
    col = None
    if lay.change_query is not None and "url" in rows.column_names:
        name = lay.change_query
        col = per_distinct(rows["url"].combine_chunks(), lambda u: (query_value(u, name),), 1)[0]
        col = pa.chunked_array([col])
    elif CHANGE_COLUMN in rows.column_names:
        col = rows[CHANGE_COLUMN]
    if col is not None:
        change = np.full(len(col), -1, dtype=np.int64)
        valued = pc.is_valid(col).to_numpy(zero_copy_only=False)
        if valued.any():
            change[valued] = string_rank(col.filter(pa.array(valued)))
    if GAP_COLUMN in rows.column_names:
        gap = int_numpy(pc.fill_null(pc.cast(rows[GAP_COLUMN], pa.int64()), rules.gap_us))
    return change, gap
