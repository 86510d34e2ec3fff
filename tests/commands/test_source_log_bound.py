"""The file source's log stays bounded: a stream compacts it once per retention
(`SESSIONIZE_RETAIN_BATCHES`), so Spark keeps two compacted files (each listing every file
ever read) where its own interval (10) keeps one per 10 retained batches; a rewind across a
compaction and the rerun end equal to the uninterrupted run."""

from __future__ import annotations

import shutil
from pathlib import Path

from sessionize.commands.history import batch_history, open_checkpoint
from sessionize.commands.rewind import rewind
from sessionize.commands.stream import StreamOptions, run_stream
from sessionize.engines.checkpoint import seen_files
from tests.helpers import OUTPUTS, cli_env, generate, read_output, sessionize, stream_args

RETAIN = 3  # compactions at 2, 5, 8 (Spark's own interval, 10, would compact none)
FILES = 9


def kept_by_spark(last: int, interval: int, retain: int) -> set[str]:
    """The source log's files after batches 0..last, by Spark's rule (CompactibleFileStreamLog:
    after each batch, files before the compaction preceding the oldest retained batch go)."""
    kept: set[int] = set()
    for b in range(last + 1):
        kept.add(b)
        if interval <= b + 1 - retain:
            oldest = b + 1 - retain
            floor = oldest - oldest % interval - 1
            kept = {k for k in kept if k >= floor}
    return {f"{k}.compact" if (k + 1) % interval == 0 else str(k) for k in kept}


def source_log(run: Path) -> set[str]:
    return {p.name for p in (run / "chk" / "sources" / "0").iterdir() if p.name[0] != "."}


def test_the_source_log_keeps_two_compactions_and_rewinds_across_one(spark, tmp_path):
    inp = generate(
        tmp_path / "in", hours=3, files_per_hour=FILES // 3, users=40, events_per_hour=120
    )
    clean, run = tmp_path / "clean", tmp_path / "run"
    env = cli_env(SESSIONIZE_RETAIN_BATCHES=str(RETAIN))
    done = sessionize(*stream_args(inp, clean), env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    inputs = {p.relative_to(inp).as_posix() for p in inp.rglob("*.json*")}
    last = len(inputs) - 1
    assert last + 1 >= FILES
    names = source_log(clean)
    assert names == kept_by_spark(last, RETAIN, RETAIN), sorted(names)
    assert len([n for n in names if n.endswith(".compact")]) == 2

    shutil.copytree(clean, run)
    for name in ("sessionize.json", "sessionize-paths.json"):  # the copy writes its own
        path = run / "chk" / name
        path.write_text(path.read_text().replace(str(clean / "out"), str(run / "out")))
    # The oldest restorable batch: Spark restarts after it from its offsets and those of the
    # batch before, so history must not offer the oldest batch the logs keep.
    to = batch_history(open_checkpoint(str(run / "chk"))).restorable[0]
    compactions = [int(n.split(".")[0]) for n in names if n.endswith(".compact")]
    assert to < max(compactions)  # the rewind undoes a compaction
    rewind(str(run / "chk"), to, say=lambda _: None)
    assert max(int(n.split(".")[0]) for n in source_log(run)) == to
    again = StreamOptions(
        input=str(inp),
        output=str(run / "out"),
        checkpoint=str(run / "chk"),
        partitions=3,
        max_files_per_trigger=1,
    )
    records = run_stream(again, spark, on_batch=lambda _: None)
    assert [r["version"] for r in records] == list(range(to + 1, last + 1))
    seen = {
        Path(p.removeprefix("file:")).relative_to(inp).as_posix()
        for p in seen_files(str(run / "chk"))
    }
    assert seen == inputs
    for name in OUTPUTS:
        assert read_output(run / "out", name).equals(read_output(clean / "out", name)), name
    assert read_output(run / "out", "sessions").num_rows > 0
