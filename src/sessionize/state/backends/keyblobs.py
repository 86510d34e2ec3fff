"""State rows <-> one binary value per key, for the remote backends, without a Python call
per key.

PostgreSQL, Redis and DynamoDB store a key's rows as one value (a `bytea` row, a hash field,
an item attribute), so that reading a key is reading one value and replacing a key is
writing one. Encoding and decoding work on all keys of a batch at once with Arrow kernels
and numpy: the sorted rows of every column are already contiguous per key, so a key's blob
is the element-wise concatenation of zero-copy slices (`binary_join_element_wise`), and
decoding selects the same slices back out of all blobs with one `filter` per section.

Blob layout (little-endian), for one key with n rows::

    header   int32 magic "SZB1" | uint32 fingerprint of the RowSpec | int32 n
             | uint32 null-mask words (bit c: column c has a validity section)
             | int32 data length of each variable-width column
    sections for every column but the key, in schema order:
             [n validity bytes, 0/1, only if the bit is set]
             fixed width w:  n * w value bytes        bool: n bytes 0/1
             string/binary:  n int32 lengths, then the bytes          null type: nothing

The key itself is not stored (the storage key is the key). The fingerprint catches a blob
written with another RowSpec. Types outside these (lists, structs, dictionaries, ...) fall
back to one Arrow IPC stream per key ("SZI1" + fingerprint + stream), built in a Python
loop: correct for any schema, but slower; `RowCodec.vectorized` tells which path a spec takes.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from sessionize.errors import StateError
from sessionize.state.rows import RowSpec

MAGIC = int.from_bytes(b"SZB1", "little")
MAGIC_IPC = b"SZI1"
_CHUNK_BYTES = 256 * 1024 * 1024  # keeps int32 offsets of binary arrays far from overflow
_EMPTY = pa.py_buffer(b"")


def fingerprint(spec: RowSpec) -> int:
    text = "|".join([spec.key, spec.expiry, *(f"{f.name}:{f.type}" for f in spec.schema)])
    return zlib.crc32(text.encode())


def _kind(t: pa.DataType) -> tuple[str, int]:
    """(kind, byte width) of a column type: fixed, bool, var, null, or other (IPC)."""
    if pa.types.is_boolean(t):
        return "bool", 1
    if pa.types.is_null(t):
        return "null", 0
    if pa.types.is_string(t) or pa.types.is_binary(t):
        return "var", 0
    if pa.types.is_large_string(t) or pa.types.is_large_binary(t):
        return "var", 0
    if pa.types.is_dictionary(t) or pa.types.is_nested(t):
        return "other", 0
    try:
        width = t.bit_width
    except ValueError:
        return "other", 0
    if width % 8 or width == 0:
        return "other", 0
    return "fixed", width // 8


@dataclass
class Encoded:
    """The blobs of many keys: keys ascending and unique, with their earliest expiry (us)."""

    keys: np.ndarray  # int64
    expiry: np.ndarray  # int64, microseconds since the epoch
    rows: np.ndarray  # int64, rows per key
    blobs: pa.ChunkedArray  # binary, one per key

    @property
    def nbytes(self) -> int:
        return int(sum(_data_size(c) for c in self.blobs.chunks))

    def blob_list(self) -> list[bytes]:
        blobs: list[bytes] = self.blobs.to_pylist()
        return blobs


class RowCodec:
    """Encodes and decodes the rows of a RowSpec, many keys at once."""

    def __init__(self, spec: RowSpec):
        self.spec = spec
        self.fingerprint = fingerprint(spec)
        self.columns = [f for f in spec.schema if f.name != spec.key]
        self.kinds = [_kind(f.type) for f in self.columns]
        self.vectorized = all(k != "other" for k, _ in self.kinds)
        self.null_words = (len(self.columns) + 31) // 32
        self.var_columns = [i for i, (k, _) in enumerate(self.kinds) if k == "var"]
        self.header_bytes = 4 * (3 + self.null_words + len(self.var_columns))

    # ----- encode ----------------------------------------------------------------------

    def encode(self, table: pa.Table) -> Encoded:
        """The blobs of the keys of `table` (the spec's schema); a key's rows keep their
        order."""
        spec = self.spec
        keys = table.column(spec.key).to_numpy()
        order = np.argsort(keys, kind="stable")
        table = table.take(pa.array(order)).combine_chunks() if len(keys) else table
        keys = keys[order]
        starts = _run_starts(keys)
        ukeys = keys[starts]
        counts = np.diff(np.append(starts, len(keys))).astype(np.int64)
        expiry = table.column(spec.expiry).cast(pa.int64()).to_numpy()
        min_expiry = np.minimum.reduceat(expiry, starts) if len(keys) else expiry
        if not len(keys):
            empty = pa.chunked_array([], pa.binary())
            return Encoded(ukeys, min_expiry, counts, empty)
        chunks = []
        for lo, hi in _chunk_bounds(table, starts, counts):
            part = table.slice(int(starts[lo]), int(counts[lo:hi].sum()))
            s, c = starts[lo:hi] - starts[lo], counts[lo:hi]
            encode = self._encode_chunk if self.vectorized else self._encode_ipc
            chunks.append(encode(part, s, c))
        return Encoded(ukeys, min_expiry, counts, pa.chunked_array(chunks, pa.binary()))

    def _encode_chunk(self, table: pa.Table, starts: np.ndarray, counts: np.ndarray) -> pa.Array:
        nkeys = len(starts)
        ends = starts + counts
        header = np.zeros((nkeys, self.header_bytes // 4), dtype="<u4")
        header[:, 0] = MAGIC
        header[:, 1] = self.fingerprint
        header[:, 2] = counts
        segments = []
        var_slot = 3 + self.null_words
        for c, (field, (kind, width)) in enumerate(zip(self.columns, self.kinds, strict=True)):
            if kind == "null":
                continue
            arr = table.column(field.name).combine_chunks()
            if arr.null_count:
                valid = np.asarray(arr.is_valid(), dtype=np.uint8)
                has_null = np.add.reduceat(1 - valid, starts) > 0
                header[:, 3 + c // 32] |= has_null.astype("<u4") << np.uint32(c % 32)
                lens = np.where(has_null, counts, 0)
                segments.append(_segment(valid[np.repeat(has_null, counts)], _offsets(lens)))
            if kind == "fixed":
                data = _values(arr, width)
                segments.append(_segment(data, np.append(starts, ends[-1]) * width))
            elif kind == "bool":
                data = np.asarray(arr.fill_null(False), dtype=np.uint8)
                segments.append(_segment(data, np.append(starts, ends[-1])))
            else:  # var
                offsets = _var_offsets(arr)
                lengths = np.diff(offsets).astype("<i4").view(np.uint8)
                segments.append(_segment(lengths, np.append(starts, ends[-1]) * 4))
                data = _var_data(arr)
                bounds = offsets[np.append(starts, ends[-1])]
                segments.append(_segment(data, bounds - bounds[0], base=int(bounds[0])))
                header[:, var_slot] = np.diff(bounds)
                var_slot += 1
        head = _fixed_segments(header.view(np.uint8).reshape(-1), self.header_bytes, nkeys)
        return pc.binary_join_element_wise(head, *segments, pa.scalar(b"", pa.binary()))

    def _encode_ipc(self, table: pa.Table, starts: np.ndarray, counts: np.ndarray) -> pa.Array:
        prefix = MAGIC_IPC + self.fingerprint.to_bytes(4, "little")
        stored = table.drop_columns([self.spec.key])
        out = []
        for s, n in zip(starts.tolist(), counts.tolist(), strict=True):
            sink = pa.BufferOutputStream()
            with pa.ipc.new_stream(sink, stored.schema) as writer:
                writer.write_table(stored.slice(s, n))
            out.append(prefix + sink.getvalue().to_pybytes())
        return pa.array(out, pa.binary())

    # ----- decode ----------------------------------------------------------------------

    def decode(self, keys: np.ndarray, blobs: pa.Array | pa.ChunkedArray | list[Any]) -> pa.Table:
        """The rows of `keys` from their blobs (aligned, no nulls), grouped by key in that
        order. StateError if a blob is not one of this spec's."""
        keys = np.asarray(keys, dtype=np.int64)
        if isinstance(blobs, list):
            blobs = pa.array(blobs, pa.binary())
        chunks = blobs.chunks if isinstance(blobs, pa.ChunkedArray) else [blobs]
        parts, at = [], 0
        for chunk in chunks:
            chunk = chunk.cast(pa.binary()) if chunk.type != pa.binary() else chunk
            n = len(chunk)
            if n:
                decode = self._decode_chunk if self.vectorized else self._decode_ipc
                parts.append(decode(keys[at : at + n], chunk))
            at += n
        if at != len(keys):
            raise StateError(f"internal: {len(keys)} keys but {at} state blobs")
        if not parts:
            return self.spec.empty()
        return pa.concat_tables(parts) if len(parts) > 1 else parts[0]

    def _decode_chunk(self, keys: np.ndarray, blobs: pa.Array) -> pa.Table:
        nkeys = len(blobs)
        offsets = _var_offsets(blobs)
        data = _var_data(blobs)
        sizes = np.diff(offsets)
        hb = self.header_bytes
        if (sizes < hb).any():
            raise StateError("a stored state value is truncated (shorter than its header)")
        # The headers: the first hb bytes of every blob, then the rest.
        split = np.empty(2 * nkeys + 1, dtype=np.int64)
        split[0:-1:2] = offsets[:-1]
        split[1::2] = offsets[:-1] + hb
        split[-1] = offsets[-1]
        halves = _segment(data, split - split[0], base=int(split[0]))
        head = _flat(halves.filter(_every(2 * nkeys, 2, 0)))
        header = head.view("<u4").reshape(nkeys, hb // 4).astype(np.int64)
        if (header[:, 0] != MAGIC).any() or (header[:, 1] != self.fingerprint).any():
            raise StateError(
                "stored state values do not match the state row schema"
                " (written with another RowSpec, or not written by sessionize)"
            )
        n = header[:, 2]
        # Section sizes per key, in stored order, then one binary array over all blobs
        # whose elements are [header, section, section, ...] of every blob in turn.
        sizes_by_section = [np.full(nkeys, hb, dtype=np.int64)]
        layout = []  # (column index, section name)
        var_slot = 3 + self.null_words
        for c, (kind, width) in enumerate(self.kinds):
            if kind == "null":
                continue
            has_null = (header[:, 3 + c // 32] >> (c % 32)) & 1
            sizes_by_section.append(n * has_null)
            layout.append((c, "validity"))
            if kind == "fixed":
                sizes_by_section.append(n * width)
                layout.append((c, "values"))
            elif kind == "bool":
                sizes_by_section.append(n)
                layout.append((c, "values"))
            else:
                sizes_by_section.append(n * 4)
                layout.append((c, "lengths"))
                sizes_by_section.append(header[:, var_slot])
                layout.append((c, "data"))
                var_slot += 1
        matrix = np.stack(sizes_by_section, axis=1)
        if (matrix.sum(axis=1) != sizes).any():
            raise StateError("a stored state value is corrupt (its sections do not add up)")
        nsec = matrix.shape[1]
        bounds = np.empty(nkeys * nsec + 1, dtype=np.int64)
        bounds[0] = 0
        np.cumsum(matrix.reshape(-1), out=bounds[1:])
        pieces = _segment(data, bounds, base=int(offsets[0]))
        sections = {}
        for i, name in enumerate(layout):
            sections[name] = _flat(pieces.filter(_every(nkeys * nsec, nsec, i + 1)))

        total = int(n.sum())
        row_key_has = {}
        columns = {self.spec.key: pa.array(np.repeat(keys, n), pa.int64())}
        for c, (field, (kind, _)) in enumerate(zip(self.columns, self.kinds, strict=True)):
            if kind == "null":
                columns[field.name] = pa.nulls(total, field.type)
                continue
            validity = None
            vbytes = sections[(c, "validity")]
            if len(vbytes):
                if c not in row_key_has:
                    has_null = (header[:, 3 + c // 32] >> (c % 32)) & 1
                    row_key_has[c] = np.repeat(has_null.astype(bool), n)
                valid = np.ones(total, dtype=bool)
                valid[row_key_has[c]] = vbytes.astype(bool)
                validity = pa.array(valid).buffers()[1]
            nulls = -1 if validity is not None else 0
            if kind == "fixed":
                values = pa.py_buffer(sections[(c, "values")])
                arr = pa.Array.from_buffers(field.type, total, [validity, values], nulls)
            elif kind == "bool":
                bits = pa.array(sections[(c, "values")].astype(bool)).buffers()[1]
                arr = pa.Array.from_buffers(field.type, total, [validity, bits], nulls)
            else:
                lengths = sections[(c, "lengths")].view("<i4")
                large = pa.types.is_large_string(field.type) or pa.types.is_large_binary(field.type)
                offs = np.zeros(total + 1, dtype=np.int64 if large else np.int32)
                np.cumsum(lengths, out=offs[1:])
                arr = pa.Array.from_buffers(
                    field.type,
                    total,
                    [validity, pa.py_buffer(offs), pa.py_buffer(sections[(c, "data")])],
                    nulls,
                )
                if pa.types.is_string(field.type) or pa.types.is_large_string(field.type):
                    arr.validate(full=True)
            columns[field.name] = arr
        return pa.table([columns[f.name] for f in self.spec.schema], schema=self.spec.schema)

    def _decode_ipc(self, keys: np.ndarray, blobs: pa.Array) -> pa.Table:
        prefix = MAGIC_IPC + self.fingerprint.to_bytes(4, "little")
        parts = []
        for key, blob in zip(keys.tolist(), blobs.to_pylist(), strict=True):
            if not blob.startswith(prefix):
                raise StateError("stored state values do not match the state row schema")
            t = pa.ipc.open_stream(blob[len(prefix) :]).read_all()
            keycol = pa.array(np.full(t.num_rows, key, dtype=np.int64))
            t = t.add_column(self.spec.schema.get_field_index(self.spec.key), self.spec.key, keycol)
            parts.append(t.cast(self.spec.schema))
        return pa.concat_tables(parts) if parts else self.spec.empty()


def split_prefix(values: pa.Array, width: int) -> tuple[np.ndarray, pa.Array]:
    """(the first `width` bytes of every element as an (n, width) uint8 array, the rest of
    every element as a binary array) of a binary array without nulls; one Arrow filter, no
    Python loop."""
    values = values.cast(pa.binary()) if values.type != pa.binary() else values
    n = len(values)
    offsets = _var_offsets(values)
    if (np.diff(offsets) < width).any():
        raise StateError(f"a stored state value is shorter than its {width}-byte prefix")
    split = np.empty(2 * n + 1, dtype=np.int64)
    split[0:-1:2] = offsets[:-1]
    split[1::2] = offsets[:-1] + width
    split[-1] = offsets[-1]
    halves = _segment(_var_data(values), split - split[0], base=int(split[0]))
    heads = _flat(halves.filter(_every(2 * n, 2, 0))).reshape(n, width)
    return heads, halves.filter(_every(2 * n, 2, 1))


# ----- helpers: zero-copy views and run boundaries -------------------------------------------


def _run_starts(sorted_keys: np.ndarray) -> np.ndarray:
    if not len(sorted_keys):
        return np.zeros(0, dtype=np.int64)
    change = np.flatnonzero(sorted_keys[1:] != sorted_keys[:-1]) + 1
    return np.concatenate([[0], change]).astype(np.int64)


def _offsets(lengths: np.ndarray) -> np.ndarray:
    out = np.zeros(len(lengths) + 1, dtype=np.int64)
    np.cumsum(lengths, out=out[1:])
    return out


def _segment(data: Any, offsets: np.ndarray, base: int = 0) -> pa.Array:
    """A binary array over `data[base:]` (numpy uint8 array or pa.Buffer) whose element i is
    bytes offsets[i]..offsets[i+1] (relative to base): no copy."""
    buf = data if isinstance(data, pa.Buffer) else pa.py_buffer(np.ascontiguousarray(data))
    if base:
        buf = buf.slice(base)
    offs = np.ascontiguousarray(offsets, dtype=np.int32)
    if len(offsets) and offsets[-1] >= 2**31:
        raise StateError("internal: a state blob chunk exceeds 2 GiB")
    return pa.Array.from_buffers(pa.binary(), len(offs) - 1, [None, pa.py_buffer(offs), buf])


def _fixed_segments(data: np.ndarray, width: int, n: int) -> pa.Array:
    return _segment(data, np.arange(n + 1, dtype=np.int64) * width)


def _values(arr: pa.Array, width: int) -> np.ndarray:
    buf = arr.buffers()[1]
    raw = np.frombuffer(buf, dtype=np.uint8) if buf is not None else np.zeros(0, np.uint8)
    return raw[arr.offset * width : (arr.offset + len(arr)) * width]


def _var_offsets(arr: pa.Array) -> np.ndarray:
    large = pa.types.is_large_string(arr.type) or pa.types.is_large_binary(arr.type)
    raw = np.frombuffer(arr.buffers()[1], dtype=np.int64 if large else np.int32)
    return raw[arr.offset : arr.offset + len(arr) + 1].astype(np.int64)


def _var_data(arr: pa.Array) -> pa.Buffer:
    buf = arr.buffers()[2]
    return buf if buf is not None else _EMPTY


def _data_size(arr: pa.Array) -> int:
    offs = _var_offsets(arr)
    return int(offs[-1] - offs[0]) if len(offs) else 0


def _every(n: int, step: int, first: int) -> pa.BooleanArray:
    mask = np.zeros(n, dtype=bool)
    mask[first::step] = True
    bits = np.packbits(mask, bitorder="little")
    return pa.Array.from_buffers(pa.bool_(), n, [None, pa.py_buffer(bits)], 0)


def _flat(arr: pa.Array) -> np.ndarray:
    """The concatenated bytes of a binary array's elements, as a numpy uint8 array."""
    offs = _var_offsets(arr)
    if not len(arr) or offs[-1] == offs[0]:
        return np.zeros(0, dtype=np.uint8)
    return np.frombuffer(_var_data(arr), dtype=np.uint8)[offs[0] : offs[-1]]


def _chunk_bounds(
    table: pa.Table, starts: np.ndarray, counts: np.ndarray
) -> Iterator[tuple[int, int]]:
    """Key ranges [lo, hi) whose rows take at most ~_CHUNK_BYTES in memory."""
    nkeys = len(starts)
    if table.nbytes <= _CHUNK_BYTES or nkeys <= 1:
        yield 0, nkeys
        return
    per_row = max(1, table.nbytes // max(1, table.num_rows))
    rows_per_chunk = max(1, _CHUNK_BYTES // per_row)
    cum = np.cumsum(counts)
    lo = 0
    while lo < nkeys:
        base = cum[lo - 1] if lo else 0
        hi = int(np.searchsorted(cum, base + rows_per_chunk, side="right"))
        hi = max(hi, lo + 1)
        yield lo, min(hi, nkeys)
        lo = hi
