"""Timer semantics of one call (docs/design.md, "The keyed core"): a timer fires when it is
strictly below the batch's `watermark_after`; a fired timer is cleared unless the update
sets a new one; keys absent from the update's timers keep theirs; a null `at` clears."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from sessionize.core.declared import NEVER_US


def due_mask(timer_us: np.ndarray, watermark_after: int | None) -> np.ndarray:
    """Which stored rows carry a timer that fires in this batch."""
    if watermark_after is None:
        return np.zeros(len(timer_us), dtype=bool)
    return timer_us < watermark_after


def timers_after(
    keys: pa.Array,
    *,
    set_keys: pa.Array,
    set_at: np.ndarray,
    due: pa.Array,
    old_keys: pa.Array,
    old_at: np.ndarray,
) -> np.ndarray:
    """The timer (int64 us, NEVER_US for none) each of `keys` holds after the call: the one
    the update set, else none if it fired, else the one it had (`old_*`), else none."""
    if len(set_keys) == 0 and len(due) == 0 and bool((old_at == NEVER_US).all()):
        return np.full(len(keys), NEVER_US, dtype=np.int64)  # no timer anywhere (the usual)
    had = lookup(keys, old_keys, old_at)
    fired = pc.is_in(keys, value_set=due).to_numpy(zero_copy_only=False)
    out = np.where(fired, NEVER_US, had)
    at = pc.index_in(keys, value_set=set_keys)
    is_set = at.is_valid().to_numpy(zero_copy_only=False)
    if is_set.any():
        out[is_set] = set_at[at.filter(at.is_valid()).to_numpy()]
    return out


def lookup(keys: pa.Array, value_keys: pa.Array, values: np.ndarray) -> np.ndarray:
    """values[i] where keys == value_keys[i], NEVER_US where the key is absent."""
    out = np.full(len(keys), NEVER_US, dtype=np.int64)
    at = pc.index_in(keys, value_set=value_keys)
    found = at.is_valid().to_numpy(zero_copy_only=False)
    if found.any():
        out[found] = values[at.filter(at.is_valid()).to_numpy()]
    return out


def per_key(keys: pa.Array, timer_us: np.ndarray) -> tuple[pa.Array, np.ndarray]:
    """The distinct keys of stored rows sorted by key, and each one's timer (the earliest
    on its rows: the core writes one per key)."""
    if len(keys) < 2:
        return keys, timer_us
    starts = np.flatnonzero(
        np.concatenate([[True], pc.not_equal(keys[1:], keys[:-1]).to_numpy(zero_copy_only=False)])
    )
    return keys.take(pa.array(starts)), np.minimum.reduceat(timer_us, starts)
