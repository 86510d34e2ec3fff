"""Loading a `files` version from its chain of files (`files.py` walks and checks the chain).

The chain's first file is a snapshot (or the chain starts on the cached version); each
delta after it is applied in order. A snapshot of a state larger than the store's `lazy_mb`
that was written for lazy reading is not read: its footer is (`files_snapshot.py`), and the
deltas are layered over it without reading it (the live counts come from the commit record).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sessionize.errors import StateError
from sessionize.state import codec
from sessionize.state.backends.files_layout import CommitRecord
from sessionize.state.backends.files_snapshot import open_snapshot
from sessionize.state.base import version_error
from sessionize.state.layered import LayeredState
from sessionize.state.metrics import StateMetrics

if TYPE_CHECKING:
    from sessionize.state.backends.files import FilesBackend


def load_chain(
    store: FilesBackend,
    job: str,
    partition: int,
    record: CommitRecord,
    chain: list[CommitRecord],  # newest first, down to a snapshot or to `base`'s child
    base: LayeredState | None,  # the cached version the chain starts on, if any
    io: StateMetrics,
) -> LayeredState:
    """The state of `record` (its rows loaded counted in `io.rows_loaded`), unsettled."""
    directory = store._partition_dir(job, partition)
    state = base
    for rec in reversed(chain):

        def missing(rec: CommitRecord = rec) -> StateError:
            reason = f"file {rec.file} of version {rec.version} is missing"
            return version_error(job, partition, record.version, reason=reason)

        path = f"{directory}/{rec.file}"
        lazy = None
        if rec.kind == "snapshot" and store._lazy(rec.bytes):
            try:
                lazy = open_snapshot(store.spec, store._fs, path, rec.bytes, io=io)
            except FileNotFoundError:
                raise missing() from None
            except OSError as e:
                raise store._failed("read", path, e) from e
        if lazy is not None:
            state = LayeredState.lazy(lazy, rec.keys, store.spec)
            continue
        data = store._read(path, io)
        if data is None:
            raise missing()
        piece = codec.from_parquet(data)
        io.rows_loaded += piece.num_rows
        if rec.kind == "snapshot":
            state = LayeredState.of(piece, store.spec)
        else:
            assert state is not None  # a chain starts at a snapshot or the cached version
            decoded = codec.decode_delta(piece, store.spec)
            # over a lazy base the counts come from the record, reading nothing
            state = state.apply(*decoded, settle=False, counted=not state.is_lazy)
    assert state is not None
    return state.with_counts(record.rows, record.keys) if state.is_lazy else state
