"""What the `--revise-within` end-to-end tests share (test_revisions_*.py): an input whose
held-back files bring events hours behind the watermark, its `sessionize batch` (the
reference), the stream's arguments, and the docs' current-sessions query
(docs/concepts/revisions.md, "The current sessions")."""

from __future__ import annotations

import json
import os
import uuid
from datetime import UTC, datetime
from pathlib import Path

import pyarrow as pa
import pyarrow.dataset as ds

from sessionize.commands.batch import BatchOptions, run_batch
from sessionize.commands.stream import StreamOptions
from sessionize.config import SessionRules
from sessionize.mapping import EventMapping
from tests.helpers import generate, stream_args
from tests.state.services_fixtures import service_env

START = datetime(2026, 11, 1, tzinfo=UTC)
HOUR_US = 3_600_000_000
WINDOW = "3h"  # the held-back files come about two hours after their hour
RULES = SessionRules(revise_within_us=3 * HOUR_US)
# A revising job's sessions are schema 2's (schema 3's continued visits are not revised
# yet): the batch run writes the same columns.
MAPPING = EventMapping(session_columns=2)
FLUSH_USER = 999_999  # its one event, an hour after the data, moves the watermark past all
OUTPUTS = (
    "sessions",
    "page_views",
    "session_revisions",
    "page_view_revisions",
    "late_events",
    "invalid_events",
)
REVISING_BATCH = 4  # the first held-back file (hour 0's), after the four files of hours 0-1

# The docs' query: per session_id the row of the greatest batch over `sessions` and
# `session_revisions`, unless it is a retraction. `{written}` is the union of the two.
CURRENT = """
SELECT * FROM (
  SELECT *, row_number() OVER (
      PARTITION BY session_id ORDER BY batch_id DESC, coalesce(revision, 0) DESC) AS latest
  FROM {written})
WHERE latest = 1 AND NOT coalesce(retracted, false)
"""


def revising_input(path: Path) -> Path:
    """Two hours of events with late ones whose files come about two hours after their
    hour, then one flush event an hour after the data, in the last file read."""
    inp = generate(
        path,
        start=START,
        hours=2,
        users=80,
        events_per_hour=800,
        late_rate=0.05,
        files_per_hour=2,
    )
    newest = max(p.stat().st_mtime for p in inp.rglob("*.json"))
    flush = inp / "event_date=2026-11-01" / "event_hour=03" / "part-00000.json"
    flush.parent.mkdir(parents=True)
    event = {"user_id": FLUSH_USER, "event_time": "2026-11-01T03:00:00+00:00"}
    flush.write_text(json.dumps({**event, "page": {"current": "home"}}) + "\n")
    os.utime(flush, (newest + 60, newest + 60))
    return inp


def batch_of_every_event(
    spark, inp, out, state: str = "files", output_format: str = "parquet"
) -> None:
    """`sessionize batch` over every hour of `inp`, written to `out` (the reference)."""
    options = BatchOptions(
        input=str(inp),
        output=str(out),
        state=state,
        output_format=output_format,
        start=START,
        end=START.replace(hour=3),
        partitions=3,
        mapping=MAPPING,
    )
    run_batch(options, spark, on_hour=lambda _: None)


def revising_stream(inp: Path, root: Path) -> StreamOptions:
    """The revising stream over `inp`, file by file, writing under `root`."""
    return StreamOptions(
        input=str(inp),
        output=str(root / "out"),
        checkpoint=str(root / "chk"),
        partitions=3,
        max_files_per_trigger=1,
        rules=RULES,
        mapping=MAPPING,
    )


def revising_args(inp: Path, root: Path, output: str | None = None) -> list[str]:
    """`revising_stream` on the command line (writing to `output` if given)."""
    return [*stream_args(inp, root, output), "--revise-within", WINDOW]


def read(out: Path, name: str) -> pa.Table:
    """Local output `name` with its batch ids, in one row order (none: never written)."""
    if not (out / name).exists():
        return pa.table({})
    table = ds.dataset(str(out / name), format="parquet", partitioning="hive").to_table()
    return in_order(table)


def in_order(table: pa.Table) -> pa.Table:
    """`table` sorted by every column that is not nested."""
    keys = [f.name for f in table.schema if not pa.types.is_nested(f.type)]
    return table.sort_by([(c, "ascending") for c in sorted(keys)])


def as_table(records: list[dict]) -> dict[str, dict]:
    """A topic (`read_topic`'s records) as a log-compacted topic keeps it: each key's last
    record, a tombstone (a record with no value) deleting its key. Records of one key are
    in produce order."""
    table: dict[str, dict] = {}
    for r in records:
        value = {k: v for k, v in r.items() if k != "key"}
        if value:
            table[r["key"]] = value
        else:
            table.pop(r["key"], None)
    return table


class Postgres:
    """Outputs in schemas of their own on the test server (`output`), read with psycopg,
    dropped at the end (`close`)."""

    format = "parquet"  # the default: a postgresql:// output has its own
    # Its publish is one transaction (a kill inside it is a rollback): the crash it must
    # survive is after its commit, before the job records the batch, which it publishes
    # again on restart.
    kill_point = "after-publish"

    def __init__(self) -> None:
        self.server = service_env("postgres")["SESSIONIZE_TEST_POSTGRES"]
        self.schemas: list[str] = []

    def output(self, _root: Path) -> str:
        schema = f"rev_{uuid.uuid4().hex[:12]}"
        self.schemas.append(schema)
        return f"{self.server}?schema={schema}"

    def state(self, root: Path) -> str:
        return f"files:{root / 'state'}"  # the output has no directory for it

    def rows(self, output: str, name: str) -> list[dict]:
        import psycopg

        schema = output.split("schema=")[1]
        with psycopg.connect(self.server) as conn:
            cur = conn.execute(f'SELECT * FROM "{schema}"."{name}"')
            names = [d.name for d in cur.description]
            return [dict(zip(names, r, strict=True)) for r in cur.fetchall()]

    def close(self) -> None:
        import psycopg

        with psycopg.connect(self.server, autocommit=True) as conn:
            for schema in self.schemas:
                conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
