"""`--revise-within` on PostgreSQL: `sessions` and `page_views` kept current by `session_id`
(docs/design.md, "Revisions").

Tasks stage the processor's four outputs as any appended output (`sessions`' first writes,
`page_views`, `session_revisions`, `page_view_revisions`); the batch's publish transaction
folds them into two tables:

    sessions (columns..., batch_id, revision, revised_batch)   one row per current id
    page_views (columns..., batch_id)                          the current ids' page views
    sessions_superseded (sessions' columns, superseded_batch)  rows a batch replaced or
    page_views_superseded (..., superseded_batch)              deleted, with that batch

`batch_id` is the batch that first wrote the id, `revised_batch` the one that wrote the
row. A batch moves the rows of every id it touches to the side tables, deletes them, and
inserts its first writes and revisions (a retracted id gets none) and their page views.
Undoing batches >= N (`undo`: a rewind, a reprocessing, and a republished batch before
it writes again) deletes the rows they wrote and puts back the rows they superseded that
older batches wrote, so the tables are those of a run stopped at N - 1: an upserted table
cannot be rebuilt from the state, which no longer holds sessions older than the window.
"""

from __future__ import annotations

import psycopg
from psycopg import sql

from sessionize.base_schema import PAGE_VIEW_REVISIONS, RETRACTED, REVISION, SESSION_REVISIONS
from sessionize.sinks.outputs import Outputs
from sessionize.sinks.postgres_tables import staged_table, table_exists
from sessionize.state.backends.postgres_pool import scalar

SESSIONS, PAGE_VIEWS = "sessions", "page_views"
REVISED_BATCH = "revised_batch"
SUPERSEDED_BATCH = "superseded_batch"
# The outputs folded into `sessions` and `page_views` (staged, never tables of their own).
REVISION_OUTPUTS = (SESSION_REVISIONS, PAGE_VIEW_REVISIONS)
FOLDED = (SESSIONS, PAGE_VIEWS, *REVISION_OUTPUTS)
# Each kept table, its side table, and the column saying which batch wrote a row.
KEPT = (
    (SESSIONS, "sessions_superseded", REVISED_BATCH),
    (PAGE_VIEWS, "page_views_superseded", "batch_id"),
)


def revising(outputs: Outputs) -> bool:
    """Whether the job writes revisions (`--revise-within`): then this module publishes."""
    return SESSION_REVISIONS in outputs


def ddl(schema: str) -> list[sql.Composed]:
    """After the outputs' tables exist: `sessions`' two columns, a unique id, the side
    tables and the indexes `undo` deletes by."""

    def t(name: str) -> sql.Identifier:
        return sql.Identifier(schema, name)

    out = [
        sql.SQL(
            "ALTER TABLE {} ADD COLUMN IF NOT EXISTS revision bigint NOT NULL, "
            "ADD COLUMN IF NOT EXISTS revised_batch bigint NOT NULL"
        ).format(t(SESSIONS)),
        sql.SQL("CREATE UNIQUE INDEX IF NOT EXISTS {} ON {} (session_id)").format(
            sql.Identifier("sessions_by_session_id"), t(SESSIONS)
        ),
        sql.SQL("CREATE INDEX IF NOT EXISTS {} ON {} (revised_batch)").format(
            sql.Identifier("sessions_by_revised_batch"), t(SESSIONS)
        ),
    ]
    for kept, side, _ in KEPT:
        out += [
            sql.SQL("CREATE TABLE IF NOT EXISTS {} (LIKE {})").format(t(side), t(kept)),
            sql.SQL("ALTER TABLE {} ADD COLUMN IF NOT EXISTS {} bigint NOT NULL").format(
                t(side), sql.Identifier(SUPERSEDED_BATCH)
            ),
            sql.SQL("CREATE INDEX IF NOT EXISTS {} ON {} (superseded_batch)").format(
                sql.Identifier(f"{side}_by_superseded_batch"), t(side)
            ),
        ]
    return out


