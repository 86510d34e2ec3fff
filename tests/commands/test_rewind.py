"""`sessionize rewind` and `history` on real checkpoints: a rewind in the middle of a files
stream, rerun, equals an uninterrupted run; every refusal changes nothing; a rewind killed
half way completes when run again, and a stream refuses to start until it does; readers
polling the outputs through it all see whole batches only."""

from __future__ import annotations

import hashlib
import json
import shutil
from collections import Counter
from pathlib import Path

import pyarrow.compute as pc
import pytest

from sessionize.commands.history import batch_history, history_lines, open_checkpoint
from sessionize.commands.rewind import rewind
from sessionize.commands.stream import StreamOptions, run_stream
from sessionize.config import SessionRules
from sessionize.engines.checkpoint import checkpoint_lease
from sessionize.state import open_backend
from tests.helpers import (
    OUTPUTS,
    assert_same_as_clean,
    cli_env,
    generate,
    read_output,
    run_until_killed,
    sessionize,
    stream_args,
)
from tests.readers import polling_sessions


@pytest.fixture(scope="module")
def first_run(spark, tmp_path_factory):
    """An uninterrupted run over one hour in 3 files plus its late file (batches 0..3), and
    a copy of its outputs: what every rewound and rerun copy must end equal to."""
    root = tmp_path_factory.mktemp("rewind")
    inp = generate(root / "in", hours=1, files_per_hour=3, invalid_rate=0.01, late_rate=0.01)
    run_stream(opts(inp, root / "clean"), spark, on_batch=lambda _: None)
    return root, inp


def opts(inp: Path, run: Path, **kw) -> StreamOptions:
    """The options of tests.helpers.stream_args, for a run in this process."""
    return StreamOptions(
        input=str(inp),
        output=str(run / "out"),
        checkpoint=str(run / "chk"),
        partitions=3,
        max_files_per_trigger=1,
        **kw,
    )


