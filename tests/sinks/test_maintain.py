"""`sessionize maintain`: leftovers of interrupted runs go, committed rows stay; Delta tables
are compacted and vacuumed; a running driver (a stream included) makes it refuse with one
line."""

from __future__ import annotations

import time

import pyarrow as pa
import pyarrow.fs as pafs
import pytest

from sessionize.commands.maintain import maintain
from sessionize.commands.stream import StreamOptions
from sessionize.engines.checkpoint import checkpoint_lease, output_lease
from sessionize.errors import ConfigError, LeaseHeld
from sessionize.fs import resolve_fs
from sessionize.sinks.registry import open_sink
from sessionize.sources.registry import open_stream
from tests.helpers import cli_env, generate, sessionize
from tests.sinks.conftest import make_sink
from tests.sinks.rows import sessions, stage
from tests.sinks.test_exactly_once import _expected, _seen


def _files(root: str, under: str) -> list[str]:
    fs, base = resolve_fs(root)
    sel = pafs.FileSelector(f"{base}/{under}", allow_not_found=True, recursive=True)
    return sorted(
        i.path[len(base) + 1 :] for i in fs.get_file_info(sel) if i.type == pafs.FileType.File
    )


def _put(root: str, rel: str) -> None:
    fs, base = resolve_fs(root)
    fs.create_dir(f"{base}/{rel.rsplit('/', 1)[0]}", recursive=True)
    with fs.open_output_stream(f"{base}/{rel}") as f:
        f.write(b"left over")


@pytest.mark.parametrize("kind", ["parquet", "parquet-s3", "delta"])
def test_leftovers_go_and_committed_rows_stay(kind, root):
    sink = make_sink(kind, root)
    for b in (0, 1, 1):  # batch 1 republished
        sink.clear_staging(b)
        stage(sink, b, "new" if b else "old")
        sink.publish(b)
    _put(root, "_trash/sessions/batch_id=1-0123abcd/part-00000.parquet")  # a crash's leftovers
    _put(root, "_staging/sessions/batch_id=0/part-00009.parquet")
    # A revising job's outputs (--revise-within) too, which maintain is not told of.
    _put(root, "_staging/session_revisions/batch_id=0/part-00009.parquet")
    stray = "sessions/batch_id=0/session_date=2026-11-01/part-00000-deadbeef0000.parquet"
    stray_revision = "session_revisions/batch_id=0/part-00000-deadbeef0000.parquet"
    if kind != "parquet":  # a copy no commit names (a local batch directory has no such)
        _put(root, stray)
        _put(root, stray_revision)
    sink.clear_staging(1)  # batch 1 staged again, not yet published: an open attempt, which
    stage(sink, 1, "open")  # its restart clears itself; it stays
    staged_1 = _files(root, "_staging/sessions/batch_id=1")
    maintain(root, say=lambda _line: None)
    assert _files(root, "_trash") == []
    assert _files(root, "_staging/sessions/batch_id=0") == []
    assert _files(root, "_staging/session_revisions") == []
    assert _files(root, "_staging/sessions/batch_id=1") == staged_1 != []
    # Parquet on S3 drops it; in a Delta table's directory it is vacuum's (after retention).
    assert (stray in _files(root, "sessions")) == (kind == "delta")
    assert (stray_revision in _files(root, "session_revisions")) == (kind == "delta")
    assert _seen(kind, root, "sessions") == _expected(0, "old") + _expected(1, "new")


def test_delta_compact_and_vacuum_keep_the_rows(tmp_path):
    root = str(tmp_path / "out")
    sink = make_sink("delta", root)
    for b in (0, 1, 2, 1):
        sink.clear_staging(b)
        stage(sink, b, f"a{b}")
        sink.publish(b)
    before = len(sink.table("sessions").file_uris())
    expected = _seen("delta", root, "sessions")
    lines = []
    report = maintain(root, compact=True, vacuum_hours=0, say=lines.append)
    assert len(sink.table("sessions").file_uris()) < before
    assert report["tables"]["sessions"]["vacuumed_files"] > 0
    assert _seen("delta", root, "sessions") == expected
    assert any(line.startswith("sessions: compacted") for line in lines), lines
    with pytest.raises(ConfigError, match="applies to Delta outputs"):
        _plain(tmp_path)


