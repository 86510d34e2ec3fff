"""A revising job's sessions and page views as Kafka records keyed by `session_id`
(`--revise-within`, docs/concepts/revisions.md).

A log-compacted topic, a ksqlDB or Flink table over `PREFIX.sessions` keeps the last record
of each key, and a tombstone (null value) deletes its key: so `PREFIX.sessions` holds one
record per written or revised session, keyed by its id (`revision` 0 for a first write), and
a tombstone for each retracted id. `PREFIX.page_views` holds one record per session listing
its page views, `{"session_id": ..., "batch_id": ..., "page_views": [...]}`, written again
whole when the session is revised, and a tombstone when it is retracted: a session's page
views cannot be replaced one record at a time, since a revision may hold fewer of them.

Within a batch the first writes go before the revisions, as the Parquet outputs' rule ranks
them (the greater revision of a batch is the current row).

With identity (`--anonymous-field`) the users step revises sessions whose events did not
change (renumbered, or moved to another stitched user), and only the first step writes page
views: such a revision has none in the batch and leaves the session's page views record
as it is; a retraction still deletes it (docs/design.md, "Revisions", "With identity").
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

from sessionize.base_schema import PAGE_VIEW_REVISIONS, RETRACTED, REVISION, SESSION_REVISIONS
from sessionize.sinks.kafka_records import encode, per_key_records
from sessionize.sinks.revised_rows import views_replaced

SESSION_KEY = "session_id"
# The staged outputs that a revising job turns into keyed records, and their topics.
REVISED = {
    "sessions": "sessions",
    SESSION_REVISIONS: "sessions",
    "page_views": "page_views",
    PAGE_VIEW_REVISIONS: "page_views",
}

Record = tuple[bytes | None, bytes | None]


def revised_records(
    tables: dict[str, pa.Table],
    batch_id: int,
    *,
    positions: bool = False,
    renumbered: bool = False,
) -> dict[str, list[Record]]:
    """The records of a revising batch's sessions and page views, per topic name.

    Args:
        tables: the batch's staged outputs by name (`sessions`, `session_revisions`,
            `page_views`, `page_view_revisions` are read; the others are left alone).
        batch_id: the batch.
        positions: add `position` to each session value (at-least-once delivery).
        renumbered: a users step may revise sessions alone (identity): a revision with no
            page views in the batch keeps its page views record, where without one every
            revised id's record is written again (empty: a tombstone).

    Returns:
        {"sessions": [(key, value)], "page_views": [(key, value)]}: values as JSON, None for
        a tombstone; first writes before revisions.

    Example:
        >>> s = pa.table({"session_id": ["1-5"], "batch_id": [2]})
        >>> r = pa.table({"session_id": ["1-3"], "revision": [1], "retracted": [True],
        ...               "batch_id": [2]})
        >>> revised_records({"sessions": s, "session_revisions": r}, 2)["sessions"]
        [(b'1-5', b'{"session_id":"1-5","batch_id":2,"revision":0}'), (b'1-3', None)]
    """
    first = tables.get("sessions")
    revised = tables.get(SESSION_REVISIONS)
    sessions: list[Record] = []
    if first is not None:
        first = first.append_column(REVISION, pa.array([0] * first.num_rows, pa.int64()))
        sessions += encode(first, positions=positions, key=SESSION_KEY)
    views: list[Record] = []
    if "page_views" in tables:
        written = tables["page_views"]
        ids = pa.table({SESSION_KEY: pc.unique(written[SESSION_KEY])})
        views += per_key_records(ids, written, batch_id, "page_views", (SESSION_KEY,))
    if revised is not None and revised.num_rows:
        retracted = revised[RETRACTED].fill_null(False)
        live = revised.filter(pc.invert(retracted)).drop_columns([RETRACTED])
        sessions += encode(live, positions=positions, key=SESSION_KEY)
        sessions += [(str(k).encode(), None) for k in revised.filter(retracted)[SESSION_KEY]
                     .to_pylist()]  # fmt: skip
        # Every revised or retracted id: its page views as revised, or a tombstone; with
        # a users step, only those `views_replaced` names (a renumbered id keeps its record).
        ids = revised.select([SESSION_KEY])
        if renumbered:
            replaced = views_replaced(revised, tables.get(PAGE_VIEW_REVISIONS))
            ids = ids.filter(pc.is_in(ids[SESSION_KEY], value_set=replaced))
        rows = tables.get(PAGE_VIEW_REVISIONS)
        if rows is None:
            rows = pa.table({SESSION_KEY: pa.array([], revised[SESSION_KEY].type)})
        views += per_key_records(ids, rows, batch_id, "page_views", (SESSION_KEY,))
    return {"sessions": sessions, "page_views": views}
