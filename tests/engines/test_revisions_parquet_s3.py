"""`--revise-within` on Parquet on `s3://` (docs/concepts/revisions.md, "On s3://"):
`session_revisions` and `page_view_revisions` published by their commit files with the
batch's other outputs, against the test S3 server. The revising stream of
test_revisions_parquet.py, killed -9 inside a revising batch's publish and restarted,
writes what the uninterrupted local run wrote; the docs' query over the committed files
gives the sessions of one `sessionize batch` of every event; a rewind retires the
revisions of the undone batches with their other rows; `maintain --compact`, which would
fold them, refuses Parquet on s3:// as it always did."""

from __future__ import annotations

import duckdb
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from sessionize.commands.maintain import maintain
from sessionize.errors import ConfigError
from sessionize.sinks.parquet_s3 import read_committed
from tests.engines.revising import (
    CURRENT,
    FLUSH_USER,
    OUTPUTS,
    REVISING_BATCH,
    in_order,
    read,
    revising_args,
)
from tests.helpers import cli_env, run_until_killed, sessionize


def same_rows(got: pa.Table, want: pa.Table) -> bool:
    """`got` (read through the commit files) holds the rows of `want` (a local output, its
    Hive partition values read as strings), in any order."""
    if not want.num_rows:
        return not got.num_rows
    want = want.select(got.schema.names).cast(got.schema)
    return in_order(got).equals(in_order(want))


def current_sessions(out: str) -> pa.Table:
    """The docs' query, in DuckDB, over the committed files of the two outputs: the
    current sessions but the flush user's, by `session_id`."""
    con = duckdb.connect()
    con.register("sessions_written", read_committed(out, "sessions"))
    con.register("revisions_written", read_committed(out, "session_revisions"))
    written = "(SELECT * FROM sessions_written UNION ALL BY NAME SELECT * FROM revisions_written)"
    rows = con.sql(CURRENT.format(written=written)).arrow().read_all()
    rows = rows.drop_columns(["latest", "revision", "retracted", "batch_id"])
    return without_flush_user(rows)


def without_flush_user(table: pa.Table) -> pa.Table:
    table = table.filter(pc.field("user_id") != FLUSH_USER)
    return table.sort_by("session_id")


def test_revisions_on_s3_through_a_kill_9_equal_the_local_run_and_one_batch(
    revised_parquet, bucket_uri, tmp_path
):
    root, inp = revised_parquet
    clean = root / "clean" / "out"
    out = bucket_uri
    args = revising_args(inp, tmp_path, output=out)
    # Killed once `session_revisions` of the revising batch is committed, before
    # `page_view_revisions`: the restart publishes that batch again, under new files.
    point = f"published-session_revisions:{REVISING_BATCH}"
    seen = run_until_killed(
        args, f"PAUSED {point.replace(':', ' ')}", cli_env(SESSIONIZE_PAUSE_AT=point)
    )
    assert "PAUSED" in seen
    done = sessionize(*args)
    assert done.returncode == 0, done.stderr[-3000:]

    revisions = read_committed(out, "session_revisions").to_pylist()
    assert {r["retracted"] for r in revisions} == {True, False}, "no revision and retraction"
    for name in OUTPUTS:
        assert same_rows(read_committed(out, name), read(clean, name)), name

    got = current_sessions(out)
    assert got.num_rows > 0
    batch = read(root / "batch" / "out", "sessions").select(got.schema.names)
    assert got.to_pylist() == without_flush_user(batch.cast(got.schema)).to_pylist()

    # A rewind to the batch before the first revision retires the later batches of every
    # output, the revision outputs among them, by their commit files.
    back = REVISING_BATCH - 1
    done = sessionize("rewind", "--checkpoint", str(tmp_path / "chk"), "--to-batch", str(back))
    assert done.returncode == 0, done.stderr[-3000:]
    for name in OUTPUTS:
        kept = read(clean, name)
        if kept.num_rows:
            kept = kept.filter(pc.field("batch_id") <= back)
        assert same_rows(read_committed(out, name), kept), name

    # Parquet on s3:// is not compacted, so nothing folds its revisions: said, not done.
    with pytest.raises(ConfigError, match="which is not compacted"):
        maintain(out, compact=True, say=lambda _line: None)
