"""The partition Spark's `repartition(n, key)` gives a key, computed in Arrow and numpy.

Spark places a row by `pmod(murmur3_x86_32(key, seed 42), n)` (its `HashPartitioning`): a
64-bit integer is hashed as its low then its high 32 bits, a string as its UTF-8 bytes, four
at a time, then each trailing byte (sign-extended) as a word of its own (Spark's variant of
Murmur3's tail), and a NULL keeps the seed. A task that knows where each of its rows goes
can pack a partition's rows into one value (events/packing.py) and still land every key
where Spark's shuffle would, so that a state partition keeps its keys across versions.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

SEED = 42
_C1, _C2 = np.uint32(0xCC9E2D51), np.uint32(0x1B873593)
# Strings up to this many bytes are hashed together in a padded matrix, longer ones alone
# (a key is at most a few hundred bytes; an invalid line's id may be anything).
_MATRIX_BYTES = 256


def placed_here(kind: pa.DataType) -> bool:
    """Whether `spark_partitions` computes Spark's placement of keys of this Arrow type
    (Spark's LongType and StringType)."""
    return bool(kind == pa.int64() or pa.types.is_string(kind) or pa.types.is_large_string(kind))


def spark_partitions(keys: pa.Array | pa.ChunkedArray, n: int) -> np.ndarray:
    """The partition (0..n-1) of each of `keys` (64-bit integers or strings) as Spark's
    `repartition(n, key)` places it.

    Raises:
        TypeError: keys of another type.

    Example:
        >>> spark_partitions(pa.array([1, 2, None]), 4).tolist()
        [3, 2, 2]
    """
    if isinstance(keys, pa.ChunkedArray):
        keys = keys.combine_chunks()
    if keys.type == pa.int64():
        hashes = _hash_longs(keys.fill_null(0).to_numpy().astype(np.int64))
    elif placed_here(keys.type):
        encoded = pc.dictionary_encode(keys)
        distinct = _hash_strings(encoded.dictionary)
        hashes = (
            distinct[encoded.indices.fill_null(0).to_numpy()]
            if len(distinct)
            else (np.full(len(keys), SEED, np.uint32))
        )
    else:
        raise TypeError(f"Spark's placement of {keys.type} keys is not computed here")
    if keys.null_count:
        hashes = np.where(keys.is_null().to_numpy(zero_copy_only=False), np.uint32(SEED), hashes)
    return np.mod(hashes.view(np.int32).astype(np.int64), n)


def _rotl(x: np.ndarray, r: int) -> np.ndarray:
    return (x << np.uint32(r)) | (x >> np.uint32(32 - r))


def _mix(h: np.ndarray, k: np.ndarray) -> np.ndarray:
    """Murmur3's step: one 32-bit word `k` into the hashes `h`."""
    k = _rotl(k * _C1, 15) * _C2
    return _rotl(h ^ k, 13) * np.uint32(5) + np.uint32(0xE6546B64)


def _finish(h: np.ndarray, length: np.ndarray | int) -> np.ndarray:
    h = h ^ np.asarray(length, np.uint32)
    h = h ^ (h >> np.uint32(16))
    h = h * np.uint32(0x85EBCA6B)
    h = h ^ (h >> np.uint32(13))
    h = h * np.uint32(0xC2B2AE35)
    out: np.ndarray = h ^ (h >> np.uint32(16))
    return out


def _hash_longs(values: np.ndarray) -> np.ndarray:
    bits = values.view(np.uint64)
    low = (bits & np.uint64(0xFFFFFFFF)).astype(np.uint32)
    high = (bits >> np.uint64(32)).astype(np.uint32)
    h = _mix(np.full(len(values), SEED, np.uint32), low)
    return _finish(_mix(h, high), 8)


def _hash_strings(strings: pa.Array) -> np.ndarray:
    """Spark's Murmur3 of each string's UTF-8 bytes (no NULLs: a dictionary)."""
    width = np.int32 if strings.type == pa.string() else np.int64
    offsets = np.frombuffer(strings.buffers()[1], width)
    offsets = offsets[strings.offset : strings.offset + len(strings) + 1]
    data = np.frombuffer(strings.buffers()[2] or b"", np.uint8)
    lengths = np.diff(offsets).astype(np.int64)
    out = np.empty(len(strings), np.uint32)
    short = lengths <= _MATRIX_BYTES
    idx = np.flatnonzero(short)
    out[idx] = _hash_padded(data, offsets[:-1][idx].astype(np.int64), lengths[idx])
    for i in np.flatnonzero(~short):  # rare: each alone, in the same padded form
        start = np.array([offsets[i]], np.int64)
        out[i] = _hash_padded(data, start, lengths[i : i + 1])[0]
    return out


def _hash_padded(data: np.ndarray, starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """The hashes of the byte strings data[starts[i]:starts[i]+lengths[i]], vectorized over
    a matrix of them padded to a whole number of words."""
    width = int(-(-int(lengths.max(initial=0)) // 4) * 4)
    matrix = np.zeros((len(starts), max(width, 4)), np.uint8)
    rows = np.repeat(np.arange(len(starts)), lengths)
    cols = np.arange(int(lengths.sum())) - np.repeat(np.cumsum(lengths) - lengths, lengths)
    matrix[rows, cols] = data[np.repeat(starts, lengths) + cols]
    words = matrix.view("<u4")
    h = np.full(len(starts), SEED, np.uint32)
    whole = lengths // 4
    for j in range(words.shape[1]):
        h = np.where(j < whole, _mix(h, words[:, j].astype(np.uint32)), h)
    for t in range(3):  # the trailing bytes, each a sign-extended word
        at = whole * 4 + t
        byte = matrix[np.arange(len(starts)), np.minimum(at, matrix.shape[1] - 1)]
        word = byte.view(np.int8).astype(np.int32).view(np.uint32)
        h = np.where(at < lengths, _mix(h, word), h)
    return _finish(h, lengths)
