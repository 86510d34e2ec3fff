"""The 64-bit store key of a string user id: Spark's `xxhash64(user_id)`, bit for bit.

Spark hashes a string column as XXH64 of its UTF-8 bytes with seed 42 and reads the digest
as a signed long; a NULL hashes to the seed. Checkpoints written when Spark computed the
key continue unchanged.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import xxhash

from sessionize.events.rules import KEY_SEED


def user_key(user_id: str | None) -> int:
    """The store key of one user id (42 for None, as Spark's NULL)."""
    if user_id is None:
        return KEY_SEED
    digest = xxhash.xxh64_intdigest(user_id.encode(), KEY_SEED)
    return digest - (1 << 64) if digest >= 1 << 63 else digest


def user_keys(user_ids: list[str | None]) -> pa.Array:
    """The store keys of many user ids, as an int64 array."""
    digest = xxhash.xxh64_intdigest
    raw = np.fromiter(
        (KEY_SEED if u is None else digest(u.encode(), KEY_SEED) for u in user_ids),
        dtype=np.uint64,
        count=len(user_ids),
    )
    return pa.array(raw.view(np.int64))
