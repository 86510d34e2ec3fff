"""Rule 2 of docs/design.md, "Semantics": one kept copy of each (user, time, page)."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc


def survivors(
    rows: pa.Table,
    order: np.ndarray,
    user: np.ndarray,
    time: np.ndarray,
    page_rank: np.ndarray,
) -> np.ndarray:
    """Boolean mask over `order` (rows sorted by key) keeping one copy of each key.

    Only the rows whose key occurs more than once are sorted again by the tiebreak
    columns, so the common case (few duplicates) costs one comparison of sorted keys.
    """
    u, t, p = user[order], time[order], page_rank[order]
    same_as_prev = (u[1:] == u[:-1]) & (t[1:] == t[:-1]) & (p[1:] == p[:-1])
    keep = np.ones(len(order), dtype=bool)
    if not same_as_prev.any():
        return keep
    in_dup = np.zeros(len(order), dtype=bool)
    in_dup[1:] |= same_as_prev
    in_dup[:-1] |= same_as_prev
    dup_pos = np.flatnonzero(in_dup)
    dup_rows = order[dup_pos]
    keys = [(name, "ascending") for name in rows.column_names]  # nulls last by default
    perm = pc.sort_indices(rows.take(pa.array(dup_rows)), sort_keys=keys).to_numpy()
    ranked = dup_rows[perm]
    first = np.ones(len(ranked), dtype=bool)
    first[1:] = (
        (user[ranked[1:]] != user[ranked[:-1]])
        | (time[ranked[1:]] != time[ranked[:-1]])
        | (page_rank[ranked[1:]] != page_rank[ranked[:-1]])
    )
    keep[dup_pos] = False
    keep[dup_pos[perm[first]]] = True
    return keep
