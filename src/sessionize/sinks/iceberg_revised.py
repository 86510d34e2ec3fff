"""`--revise-within` on Iceberg: `sessions` and `page_views` kept current by `session_id`
(docs/design.md, "Revisions"; the Delta twin is `delta_revised.py`, whose order this
keeps, and the rows come from `revised_rows.py`).

Tasks stage the processor's four outputs as any appended output; the publish folds them
into the tables, one Iceberg commit per table, each snapshot's summary naming the job
and the batch (`IcebergSink._done` reads it back), in this order:

1. `sessions_superseded` then `page_views_superseded`: the rows of every id the batch
   revises or retracts as they were before it (written by earlier batches), with
   `superseded_batch`; nothing to read or commit in a batch without revisions. Skipped
   when the table's latest commit of the job is at the batch already: a replay finds
   those rows gone from the kept table, and they are here.
2. `sessions`: one transaction that deletes the touched ids' rows and appends the batch's
   first writes and revisions (a retracted id gets none), with `revision`,
   `revised_batch` (this batch) and `batch_id` (the batch that first wrote the id, read
   from step 1's rows).
3. `page_views`: the touched ids' page views replaced by the batch's, the same way.

A crash between commits replays the batch: step 1 is skipped where it was committed,
and steps 2 and 3 delete and append the same rows, giving the same tables. Between
commits a reader may see a session revised whose page views are not yet, never a row
twice. Removing batches >= N (`undo`) puts back, per kept table, the side rows those
batches superseded that earlier batches wrote and deletes the rows they wrote (one
transaction, its summary at batch N - 1), then deletes those side rows: replayed after a
crash, the first transaction restores the same rows again.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from pyiceberg.expressions import And, EqualTo, GreaterThanOrEqual, In, LessThan

from sessionize import faults
from sessionize.sinks import staging
from sessionize.sinks.revised_rows import (
    KEPT,
    PAGE_VIEWS,
    REVISION_OUTPUTS,
    SESSIONS,
    SUPERSEDED_BATCH,
    first_batches,
    page_view_rows,
    sessions_rows,
    set_aside,
    touched,
)

IcebergSink = Any  # sinks/iceberg.py's, which imports this module


def publish(sink: IcebergSink, batch_id: int, *, replay: bool) -> None:
    """Fold the staged batch into the tables, in the module's order."""
    fs, base = sink._fs()
    staged = {
        n: staging.read_staged(fs, base, n, batch_id, sink.outputs.schema(n))
        for n in (SESSIONS, PAGE_VIEWS, *REVISION_OUTPUTS)
    }
    ids = touched(staged)
    for kept, side, written in KEPT:
        _supersede(sink, kept, side, written, ids.of(kept)[1], batch_id)
    sessions = sink.outputs.schema(SESSIONS)
    rows = sessions_rows(staged, sessions, batch_id, _first_batches(sink, batch_id))
    _replace(sink, SESSIONS, batch_id, ids.of(SESSIONS), rows, replay)
    faults.pause_point("revised-sessions", batch_id)  # a crash between the two commits
    views = page_view_rows(staged)
    _replace(sink, PAGE_VIEWS, batch_id, ids.of(PAGE_VIEWS), views, replay)


def undo(sink: IcebergSink, first: int) -> set[int]:
    """Set `sessions` and `page_views` back to before batch `first`: the batches whose
    rows were removed (nothing when the job never revised: no side tables)."""
    undone: set[int] = set()
    summary = sink._summary(first - 1, {"sessionize.retired_from": str(first)})
    for kept, side, written in KEPT:
        table, aside = sink._table(kept), sink._table(side)
        if table is None or aside is None:
            continue
        gone = table.scan(
            row_filter=_at_or_after(written, first), selected_fields=("session_id", written)
        ).to_arrow()
        back = aside.scan(
            row_filter=And(_at_or_after(SUPERSEDED_BATCH, first), _before(written, first))
        ).to_arrow()
        undone |= set(gone[written].to_pylist())
        ids = pc.unique(
            pa.concat_arrays(
                [gone["session_id"].combine_chunks(), back["session_id"].combine_chunks()]
            )
        )
        if len(ids):
            sink._commit(table, _ids(ids), back.drop_columns([SUPERSEDED_BATCH]), summary)
    for _, side, _ in KEPT:
        aside = sink._table(side)
        if aside is not None and _any(aside, _at_or_after(SUPERSEDED_BATCH, first)):
            sink._commit(aside, _at_or_after(SUPERSEDED_BATCH, first), None, summary)
    return undone


def _supersede(
    sink: IcebergSink, kept: str, side: str, written: str, keys: pa.Table, batch_id: int
) -> None:
    """Step 1 for one kept table: its rows of `keys` that earlier batches wrote, aside."""
    aside = sink._table(side)
    done = None if aside is None else sink._done(aside)
    if done is not None and done >= batch_id:
        return  # this batch's superseded rows are aside already
    table = sink._table(kept)
    if table is None or keys.num_rows == 0:
        return
    found = And(_ids(keys["session_id"]), _before(written, batch_id))
    rows = table.scan(row_filter=found).to_arrow()
    if rows.num_rows == 0:
        return
    rows = set_aside(sink._conformed(table, rows), batch_id)
    if aside is None:
        aside = sink._created_as(side, rows.schema, ())
    sink._commit(aside, None, rows, sink._summary(batch_id))


def _first_batches(sink: IcebergSink, batch_id: int) -> dict[str, int]:
    """session_id -> the batch that first wrote it, of the ids this batch supersedes."""
    aside = sink._table(KEPT[0][1])
    if aside is None:
        return {}
    at_batch = EqualTo(SUPERSEDED_BATCH, batch_id)  # type: ignore[call-arg, arg-type]
    rows = aside.scan(row_filter=at_batch, selected_fields=("session_id", "batch_id"))
    return first_batches(rows.to_arrow())


def _replace(
    sink: IcebergSink,
    name: str,
    batch_id: int,
    keys: tuple[pa.Table, pa.Table],
    rows: pa.Table,
    replay: bool,
) -> None:
    """Steps 2 and 3: table `name`'s rows of the touched ids replaced by `rows`, once per
    batch. `keys`: (every id the batch touches, those it revises or retracts); while the
    table's latest commit of the job is before this batch, only the latter can be there,
    so a batch without revisions deletes nothing."""
    table = sink._table(name)
    done = None if table is None else sink._done(table)
    if done is not None and done >= batch_id and not replay:
        return  # committed already, and nothing new was staged
    if table is None:  # created from the rows' columns: the bookkeeping ones included
        table = sink._created_as(name, rows.schema, sink.outputs.spec(name).partition_by)
    touched_ids, replaced = keys
    gone = replaced if done is None or done < batch_id else touched_ids
    delete = _ids(gone["session_id"]) if gone.num_rows else None
    sink._commit(table, delete, rows, sink._summary(batch_id))


# pyiceberg 0.12's predicates take (term, literal) positionally; their pydantic base hides
# that __init__ from type checkers, hence the ignores.
def _ids(ids: pa.Array | pa.ChunkedArray):
    return In("session_id", ids.to_pylist())  # type: ignore[call-arg, arg-type]


def _at_or_after(column: str, batch_id: int):
    return GreaterThanOrEqual(column, batch_id)  # type: ignore[call-arg, arg-type]


def _before(column: str, batch_id: int):
    return LessThan(column, batch_id)  # type: ignore[call-arg, arg-type]


def _any(table, row_filter) -> bool:
    scan = table.scan(row_filter=row_filter, selected_fields=("session_id",), limit=1)
    return scan.to_arrow().num_rows > 0
