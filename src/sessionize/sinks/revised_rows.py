"""The rows a revising batch folds into table sinks that commit table by table (Delta,
Iceberg): which ids it touches, what `sessions` and `page_views` get, and how a superseded
row is set aside (docs/design.md, "Revisions", "Outputs"). Pure pyarrow: each sink reads
and commits in its own format (`delta_revised.py`, `iceberg_revised.py`).
"""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc

from sessionize.base_schema import PAGE_VIEW_REVISIONS, RETRACTED, REVISION, SESSION_REVISIONS
from sessionize.sinks.outputs import Outputs

SESSIONS, PAGE_VIEWS = "sessions", "page_views"
REVISED_BATCH, SUPERSEDED_BATCH = "revised_batch", "superseded_batch"
REVISION_OUTPUTS = (SESSION_REVISIONS, PAGE_VIEW_REVISIONS)  # staged, never tables
KEPT = (  # each kept table, its side table, and the column of the batch that wrote a row
    (SESSIONS, "sessions_superseded", REVISED_BATCH),
    (PAGE_VIEWS, "page_views_superseded", "batch_id"),
)
FOLDED = (SESSIONS, PAGE_VIEWS, *REVISION_OUTPUTS)  # published by the revising module
SIDE_TABLES = tuple(side for _, side, _ in KEPT)
KEY = ("session_id",)


def revising(outputs: Outputs) -> bool:
    """Whether the job writes revisions (`--revise-within`): then the revising module
    of the sink publishes `FOLDED`."""
    return SESSION_REVISIONS in outputs


@dataclass(frozen=True)
class Touched:
    """The ids a batch writes: `every` one (first writes, revisions, retractions) and the
    `replaced` ones (revised or retracted), the only ones an earlier batch can have written
    (a first write's id is new, or this batch's own on a replay)."""

    every: pa.Table  # one column, session_id
    replaced: pa.Table
    # For `page_views`: the ids with page views in the batch and the retracted ones (a
    # session revised by the users step alone, renumbered, keeps its page views).
    views_every: pa.Table
    views_replaced: pa.Table

    def of(self, table: str) -> tuple[pa.Table, pa.Table]:
        """(every, replaced) for the kept table `table`."""
        if table == PAGE_VIEWS:
            return self.views_every, self.views_replaced
        return self.every, self.replaced


def touched(staged: dict[str, pa.Table]) -> Touched:
    """The ids of the batch's staged outputs (`read_staged`'s, by output name)."""
    first, revised = staged[SESSIONS], staged[SESSION_REVISIONS]
    ids = pa.concat_arrays(
        [first["session_id"].combine_chunks(), revised["session_id"].combine_chunks()]
    )
    replaced = pc.unique(revised["session_id"].combine_chunks())
    views = views_replaced(revised, staged[PAGE_VIEW_REVISIONS])
    every = pc.unique(pa.concat_arrays([staged[PAGE_VIEWS]["session_id"].combine_chunks(), views]))

    def table(ids: pa.Array) -> pa.Table:
        return pa.table({"session_id": ids})

    return Touched(table(pc.unique(ids)), table(replaced), table(every), table(views))


def views_replaced(revised: pa.Table, rewritten: pa.Table | None) -> pa.Array:
    """The ids of `revised` (session_revisions) whose page views the batch replaces: those
    it writes page views for (`rewritten`, page_view_revisions), retracts, or revises into
    a session without page views. A session the users step alone revised (renumbered) has
    none in the batch and keeps its own (docs/design.md, "Revisions", "With identity")."""
    gone = revised.filter(revised[RETRACTED].fill_null(False))["session_id"].combine_chunks()
    parts = [gone, emptied(revised)]
    if rewritten is not None:
        parts.append(rewritten["session_id"].combine_chunks().cast(gone.type))
    return pc.unique(pa.concat_arrays(parts))


def emptied(revised: pa.Table) -> pa.Array:
    """The ids of `revised` (session_revisions) revised into a session without page views
    (`page_view_count` 0): their old page views go, though the batch writes none for them
    (a late close event or a smaller copy of an event can leave a revision without any)."""
    live = revised.filter(pc.invert(revised[RETRACTED].fill_null(False)))
    if "page_view_count" not in live.schema.names:
        return live["session_id"].combine_chunks().slice(0, 0)
    none = pc.equal(live["page_view_count"], 0).fill_null(False)
    return live.filter(none)["session_id"].combine_chunks()


def sessions_rows(
    staged: dict[str, pa.Table], sessions: pa.Schema, batch_id: int, first_batches: dict
) -> pa.Table:
    """`sessions`' new rows: the first writes (`revision` 0) and the revisions (a retracted
    id gets none), each with `batch_id` (the batch that first wrote the id: `first_batches`
    for a revised one, else this batch), `revision` and `revised_batch` (this batch)."""
    first, revised = staged[SESSIONS], staged[SESSION_REVISIONS]
    kept = revised.filter(pc.invert(revised[RETRACTED]))
    firsts = _bookkept(first, sessions, 0, batch_id, {})
    revisions = _bookkept(kept, sessions, kept[REVISION], batch_id, first_batches)
    return pa.concat_tables([firsts, revisions])


def page_view_rows(staged: dict[str, pa.Table]) -> pa.Table:
    """`page_views`' new rows: those of the first writes and of the revised sessions."""
    return pa.concat_tables([staged[PAGE_VIEWS], staged[PAGE_VIEW_REVISIONS]])


def set_aside(rows: pa.Table, batch_id: int) -> pa.Table:
    """A kept table's `rows` as its side table holds them, superseded by `batch_id`."""
    return rows.append_column(SUPERSEDED_BATCH, pa.array([batch_id] * rows.num_rows, pa.int64()))


def first_batches(aside: pa.Table) -> dict[str, int]:
    """session_id -> the batch that first wrote it, of `sessions_superseded` rows."""
    ids, batches = aside["session_id"].to_pylist(), aside["batch_id"].to_pylist()
    return dict(zip(ids, batches, strict=True))


def _bookkept(
    rows: pa.Table, sessions: pa.Schema, revision, batch_id: int, first: dict
) -> pa.Table:
    """`rows` as `sessions` rows plus `batch_id` (from `first`, else `batch_id`),
    `revision` and `revised_batch`."""
    n = rows.num_rows
    rows = rows.select(sessions.names).cast(sessions)
    firsts = [first.get(i, batch_id) for i in rows["session_id"].to_pylist()]
    revision = pa.array([revision] * n, pa.int64()) if isinstance(revision, int) else revision
    return (
        rows.append_column("batch_id", pa.array(firsts, pa.int64()))
        .append_column(REVISION, revision.cast(pa.int64()))
        .append_column(REVISED_BATCH, pa.array([batch_id] * n, pa.int64()))
    )
