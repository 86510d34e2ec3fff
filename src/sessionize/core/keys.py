"""Processor keys -> the store's int64 keys.

Our state backends key rows by a 64-bit integer. An int64 key is its own store key; a string
key is stored under its 64-bit xxhash (seed 42, the UTF-8 bytes), the value Spark's
`xxhash64` gives, so that rows keyed here and columns hashed by Spark agree. Keys that share
a store key are stored, read and written together; the core keeps them apart by their own
key column (step.py).
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import xxhash

_SPARK_SEED = 42
_TWO_64 = 1 << 64
_TOP = 1 << 63


def store_keys(keys: pa.Array | pa.ChunkedArray) -> pa.Int64Array:
    """The store key of every value of `keys` (int64 or string, no nulls), in order.

    Strings are hashed once per distinct value.

    Example:
        >>> store_keys(pa.array(["a", "a"])).to_pylist()
        [-8582455328737087284, -8582455328737087284]
    """
    if isinstance(keys, pa.ChunkedArray):
        keys = keys.combine_chunks()
    if pa.types.is_integer(keys.type):
        return keys.cast(pa.int64())
    encoded = pc.dictionary_encode(keys)
    distinct = encoded.dictionary.to_pylist()
    hashed = np.fromiter(
        (_signed(xxhash.xxh64_intdigest(s.encode(), seed=_SPARK_SEED)) for s in distinct),
        dtype=np.int64,
        count=len(distinct),
    )
    return pa.array(hashed, pa.int64()).take(encoded.indices)


def _signed(unsigned: int) -> int:
    return unsigned - _TWO_64 if unsigned >= _TOP else unsigned
