"""A `files` snapshot read lazily: only the Parquet row groups a read needs.

A snapshot holds a partition's whole state sorted by key. Written for lazy reading
(`write_snapshot` with `group_rows`), it has small row groups whose key and expiry columns
carry min/max statistics; the footer (the row groups' statistics and offsets) is then the
snapshot's index. `SnapshotLayer` keeps that footer in memory, and:

- a read of K keys opens only the row groups whose key range holds one of them (one
  coalesced read of those groups' column chunks), then binary-searches their rows;
- counting the rows of K keys (a commit's bookkeeping) reads nothing for keys one of the last
  reads asked for (the transaction read them before changing them), else the key column of
  their groups;
- expiry reads nothing while no group's expiry minimum is below the time asked; the first
  time one is, it reads the key and expiry columns of the whole snapshot once and keeps an
  expiry index (each key's earliest expiry, ascending, with the keys: 16 bytes a key), so
  that every later expiry check is a binary search of that index, reading nothing (due
  keys a later version removed are still in it: `LayeredState` filters them out);
- `whole` reads the file at once (a new snapshot needs the whole state).

A snapshot written otherwise (one row group: every snapshot before lazy reading, and
snapshots of small states) or without statistics is not lazy: `open_snapshot` says so and
the caller loads it whole. Its memory (`nbytes`, what the process cache accounts) is the
footer's, plus the expiry index once built (the `files` store then accounts it again:
`FilesVersion._read_expiring`); reads change only the few key counts it keeps for `count`.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import cast

import numpy as np
import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from sessionize.state.layered import Layer
from sessionize.state.metrics import StateMetrics
from sessionize.state.rows import RowSpec

# Rows per row group of a snapshot written for lazy reading. A 10k-event batch touches
# about 600 keys of a 625k-key partition, spread uniformly: with G groups it opens about
# G * (1 - exp(-600 / G)) of them, so groups must be far more than the keys touched for a
# read to skip most of the file; each group costs about 1 kB of footer (in memory) and
# some file size. Measured in docs/scaling.md.
GROUP_ROWS = 256
RECENT_READS = 4  # the reads whose row counts a SnapshotLayer keeps (see `count`)


def write_snapshot(
    table: pa.Table, spec: RowSpec, compression: str, group_rows: int | None = None
) -> pa.Buffer:
    """A snapshot file of `table` (sorted by key): one row group, or groups of `group_rows`
    rows with statistics on the key and expiry columns (readable lazily). Small groups are
    written without dictionaries and other columns' statistics: in a group of a hundred
    rows a dictionary costs more than it saves, and every statistic is footer to hold."""
    sink = pa.BufferOutputStream()
    if group_rows:
        pq.write_table(
            table,
            sink,
            compression=compression,
            row_group_size=group_rows,
            write_statistics=[spec.key, spec.expiry],
            use_dictionary=False,
        )
    else:
        pq.write_table(table, sink, compression=compression)
    return sink.getvalue()


def _stat(md: pq.FileMetaData, column: int) -> tuple[np.ndarray, np.ndarray] | None:
    """(min, max) per row group of an int64 / timestamp column, or None without them."""
    lows, highs = [], []
    for g in range(md.num_row_groups):
        stats = md.row_group(g).column(column).statistics
        if stats is None or not stats.has_min_max:
            return None
        lows.append(stats.min_raw)
        highs.append(stats.max_raw)
    return np.array(lows, np.int64), np.array(highs, np.int64)


@dataclass(frozen=True)
class SnapshotLayer:
    """A snapshot file as a lazy `layered.BaseLayer` (see the module docstring)."""

    spec: RowSpec
    fs: pafs.FileSystem
    path: str
    footer: bytes  # the file's serialized footer, parsed for each read (see `_metadata`)
    num_rows: int
    key_min: np.ndarray  # per row group, ascending (the file is sorted by key)
    key_max: np.ndarray
    exp_min: np.ndarray  # per row group: its earliest expiry
    group_bytes: np.ndarray  # per row group: compressed bytes of each column (groups x columns)
    state_nbytes: int  # the rows' in-memory bytes, as recorded when the snapshot was written
    # The keys of the last few reads and their row counts, so that a commit's count of the
    # keys its transaction read costs no second read (data, not state: the file is immutable)
    _recent: list[tuple[np.ndarray, np.ndarray]] = field(default_factory=list, compare=False)
    # The expiry index, once an expiry check found a due group: [(expiries, keys)], each
    # key once with its earliest expiry, ascending (built once: `_expiry_index`)
    _expiry: list[tuple[np.ndarray, np.ndarray]] = field(default_factory=list, compare=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, compare=False)
    _building: threading.Lock = field(default_factory=threading.Lock, compare=False)

    @property
    def rows(self) -> int:
        return self.num_rows

    @property
    def data_nbytes(self) -> int:
        return self.state_nbytes

    @property
    def nbytes(self) -> int:
        with self._lock:
            index = self._expiry[0] if self._expiry else ()
        arrays = (self.key_min, self.key_max, self.exp_min, self.group_bytes, *index)
        return len(self.footer) + sum(int(a.nbytes) for a in arrays)

    def _metadata(self) -> pq.FileMetaData:
        """The footer parsed (pyarrow reads row groups only through it). Kept serialized:
        parsed it takes about six times its size, and a worker holds the footers of
        every partition it meets (parsing one of 2,400 row groups takes about 15 ms)."""
        return pq.read_metadata(pa.BufferReader(self.footer))

    # ----- reads ------------------------------------------------------------------------

    def _groups_of(self, keys: np.ndarray) -> np.ndarray:
        """The row groups whose key range holds one of `keys` (sorted). A key's rows may
        span neighbouring groups (their ranges then share that key)."""
        first = np.searchsorted(self.key_max, keys, "left")  # the first group it can be in
        stop = np.searchsorted(self.key_min, keys, "right")  # ... and past the last
        counts = np.maximum(stop - first, 0)
        if not counts.sum():
            return np.array([], np.int64)
        offsets = np.cumsum(counts) - counts
        groups = np.arange(int(counts.sum())) + np.repeat(first - offsets, counts)
        return cast(np.ndarray, np.unique(groups))

    def _read(
        self, groups: np.ndarray, columns: list[str] | None, io: StateMetrics | None
    ) -> pa.Table:
        names = self.spec.schema.names if columns is None else columns
        if not len(groups):
            return self.spec.schema.empty_table().select(names)
        with self.fs.open_input_file(self.path) as f:  # OSError: the caller words it
            reader = pq.ParquetFile(f, metadata=self._metadata(), pre_buffer=True)
            table = reader.read_row_groups([int(g) for g in groups], columns=names)
        if io is not None:
            picked = [self.spec.schema.get_field_index(n) for n in names]
            io.round_trips += 1
            io.bytes_read += int(self.group_bytes[np.ix_(groups, picked)].sum())
            io.rows_loaded += table.num_rows
            io.extra["row_groups_read"] = io.extra.get("row_groups_read", 0) + len(groups)
        schema = self.spec.schema
        return table.cast(pa.schema([schema.field(n) for n in names]))

    def _keys(self, table: pa.Table) -> np.ndarray:
        column = table.column(self.spec.key).combine_chunks()
        return cast(np.ndarray, column.to_numpy(zero_copy_only=False))

    def take(self, keys: np.ndarray, io: StateMetrics | None = None) -> pa.Table:
        table = self._read(self._groups_of(keys), None, io).combine_chunks()
        held = self._keys(table)  # sorted: the groups are, and come in order
        lo = np.searchsorted(held, keys, "left")
        hi = np.searchsorted(held, keys, "right")
        counts = hi - lo
        with self._lock:
            self._recent[:] = [*self._recent[-(RECENT_READS - 1) :], (keys, counts)]
        if not counts.sum():
            return table.slice(0, 0)
        offsets = np.cumsum(counts) - counts
        rows = np.arange(int(counts.sum()), dtype=np.int64) + np.repeat(lo - offsets, counts)
        return table.take(pa.array(rows))

    def count(self, keys: np.ndarray, io: StateMetrics | None = None) -> tuple[int, int]:
        found = np.full(len(keys), -1, np.int64)
        with self._lock:
            recent = list(self._recent)
        for seen, counts in recent:  # keys a recent read asked for
            pos = np.minimum(np.searchsorted(seen, keys), len(seen) - 1)
            hit = seen[pos] == keys
            found[hit] = counts[pos[hit]]
        rest = keys[found < 0]
        if len(rest):  # the others: their row groups' key column
            held = self._keys(self._read(self._groups_of(rest), [self.spec.key], io))
            lo, hi = np.searchsorted(held, rest, "left"), np.searchsorted(held, rest, "right")
            found[found < 0] = hi - lo
        return int(found.sum()), int(np.count_nonzero(found))

    def expiring(self, upto_us: int, io: StateMetrics | None = None) -> np.ndarray:
        if not bool(np.any(self.exp_min < upto_us)):  # nothing due: read nothing
            return np.array([], np.int64)
        expiries, keys = self._expiry_index(io)
        return keys[: np.searchsorted(expiries, upto_us, "left")]

    def _expiry_index(self, io: StateMetrics | None) -> tuple[np.ndarray, np.ndarray]:
        """(earliest expiry of each key, ascending; the keys in that order), read from the
        whole snapshot's key and expiry columns the first time (one thread reads, others
        wait for it; a failed read leaves it to the next call)."""
        with self._building:
            with self._lock:
                if self._expiry:
                    return self._expiry[0]
            groups = np.arange(len(self.key_min))
            table = self._read(groups, [self.spec.key, self.spec.expiry], io)
            keys = self._keys(table)  # sorted: the groups are, and come in order
            expiry = table.column(self.spec.expiry).combine_chunks().cast(pa.int64())
            expiries = cast(np.ndarray, expiry.to_numpy(zero_copy_only=False))
            if len(keys):
                starts = np.flatnonzero(np.r_[True, keys[1:] != keys[:-1]])
                expiries, keys = np.minimum.reduceat(expiries, starts), keys[starts]
            order = np.argsort(expiries, kind="stable")
            index = (np.ascontiguousarray(expiries[order]), np.ascontiguousarray(keys[order]))
            with self._lock:
                self._expiry.append(index)
            return index

    def whole(self, io: StateMetrics | None = None) -> Layer:
        groups = np.arange(len(self.key_min))
        return Layer.of(self._read(groups, None, io), self.spec)


def open_snapshot(
    spec: RowSpec,
    fs: pafs.FileSystem,
    path: str,
    state_nbytes: int,
    footer: bytes | None = None,
    io: StateMetrics | None = None,
) -> SnapshotLayer | None:
    """The snapshot at `path` as a lazy layer (reading its footer, unless `footer`, the
    file's bytes or a tail of them holding it, is given), or None if it cannot be read
    lazily (one row group, no statistics, another schema). Raises OSError
    (FileNotFoundError if it is gone) where the storage fails."""
    if footer is None:
        with fs.open_input_file(path) as f:  # OSError: the caller words it
            size = f.size()
            tail = f.read_at(min(size, 64 * 1024), max(size - 64 * 1024, 0))
            footer = _footer(tail)
            if footer is None:  # larger than 64 kB: read it exactly
                footer = f.read_at(_footer_size(tail) + 8, size - _footer_size(tail) - 8)
        if io is not None:
            io.round_trips += 1 + (len(footer) + 8 > 64 * 1024)
            io.bytes_read += min(size, 64 * 1024) + (len(footer) if len(footer) > 64 * 1024 else 0)
    else:
        footer = _footer(footer)
        if footer is None:
            raise ValueError("the bytes given end with a part of their footer only")
    metadata = pq.read_metadata(pa.BufferReader(b"PAR1" + footer))
    if metadata.num_row_groups < 2 or metadata.schema.names != spec.schema.names:
        return None
    names = spec.schema.names
    keys = _stat(metadata, names.index(spec.key))
    expiry = _stat(metadata, names.index(spec.expiry))
    if keys is None or expiry is None or bool(np.any(keys[0][1:] < keys[1][:-1])):
        return None
    sizes = np.array(
        [
            [metadata.row_group(g).column(c).total_compressed_size for c in range(len(names))]
            for g in range(metadata.num_row_groups)
        ],
        np.int64,
    )
    rows = int(metadata.num_rows)
    return SnapshotLayer(
        spec, fs, path, footer, rows, keys[0], keys[1], expiry[0], sizes, state_nbytes
    )


def _footer_size(tail: bytes) -> int:
    if len(tail) < 8 or tail[-4:] != b"PAR1":
        raise OSError("not a Parquet file (no footer)")
    return int.from_bytes(tail[-8:-4], "little")


def _footer(tail: bytes) -> bytes | None:
    """The footer (with its length and magic) at the end of `tail`, or None if `tail` does
    not hold all of it."""
    size = _footer_size(tail)
    return bytes(tail[-(size + 8) :]) if size + 8 <= len(tail) else None
