"""`--revise-within` on Delta: `sessions` and `page_views` kept current by `session_id`
(docs/design.md, "Revisions"; the PostgreSQL twin is `postgres_revised.py`).

Tasks stage the processor's four outputs as any appended output; the publish folds them
into the tables, one commit per table, each recording the job's transaction (app id =
job, version = batch), in this order:

1. `sessions_superseded` then `page_views_superseded`: the rows of every id the batch
   revises or retracts as they were before it (written by earlier batches), with
   `superseded_batch`; nothing to read or commit in a batch without revisions.
   Skipped when the table's transaction is at the batch already: a replay finds those rows
   gone from the kept table, and they are here.
2. `sessions`: the touched ids' rows deleted and the batch's first writes and revisions
   inserted (a retracted id gets none; a batch without revisions, seen by the table's
   transaction for the first time, is an append), with `revision`, `revised_batch` (this batch) and
   `batch_id` (the batch that first wrote the id, read from step 1's rows).
3. `page_views`: the touched ids' page views replaced by the batch's.

Steps 2 and 3 are a MERGE each (`delta_replaced.merge_replace`): deleting an id's rows and
inserting its new ones gives the same table when a crash replays them. Between commits a
reader may see a session revised whose page views are not yet, never a row twice.
Removing batches >= N (`undo`) puts back, per kept table, the side rows those batches
superseded that earlier batches wrote and deletes the rows they wrote (one MERGE, with the
transaction version N - 1), then deletes those side rows: replayed after a crash, the
MERGE restores the same rows again.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from sessionize import faults
from sessionize.sinks import staging
from sessionize.sinks.delta_replaced import merge_replace
from sessionize.sinks.revised_rows import (  # noqa: F401 - FOLDED, SIDE_TABLES, revising: delta.py's
    FOLDED,
    KEPT,
    KEY,
    PAGE_VIEWS,
    REVISED_BATCH,
    REVISION_OUTPUTS,
    SESSIONS,
    SIDE_TABLES,
    SUPERSEDED_BATCH,
    first_batches,
    page_view_rows,
    revising,
    sessions_rows,
    set_aside,
    touched,
)

DeltaSink = Any  # sinks/delta.py's, which imports this module


def publish(sink: DeltaSink, batch_id: int, *, replay: bool) -> None:
    """Fold the staged batch into the tables, in the module's order."""
    fs, base = sink._fs()
    staged = {
        n: staging.read_staged(fs, base, n, batch_id, sink.outputs.schema(n))
        for n in (SESSIONS, PAGE_VIEWS, *REVISION_OUTPUTS)
    }
    ids = touched(staged)
    # Only a revised or retracted id can have a row an earlier batch wrote: most batches
    # read no kept table here.
    for kept, side, written in KEPT:
        _supersede(sink, kept, side, written, ids.of(kept)[1], batch_id)
    sessions = sink.outputs.schema(SESSIONS)
    rows = sessions_rows(staged, sessions, batch_id, _first_batches(sink, batch_id))
    _replace(sink, SESSIONS, batch_id, ids.of(SESSIONS), rows, replay)
    faults.pause_point("revised-sessions", batch_id)  # a crash between the two commits
    views = page_view_rows(staged)
    _replace(sink, PAGE_VIEWS, batch_id, ids.of(PAGE_VIEWS), views, replay)


def undo(sink: DeltaSink, first: int) -> set[int]:
    """Set `sessions` and `page_views` back to before batch `first`: the batches whose
    rows were removed (nothing when the job never revised: no side tables)."""
    undone: set[int] = set()
    props = _props(sink.job, first - 1, {"sessionize.retired_from": str(first)})
    for kept, side, written in KEPT:
        table, aside = sink.table(kept), sink.table(side)
        if table is None or aside is None:
            continue
        gone = _query(table, f"SELECT session_id, {written} FROM t WHERE {written} >= {first}")
        back = _query(
            aside, f"SELECT * FROM t WHERE {SUPERSEDED_BATCH} >= {first} AND {written} < {first}"
        ).drop_columns([SUPERSEDED_BATCH])
        undone |= set(gone[written].to_pylist())
        ids = pa.concat_arrays(
            [gone["session_id"].combine_chunks(), back["session_id"].combine_chunks()]
        )
        if len(ids):
            keys = pa.table({"session_id": pc.unique(ids)})
            merge_replace(table, keys, back.cast(_schema(table)), KEY, props)
    for _, side, _ in KEPT:
        aside = sink.table(side)
        if (
            aside is not None
            and _query(
                aside, f"SELECT 1 AS n FROM t WHERE {SUPERSEDED_BATCH} >= {first} LIMIT 1"
            ).num_rows
        ):
            aside.delete(f"{SUPERSEDED_BATCH} >= {first}", commit_properties=props)
    return undone


