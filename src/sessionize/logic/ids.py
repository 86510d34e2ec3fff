"""Session ids: `USER-STARTMILLIS`, unique per user even when sessions share a millisecond.

Pure numpy/pyarrow, like the rest of `sessionize.logic`.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from sessionize.logic.boundaries import US_PER_MS


def same_millisecond(user: np.ndarray, start: np.ndarray, closed_at: np.ndarray):
    """Per session (in session order): its rank among the user's sessions that start in
    the same millisecond (they share `USER-STARTMILLIS`, so the later ones get a suffix),
    and its release: the moment after which the watermark emits it.

    Sessions that share a millisecond are emitted together (all their ranks are known
    then), and not before the millisecond has passed (no later session can join it):
    release = max(closed_at of the group's last session, the millisecond's last µs).
    """
    k = len(start)
    if k == 0:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    ms = start // US_PER_MS
    head = np.ones(k, dtype=bool)
    head[1:] = (user[1:] != user[:-1]) | (ms[1:] != ms[:-1])
    group = np.cumsum(head) - 1
    heads = np.flatnonzero(head)
    rank = np.arange(k) - heads[group] + 1
    last = np.append(heads[1:], k) - 1
    release = np.maximum(closed_at[last], (ms[heads] + 1) * US_PER_MS - 1)[group]
    return rank, release


def session_ids(user: pa.Array, start_us: np.ndarray, rank: np.ndarray) -> pa.Array:
    """`f"{user_id}-{start in epoch milliseconds}"`, built column-wise, with `-{rank}`
    appended for the second and later sessions of a user in one millisecond. A string id
    is percent-escaped where it holds `%` or `-`, so the first `-` always ends the user
    part and two (user, start, rank) triples never share an id."""
    if pa.types.is_string(user.type):
        user = pc.replace_substring(pc.replace_substring(user, "%", "%25"), "-", "%2D")
    ids = pc.binary_join_element_wise(
        pc.cast(user, pa.string()),
        pc.cast(pa.array(start_us // US_PER_MS, pa.int64()), pa.string()),
        "-",
    )
    if not (rank > 1).any():
        return ids
    suffix = pc.binary_join_element_wise("-", pc.cast(pa.array(rank), pa.string()), "")
    return pc.if_else(pa.array(rank > 1), pc.binary_join_element_wise(ids, suffix, ""), ids)
