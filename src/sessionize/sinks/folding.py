"""Compaction of a revising job's local Parquet outputs: revisions folded into the
compacted files (`--revise-within`, docs/concepts/revisions.md).

`sessions` and `session_revisions` are compacted together, and `page_views` and
`page_view_revisions`: the compacted `sessions` holds the current sessions of the batches
it covers (each id's latest row, under the batch of that row; retracted ids left out),
the compacted `page_views` their current page views, and `session_revisions` and
`page_view_revisions` an empty file each, their batches covered (`Manifest.folded`). The
docs' current-sessions query gives the same rows before and after, and `sessions` read
alone is the current sessions when no batch is left uncompacted.

The four manifests switch one at a time, in the order `sessions`, `page_views`,
`session_revisions`, `page_view_revisions`: after each switch the query still gives the
same rows (a folded row is the latest of its batch's rows, equal to the revision it came
from; a session's page views are taken from the output of its current row), and a fold
cut short is done again from there with the same result.

The rows a revision replaced are gone from the folded files, so the batches folded cannot
be removed any more: `check_unfolded` refuses a rewind or a reprocessing that would.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from sessionize import faults
from sessionize.base_schema import PAGE_VIEW_REVISIONS, RETRACTED, REVISION, SESSION_REVISIONS
from sessionize.errors import SinkError
from sessionize.sinks import compaction

# Each output and the revisions folded into it.
FOLDED = {"sessions": SESSION_REVISIONS, "page_views": PAGE_VIEW_REVISIONS}
_RANK = "_rank"  # a page view's batch, then its output: which of a session's rows are current
_SOURCE = "_from_revisions"


def has_revisions(fs: pafs.FileSystem, base: str) -> bool:
    """Whether the output holds `session_revisions` (a revising job's), compacted or not."""
    dirs, manifest = compaction.committed(fs, base, SESSION_REVISIONS)
    return bool(dirs) or manifest.generation > 0


def check_unfolded(fs: pafs.FileSystem, base: str, batch_id: int, where: str) -> None:
    """Refuse to remove batches >= `batch_id` when some of them were folded.

    Raises:
        SinkError: one line naming the earliest batch that can still be removed.
    """
    folded = compaction.read_manifest(fs, base, "sessions").folded
    if batch_id <= folded:
        raise SinkError(
            f"{where}: batches up to {folded} were compacted with their revisions folded in "
            "(only the current sessions are kept), so batches from "
            f"{batch_id} cannot be removed: go back to batch {folded} or later, or write "
            "the recomputed batches to a new output"
        )


def fold(
    fs: pafs.FileSystem, base: str, *, upto: int | None = None, target_mb: float = 128
) -> dict[str, dict[str, int]]:
    """Fold the revisions of the published batches <= `upto` (default: all) into the
    compacted `sessions` and `page_views`; {output: {"batches", "files_in", "files_out"}}.

    Args:
        fs: the output's filesystem (local).
        base: the output's root.
        upto: the last batch to fold.
        target_mb: about the size of a compacted file.

    Returns:
        What was done per output, as `compaction.compact` says it.

    Example:
        >>> fold(fs, "out")["sessions"]["batches"]  # doctest: +SKIP
        12
    """
    names = (*FOLDED, *FOLDED.values())
    for name in names:
        compaction.finish(fs, base, name)
    new = {n: [b for b in compaction.committed(fs, base, n)[0] if upto is None or b <= upto]
           for n in names}  # fmt: skip
    done = {n: {"batches": len(new[n]), "files_in": 0, "files_out": 0} for n in names}
    if not any(new.values()):
        return done
    last = max(b for batches in new.values() for b in batches)
    try:
        sessions = _rows(fs, base, "sessions", last, done)
        current = current_rows(sessions, _rows(fs, base, SESSION_REVISIONS, last, done))
        views = current_page_views(
            current,
            _rows(fs, base, "page_views", last, done),
            _rows(fs, base, PAGE_VIEW_REVISIONS, last, done),
        )
        target = int(target_mb * 1024 * 1024)
        for name, rows in (("sessions", current), ("page_views", views)):
            if rows is None:
                continue
            done[name]["files_out"] = _switch(fs, base, name, rows, last, target)
        for name in FOLDED.values():
            _switch(fs, base, name, None, last, target)
    finally:
        pa.default_memory_pool().release_unused()
    return done


def current_rows(sessions: pa.Table | None, revisions: pa.Table | None) -> pa.Table | None:
    """Per `session_id`, the row of the greatest (`batch_id`, `revision`) over `sessions`
    (revision 0) and `revisions`, retractions left out; `sessions`' columns, and
    `_from_revisions` saying where the row came from.

    Example:
        >>> s = pa.table({"session_id": ["a", "b"], "batch_id": [1, 1]})
        >>> r = pa.table({"session_id": ["a", "b"], "revision": [1, 1],
        ...               "retracted": [False, True], "batch_id": [2, 2]})
        >>> current_rows(s, r).to_pylist()
        [{'session_id': 'a', 'batch_id': 2, '_from_revisions': True}]
    """
    if sessions is None:
        return None
    columns = [c for c in sessions.column_names if c != "_day"]
    first = sessions.select(columns)
    first = first.append_column(REVISION, pa.array(np.zeros(first.num_rows, np.int64)))
    first = first.append_column(RETRACTED, pa.array(np.zeros(first.num_rows, bool)))
    first = first.append_column(_SOURCE, pa.array(np.zeros(first.num_rows, bool)))
    tables = [first]
    if revisions is not None and revisions.num_rows:
        later = revisions.select([*columns, REVISION, RETRACTED])
        tables.append(later.append_column(_SOURCE, pa.array(np.ones(later.num_rows, bool))))
    rows = pa.concat_tables(tables, promote_options="permissive")
    rows = rows.sort_by([("session_id", "ascending"), ("batch_id", "descending"),
                         (REVISION, "descending")])  # fmt: skip
    ids = rows["session_id"].to_numpy(zero_copy_only=False)
    latest = np.ones(len(ids), bool)
    latest[1:] = ids[1:] != ids[:-1]
    rows = rows.filter(pa.array(latest))
    rows = rows.filter(pc.invert(rows[RETRACTED].fill_null(False)))
    return rows.select([*columns, _SOURCE])


def current_page_views(
    current: pa.Table | None, views: pa.Table | None, revised: pa.Table | None
) -> pa.Table | None:
    """The page views of the `current` sessions: those of the latest batch that wrote
    page views for a session, from `page_view_revisions` over `page_views` in one batch (a
    fold cut short leaves a folded copy of a revision's page views in `page_views`). That
    is the batch of its current row unless the users step alone revised it since
    (renumbered: no new page views, docs/design.md "Revisions")."""
    if current is None or views is None:
        return None
    parts = []
    for rank, rows in enumerate((views, revised)):  # a revision's outranks a first write's
        if rows is not None:
            rows = rows.select(views.column_names)
            parts.append(rows.append_column(_RANK, pc.add(pc.multiply(rows["batch_id"], 2), rank)))
    rows = pa.concat_tables(parts, promote_options="permissive")
    rows = rows.filter(pc.is_in(rows["session_id"], value_set=current["session_id"]))
    if not rows.num_rows:
        return rows.drop_columns([_RANK])
    top = rows.group_by("session_id", use_threads=False).aggregate([(_RANK, "max")])
    top = top.rename_columns(["session_id", _RANK])
    keep = pc.is_in(_pair(rows, _RANK), value_set=_pair(top, _RANK))
    return rows.filter(keep).drop_columns([_RANK])


def _pair(rows: pa.Table, column: str = "batch_id") -> pa.Array:
    """(`session_id`, `column`) as one text per row, to match rows by both."""
    batch = pc.cast(rows[column], pa.string())
    return pc.binary_join_element_wise(rows["session_id"], batch, "/").combine_chunks()


def _rows(
    fs: pafs.FileSystem, base: str, name: str, last: int, done: dict[str, dict[str, int]]
) -> pa.Table | None:
    """Output `name`'s committed rows of batches <= `last`, with `batch_id`; `_day` (a
    compacted file's group) for an output without partition columns."""
    files = compaction.committed_files(fs, base, name)
    data = compaction.committed_dataset(fs, base, name)
    if data is None:
        return None
    done[name]["files_in"] = len(files["batches"]) + len(files["compacted"])
    table = data.to_table(filter=ds.field("batch_id") <= last)
    if not compaction.OUTPUT_PARTITIONS.get(name):
        day = compaction._day(None)
        table = table.append_column("_day", pa.array([day] * table.num_rows, pa.string()))
    return table


def _switch(
    fs: pafs.FileSystem, base: str, name: str, rows: pa.Table | None, last: int, target: int
) -> int:
    """A new generation of `name` holding `rows` (None: an empty file) and covering every
    batch up to `last`; the files it replaces and the batch directories it covers go.
    Returns the files written."""
    manifest = compaction.read_manifest(fs, base, name)
    generation = manifest.generation + 1
    where = compaction.compacted_dir(base, name)
    if rows is not None and rows.num_rows:
        rows = rows.drop_columns([c for c in (_SOURCE,) if c in rows.column_names])
        per_row = max(1, rows.nbytes // rows.num_rows)
        written = compaction._write_groups(
            fs, where, name, rows, generation, max(1, target // per_row)
        )
    else:
        empty = _empty_file(fs, base, name, generation)
        written = {} if empty is None else {empty: []}
    faults.pause_point(f"folded-files-{name}", generation)
    compaction._write_manifest(fs, base, name, compaction.Manifest(generation, written, last))
    compaction.finish(fs, base, name)
    compaction.refresh_view(fs, base, name)
    return len(written)


def _empty_file(fs: pafs.FileSystem, base: str, name: str, generation: int) -> str | None:
    """A file of no rows with the output's columns, so that readers of the folded
    revisions find a file (DuckDB's and Spark's readers refuse a folder of none); None
    for an output never written."""
    data = compaction.committed_dataset(fs, base, name)
    if data is None:
        return None
    schema = data.schema
    fs.create_dir(compaction.compacted_dir(base, name), recursive=True)
    rel = f"part-{compaction._day(None)}-{generation:08d}-0000-empty.parquet"
    pq.write_table(schema.empty_table(), f"{compaction.compacted_dir(base, name)}/{rel}",
                   filesystem=fs)  # fmt: skip
    return rel