def _supersede(
    sink: DeltaSink, kept: str, side: str, written: str, keys: pa.Table, batch_id: int
) -> None:
    """Step 1 for one kept table: its rows of `keys` that earlier batches wrote, aside."""
    from deltalake import write_deltalake

    aside = sink.table(side)
    done = None if aside is None else aside.transaction_version(sink.job)
    if done is not None and done >= batch_id:
        return  # this batch's superseded rows are aside already
    table = sink.table(kept)
    if table is None or keys.num_rows == 0:
        return
    listed = ", ".join("'" + i.replace("'", "''") + "'" for i in keys["session_id"].to_pylist())
    rows = _query(
        table, f"SELECT * FROM t WHERE session_id IN ({listed}) AND {written} < {batch_id}"
    )
    if rows.num_rows == 0:
        return
    rows = set_aside(rows.cast(_schema(table)), batch_id)
    write_deltalake(
        aside if aside is not None else sink.table_uri(side),
        rows,
        mode="append",
        configuration=sink.table_properties if aside is None else None,
        storage_options=sink.storage_options() if aside is None else None,
        commit_properties=_props(sink.job, batch_id),
    )


def _first_batches(sink: DeltaSink, batch_id: int) -> dict[str, int]:
    """session_id -> the batch that first wrote it, of the ids this batch supersedes."""
    aside = sink.table(KEPT[0][1])
    if aside is None:
        return {}
    rows = _query(
        aside, f"SELECT session_id, batch_id FROM t WHERE {SUPERSEDED_BATCH} = {batch_id}"
    )
    return first_batches(rows)


def _replace(
    sink: DeltaSink,
    name: str,
    batch_id: int,
    keys: tuple[pa.Table, pa.Table],
    rows: pa.Table,
    replay: bool,
) -> None:
    """Steps 2 and 3: table `name`'s rows of the touched ids replaced by `rows`, once per
    batch. `keys`: (every id the batch touches, those it revises or retracts); while the
    table holds none of this batch's rows (its transaction is before it) only the latter
    can be there, so a batch without revisions is an append, not a MERGE."""
    from deltalake import write_deltalake

    table = sink.table(name)
    done = None if table is None else table.transaction_version(sink.job)
    if done is not None and done >= batch_id and not replay:
        return  # committed already, and nothing new was staged
    props = _props(sink.job, batch_id)
    if table is None:  # the first commit creates the table with this batch's rows
        write_deltalake(
            sink.table_uri(name),
            rows,
            mode="append",
            partition_by=list(sink.outputs.spec(name).partition_by) or None,
            configuration=sink.table_properties,
            storage_options=sink.storage_options(),
            commit_properties=props,
        )
        return
    touched, replaced = keys
    fresh = done is None or done < batch_id
    merge_replace(table, replaced if fresh else touched, rows.cast(_schema(table)), KEY, props)


def _props(job: str, version: int, metadata: dict[str, str] | None = None):
    from deltalake import CommitProperties, Transaction

    return CommitProperties(
        app_transactions=[Transaction(job, version)],
        custom_metadata=metadata or {"sessionize.batch_id": str(version)},
    )


def _schema(table) -> pa.Schema:
    """A Delta table's columns as pyarrow's (delta-rs gives arro3's)."""
    return pa.schema(table.schema().to_arrow())


def _query(table, query: str) -> pa.Table:
    """`query` over `table` as `t`, by delta-rs' own engine (see delta.py's `_batch_ids`)."""
    from deltalake import QueryBuilder

    return pa.table(QueryBuilder().register("t", table).execute(query).read_all())