def tree(root: Path) -> dict[str, str]:
    """Every file under `root` (leases aside: taking one is not a change) and its content."""
    return {
        str(p.relative_to(root)): hashlib.sha1(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file() and "_lease" not in p.parts
    }


def one_error(result, *words: str) -> str:
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2 and len(lines) == 1, result.stderr[-2000:]
    assert lines[0].startswith("sessionize: error: "), lines[0]
    for w in words:
        assert w in lines[0], lines[0]
    return lines[0]


def own_outputs(run: Path) -> None:
    """A copied run writes its own outputs: its checkpoint records them (both files)."""
    for name in ("sessionize.json", "sessionize-paths.json"):
        record = json.loads((run / "chk" / name).read_text())
        record["output"] = str(run / "out")
        (run / "chk" / name).write_text(json.dumps(record))


def committed(run: Path) -> list[int]:
    return sorted(int(p.name) for p in (run / "chk" / "commits").iterdir() if p.name.isdigit())


def test_files_stream_rewind_refusals_kill_and_rerun(spark, first_run):
    root, inp = first_run
    run = root / "files"
    shutil.copytree(root / "clean", run)
    chk = str(run / "chk")
    own_outputs(run)
    sessions = read_output(run / "out", "sessions")
    assert committed(run) == [0, 1, 2, 3]

    shown = sessionize("history", "--checkpoint", chk)
    lines = shown.stdout.splitlines()
    assert shown.returncode == 0 and len(lines) == 5, shown.stdout + shown.stderr
    for b in range(4):
        n = pc.sum(pc.equal(sessions["batch_id"], b)).as_py() or 0
        assert lines[b].startswith(f"batch {b} ") and f" {n:,} sessions out" in lines[b]
        assert "read 1 file " in lines[b]
    assert lines[-1].startswith("oldest restorable batch: 0 (it is the first batch)")

    # Refusals and the dry run change nothing.
    before = tree(run)
    one_error(sessionize("rewind", "--checkpoint", chk, "--to-batch", "99"), "not a committed")
    with checkpoint_lease(chk):
        one_error(sessionize("rewind", "--checkpoint", chk, "--to-batch", "1"), "in use by")
    said: list[str] = []
    rewind(chk, 1, dry_run=True, say=said.append)
    dry = "\n".join(said)
    assert "undo: batches 2..3 (2)" in dry and "(2 files of the file source)" in dry
    for name in OUTPUTS:
        table = read_output(run / "out", name)
        n = pc.sum(pc.greater_equal(table["batch_id"], 2)).as_py() if table.num_rows else 0
        assert f" {n or 0} {name}" in dry, (name, dry)
    assert tree(run) == before

    # DuckDB and pyarrow poll the sessions through the rewind, its kill, its completion and
    # the rerun: never a session twice or part of a batch; a read that listed a file just
    # before the rewind retired it reads again (README) and is then clean.
    whole = Counter(sessions["batch_id"].to_pylist())
    with polling_sessions(run / "out" / "sessions", whole, retires=True) as polled:
        # Killed after the outputs were retired: readers see batches 0..1, whole.
        env = cli_env(SESSIONIZE_PAUSE_AT="rewind-outputs:1")
        run_until_killed(["rewind", "--checkpoint", chk, "--to-batch", "1"], "PAUSED", env)
        kept = read_output(run / "out", "sessions")
        assert kept.equals(sessions.filter(pc.less_equal(sessions["batch_id"], 1)))
        one_error(sessionize(*stream_args(inp, run)), "unfinished rewind to batch 1")
        one_error(sessionize("rewind", "--checkpoint", chk, "--to-batch", "0"), "unfinished")
        rewind(chk, 1, say=said.append)
        for log in ("commits", "offsets", "sources/0"):
            names = sorted(p.name for p in (run / "chk" / log).iterdir() if p.name[0] != ".")
            assert names == ["0", "1"], log
        # Settings that are part of the state cannot change on a rewind to N >= 0.
        one_error(sessionize(*stream_args(inp, run), "--gap", "20m"), "--gap")

        run_stream(opts(inp, run), spark, on_batch=lambda _: None)
    polled.assert_clean()
    assert_same_as_clean(root, run)

    # Retention: once the store keeps job records from batch 2 on, that is the oldest.
    open_backend(f"files:{chk}/state").trim_job_records("sessionize", 2)
    ck = open_checkpoint(chk)
    lines = history_lines(ck, batch_history(ck))
    assert lines[0].startswith("batch 2 ")
    assert lines[-1].startswith("oldest restorable batch: 2 (the state's job records keep")
    before = tree(run)
    one_error(sessionize("rewind", "--checkpoint", chk, "--to-batch", "1"), "oldest restorable")
    assert tree(run) == before

    # -1 starts over from nothing and accepts new settings (here in one batch), also when
    # its first attempt was killed after the recorded settings were gone.
    env = cli_env(SESSIONIZE_PAUSE_AT="rewind-logs:-1")
    run_until_killed(["rewind", "--checkpoint", chk, "--to-batch", "-1"], "PAUSED", env)
    assert not (run / "chk" / "sessionize.json").exists()
    rewind(chk, -1, say=said.append)
    assert not list((run / "out").glob("*/batch_id=*"))
    again = StreamOptions(
        input=str(inp),
        output=str(run / "out"),
        checkpoint=chk,
        partitions=2,
        rules=SessionRules(gap_us=20 * 60_000_000),
    )
    records = run_stream(again, spark, on_batch=lambda _: None)
    assert [r["version"] for r in records] == [0]
    assert read_output(run / "out", "sessions").num_rows > 0


def test_spark_rocksdb_rewind_past_a_compacted_source_log_equals_an_uninterrupted_run(
    spark, first_run
):
    """Spark's own state (RocksDB) goes back with the logs, and the file source's log goes
    back past a compaction: with a compaction every 2 batches, batch 0's files are listed
    only in `1.compact`, which the rewind to 0 deletes. The rerun of batches 1..3 builds on
    Spark's state of batch 0, reads exactly the files of batches 1..3, and ends equal to
    the uninterrupted run."""
    root, inp = first_run
    clean, run = root / "rocksdb-clean", root / "rocksdb"
    key = "spark.sql.streaming.fileSource.log.compactInterval"
    spark.conf.set(key, "2")
    try:
        run_stream(opts(inp, clean, state="spark-rocksdb"), spark, on_batch=lambda _: None)
        shutil.copytree(clean, run)
        own_outputs(run)
        sources = run / "chk" / "sources" / "0"
        assert committed(run) == [0, 1, 2, 3] and (sources / "1.compact").exists()
        said: list[str] = []
        rewind(str(run / "chk"), 0, say=said.append)
        assert "state: drop Spark's state versions 2..4 of 3 partitions" in said, said
        assert committed(run) == [0]
        assert sorted(p.name for p in sources.iterdir() if p.name[0] != ".") == ["0"]
        run_stream(opts(inp, run, state="spark-rocksdb"), spark, on_batch=lambda _: None)
    finally:
        spark.conf.unset(key)
    assert committed(run) == [0, 1, 2, 3]
    for name in OUTPUTS:
        assert read_output(run / "out", name).equals(read_output(clean / "out", name)), name
    assert read_output(run / "out", "sessions").num_rows > 0


def test_a_progress_log_reached_through_a_symlink_is_trimmed_where_it_is(tmp_path):
    """The rewrite goes to the link's target: the link stays a link, the target loses the
    undone batches' lines (it used to be replaced by a regular file at the link's path)."""
    from sessionize.commands.rewind import _trim_progress

    real = tmp_path / "logs" / "progress.jsonl"
    real.parent.mkdir()
    real.write_text("".join(json.dumps({"version": v}) + "\n" for v in range(4)))
    link = tmp_path / "progress.jsonl"
    link.symlink_to(real)
    _trim_progress(str(link), 1)
    assert link.is_symlink() and link.resolve() == real
    assert [json.loads(line)["version"] for line in real.read_text().splitlines()] == [0, 1]