def publish(
    conn: psycopg.Connection,
    schema: str,
    columns: dict[str, list[str]],
    batch_id: int,
    opened: bool,
) -> dict[str, int] | None:
    """Fold the batch's staged rows into `sessions` and `page_views` (inside the caller's
    transaction; `columns`: the declared columns of both). The rows written per staged
    output, or None when the batch was published already and nothing is staged."""

    def t(name: str) -> sql.Identifier:
        return sql.Identifier(schema, name)

    def staged(name: str) -> sql.Identifier:
        return t(staged_table(name))

    def names(cols: list[str], prefix: str = "") -> sql.Composable:
        return sql.SQL(", ").join(sql.SQL(prefix) + sql.Identifier(c) for c in cols)

    has_rows = any(
        scalar(
            conn.execute(
                sql.SQL("SELECT EXISTS (SELECT 1 FROM {} WHERE batch_id = %s)").format(staged(n)),
                (batch_id,),
            )
        )
        for n in FOLDED
    )
    if not (has_rows or opened):
        return None
    undo(conn, schema, batch_id)  # a batch published before is replaced, never added to
    touched = {
        SESSIONS: sql.SQL(
            "SELECT session_id FROM {} WHERE batch_id = %(b)s "
            "UNION SELECT session_id FROM {} WHERE batch_id = %(b)s"
        ).format(staged(SESSIONS), staged(SESSION_REVISIONS)),
        # A session revised by the users step alone (renumbered) keeps its page views.
        PAGE_VIEWS: sql.SQL(
            "SELECT session_id FROM {} WHERE batch_id = %(b)s "
            "UNION SELECT session_id FROM {} WHERE batch_id = %(b)s "
            "UNION SELECT session_id FROM {} WHERE batch_id = %(b)s AND {}"
        ).format(
            staged(PAGE_VIEWS),
            staged(PAGE_VIEW_REVISIONS),
            staged(SESSION_REVISIONS),
            sql.Identifier(RETRACTED),
        ),
    }
    b = {"b": batch_id}
    for kept, side, _ in KEPT:
        ids = touched[kept]
        conn.execute(
            sql.SQL("INSERT INTO {} SELECT *, %(b)s FROM {} WHERE session_id IN ({})").format(
                t(side), t(kept), ids
            ),
            b,
        )
        conn.execute(sql.SQL("DELETE FROM {} WHERE session_id IN ({})").format(t(kept), ids), b)
    cols = columns[SESSIONS]
    counts = {}
    counts[SESSIONS] = conn.execute(
        sql.SQL(
            "INSERT INTO {} ({}, batch_id, revision, revised_batch) "
            "SELECT {}, %(b)s, 0, %(b)s FROM {} WHERE batch_id = %(b)s"
        ).format(t(SESSIONS), names(cols), names(cols), staged(SESSIONS)),
        b,
    ).rowcount
    # A revision keeps the batch that first wrote its id (none: this one, a moved start).
    conn.execute(
        sql.SQL(
            "INSERT INTO {} ({}, batch_id, revision, revised_batch) "
            "SELECT {}, coalesce(o.batch_id, %(b)s), r.{}, %(b)s FROM {} r LEFT JOIN {} o "
            "ON o.session_id = r.session_id AND o.superseded_batch = %(b)s "
            "WHERE r.batch_id = %(b)s AND NOT r.{}"
        ).format(
            t(SESSIONS),
            names(cols),
            names(cols, "r."),
            sql.Identifier(REVISION),
            staged(SESSION_REVISIONS),
            t(KEPT[0][1]),
            sql.Identifier(RETRACTED),
        ),
        b,
    )
    counts[SESSION_REVISIONS] = scalar(
        conn.execute(
            sql.SQL("SELECT count(*) FROM {} WHERE batch_id = %s").format(
                staged(SESSION_REVISIONS)
            ),
            (batch_id,),
        )
    )
    views = columns[PAGE_VIEWS]
    for name in (PAGE_VIEWS, PAGE_VIEW_REVISIONS):
        counts[name] = conn.execute(
            sql.SQL(
                "INSERT INTO {} ({}, batch_id) SELECT {}, batch_id FROM {} WHERE batch_id = %s"
            ).format(t(PAGE_VIEWS), names(views), names(views), staged(name)),
            (batch_id,),
        ).rowcount
    for name in FOLDED:
        conn.execute(
            sql.SQL("DELETE FROM {} WHERE batch_id = %s").format(staged(name)), (batch_id,)
        )
    return counts


def undo(conn: psycopg.Connection, schema: str, first: int) -> set[int]:
    """Set `sessions` and `page_views` back to before batch `first` (inside the caller's
    transaction): delete the rows batches >= first wrote, put back the rows they
    superseded that earlier batches wrote (at most one per id: an id has one current row
    at a time), forget what they superseded. The batches whose rows were deleted; nothing
    when the job never revised (no side tables)."""
    if not table_exists(conn, schema, KEPT[0][1]):
        return set()
    undone: set[int] = set()
    for kept, side, written in KEPT:
        final, superseded = sql.Identifier(schema, kept), sql.Identifier(schema, side)
        mark = sql.Identifier(written)
        rows = conn.execute(
            sql.SQL("DELETE FROM {} WHERE {} >= %s RETURNING {}").format(final, mark, mark),
            (first,),
        ).fetchall()
        undone |= {r[0] for r in rows}
        cols = sql.SQL(", ").join(map(sql.Identifier, _columns(conn, schema, kept)))
        conn.execute(
            sql.SQL(
                "INSERT INTO {} ({}) SELECT {} FROM {} WHERE superseded_batch >= %s AND {} < %s"
            ).format(final, cols, cols, superseded, mark),
            (first, first),
        )
        conn.execute(
            sql.SQL("DELETE FROM {} WHERE superseded_batch >= %s").format(superseded), (first,)
        )
    return undone


def _columns(conn: psycopg.Connection, schema: str, table: str) -> list[str]:
    rows = conn.execute(
        "SELECT column_name FROM information_schema.columns WHERE table_schema = %s AND "
        "table_name = %s ORDER BY ordinal_position",
        (schema, table),
    ).fetchall()
    return [r[0] for r in rows]