def test_delta_maintain_compacts_and_vacuums_the_side_tables_of_revisions(tmp_path):
    """`sessions_superseded` (`--revise-within`) is no output a plain sink knows by name:
    `maintain` keeps it too."""
    root = str(tmp_path / "out")
    sink = open_sink(root, "delta", job="job-a", revise=True)
    revisions = sink.outputs.schema("session_revisions")
    for b in (0, 1, 2):  # s1 written, then revised twice: two rows set aside
        sink.clear_staging(b)
        if b == 0:
            sink.write_part("sessions", 0, 0, sessions(["s1", "s2"]))
        else:
            rows = sessions(["s1"]).append_column("revision", pa.array([b], pa.int64()))
            rows = rows.append_column("retracted", pa.array([False]))
            sink.write_part("session_revisions", b, 0, rows.select(revisions.names).cast(revisions))
        sink.publish(b)
    side = sink.table("sessions_superseded")
    assert sorted(r["revision"] for r in side.to_pyarrow_table().to_pylist()) == [0, 1]
    report = maintain(root, compact=True, vacuum_hours=0, say=lambda _line: None)
    assert report["tables"]["sessions_superseded"]["vacuumed_files"] > 0
    assert len(sink.table("sessions_superseded").file_uris()) == 1


def _plain(tmp_path) -> None:
    root = str(tmp_path / "plain")
    sink = make_sink("parquet", root)
    sink.clear_staging(0)
    stage(sink, 0, "p")
    sink.publish(0)
    maintain(root, vacuum_hours=1)


def test_refused_while_a_driver_holds_the_output_or_the_checkpoint(bucket_uri, tmp_path):
    sink = make_sink("delta-s3", bucket_uri)
    sink.clear_staging(0)
    stage(sink, 0, "p")
    sink.publish(0)
    with output_lease(bucket_uri):
        done = sessionize("maintain", "--output", bucket_uri, "--compact", env=cli_env())
    assert done.returncode == 2
    (line,) = done.stderr.strip().splitlines()
    assert line.startswith("sessionize: error: output s3://") and "is in use by" in line, line
    with checkpoint_lease(str(tmp_path / "chk")), pytest.raises(LeaseHeld):
        maintain(bucket_uri, checkpoint=str(tmp_path / "chk"), say=lambda _line: None)
    maintain(bucket_uri, compact=True, say=lambda _line: None)  # free again


def test_compact_waits_for_the_stream_that_writes_the_output(spark, tmp_path):
    """`maintain --compact` without --checkpoint on a running stream's output: refused in one
    line (the stream holds the output's lease); once the stream stopped, it compacts."""
    inp = generate(tmp_path / "in", hours=1, users=40, events_per_hour=400, files_per_hour=2)
    out, chk = tmp_path / "out", tmp_path / "chk"
    opts = StreamOptions(
        input=str(inp),
        output=str(out),
        checkpoint=str(chk),
        partitions=2,
        trigger="processing-time=1s",
        max_files_per_trigger=1,
    )
    run = opts.sessionizer().start(
        lambda: open_stream(spark, opts.input, opts.input_options(), opts.mapping),
        output=opts.output,
        checkpoint=opts.checkpoint,
        trigger=opts.trigger,
        output_format="parquet",
        input_name=opts.input,
        on_batch=lambda _: None,
    )
    try:
        while len(run.records) < 2:  # both files published: the stream idles, still running
            assert run.query.isActive, run.query.exception()
            time.sleep(0.5)
        done = sessionize("maintain", "--output", str(out), "--compact", env=cli_env())
        assert done.returncode == 2, done.stdout + done.stderr
        (line,) = done.stderr.strip().splitlines()
        assert line.startswith(f"sessionize: error: output {out} is in use by the driver on "), line
        assert not (out / "_compacted").exists()
    finally:
        run.query.stop()
        run.wait()
    done = sessionize("maintain", "--output", str(out), "--compact", env=cli_env())
    assert done.returncode == 0, done.stderr
    assert "sessions: compacted 2 batches" in done.stdout, done.stdout
