"""The order of a batch's events by (user, time, page), fast for the usual key ranges."""

from __future__ import annotations

import numpy as np


def sort_order(user: np.ndarray, time: np.ndarray, page_rank: np.ndarray) -> np.ndarray:
    """Indices sorting rows by (user, time, page_rank); the order among equal keys is arbitrary.

    Packs the three keys into one uint64 when their ranges fit (the usual case: a batch
    spans hours and the ids of a partition's users fit in ~20 bits once ranked), which
    sorts several times faster than a lexicographic sort, used as the fallback.
    """
    if len(user) == 0:
        return np.zeros(0, dtype=np.int64)
    t, pb = _offsets(time), _bits(page_rank)
    u = _offsets(user)
    if _bits(u) + _bits(t) + pb > 64:
        u = np.unique(user, return_inverse=True)[1].reshape(-1).astype(np.uint64)
    ub, tb = _bits(u), _bits(t)
    if t is None or u is None or ub + tb + pb > 64:
        return np.lexsort((page_rank, time, user))
    key = (u.astype(np.uint64) << np.uint64(tb + pb)) | (t.astype(np.uint64) << np.uint64(pb))
    return np.argsort(key | page_rank.astype(np.uint64))


def _offsets(values: np.ndarray) -> np.ndarray | None:
    """`values - min` as uint64, or None if the range does not fit in 63 bits."""
    low, high = int(values.min()), int(values.max())
    if (high - low).bit_length() > 63:
        return None
    return (values - np.int64(low)).astype(np.uint64)


def _bits(values: np.ndarray | None) -> int:
    return 64 if values is None else int(values.max()).bit_length()
