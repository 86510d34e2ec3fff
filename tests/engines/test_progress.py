"""The progress log: one JSON line per committed batch, rotated by size."""

from __future__ import annotations

import json
from pathlib import Path

from sessionize.engines.progress import ProgressLog, read_progress


def test_one_line_per_batch_with_commit_time(tmp_path):
    log = ProgressLog(str(tmp_path / "p" / "progress.jsonl"))
    log.append({"version": 0, "batch": {"records": 3}})
    log.append({"version": 1, "batch": {"records": 5}})
    lines = (tmp_path / "p" / "progress.jsonl").read_text().splitlines()
    assert [json.loads(x)["version"] for x in lines] == [0, 1]
    assert all(json.loads(x)["committed_at"].endswith("+00:00") for x in lines)


def test_rotation_keeps_the_newest_files_and_reads_back_in_order(tmp_path):
    path = str(tmp_path / "progress.jsonl")
    log = ProgressLog(path, max_bytes=200, keep=2)
    for v in range(20):
        log.append({"version": v, "pad": "x" * 60})
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == ["progress.jsonl", "progress.jsonl.1", "progress.jsonl.2"]
    assert all(p.stat().st_size <= 200 for p in tmp_path.iterdir())
    versions = [r["version"] for r in read_progress(path)]
    assert versions == sorted(versions) and versions[-1] == 19 and len(versions) < 20


def test_a_rerun_batch_keeps_its_last_line(tmp_path):
    path = str(tmp_path / "progress.jsonl")
    log = ProgressLog(path)
    log.append({"version": 0, "n": 1})
    log.append({"version": 1, "n": 1})
    log.append({"version": 1, "n": 2})
    assert [(r["version"], r["n"]) for r in read_progress(path)] == [(0, 1), (1, 2)]


def test_a_batch_that_reads_two_logged_file_batches_counts_both(spark, tmp_path):
    """A driver that dies after the file source logged a batch's file and before the offset
    log names the batch leaves the source's log a batch ahead: the restart reads two log
    batches (two files) in one query batch, and its record counts both."""
    import shutil

    from sessionize.commands.stream import StreamOptions, run_stream
    from tests.helpers import generate

    pool = generate(tmp_path / "pool", hours=1, users=30, events_per_hour=300, files_per_hour=3)
    files = sorted(pool.rglob("*.json"), key=lambda p: p.stat().st_mtime)
    inp, chk = tmp_path / "in", tmp_path / "chk"

    def arrive(f: Path) -> None:
        (inp / f.parent.relative_to(pool)).mkdir(parents=True, exist_ok=True)
        shutil.copy2(f, inp / f.relative_to(pool))

    opts = StreamOptions(
        input=str(inp),
        output=str(tmp_path / "out"),
        checkpoint=str(chk),
        partitions=2,
        max_files_per_trigger=1,
    )
    for f in files[:2]:  # batches 0 and 1, a file each
        arrive(f)
        run_stream(opts, spark, on_batch=lambda _: None)
    for log in ("offsets", "commits"):  # as the driver left it: batch 1's file logged only
        for name in ("1", ".1.crc"):  # (Hadoop's checksum file beside each entry)
            (chk / log / name).unlink()
    arrive(files[2])
    records = run_stream(opts, spark, on_batch=lambda _: None)

    assert [r["version"] for r in records] == [1]
    lines = sum(len(f.read_text().splitlines()) for f in files[1:])
    assert records[0]["batch"]["records"] == lines  # the batch read both files
    assert records[0]["input"]["files"] == 2
    logged = [json.loads(x) for x in (chk / "progress.jsonl").read_text().splitlines()]
    assert logged[-1]["version"] == 1 and logged[-1]["input"]["files"] == 2


def test_a_run_with_nothing_to_do_says_so_in_one_line(spark, tmp_path):
    """A stream that finds no new input commits no batch, and says so rather than nothing:
    a new checkpoint over an empty tree, then a resumed one after its input was read."""
    from sessionize.commands.stream import StreamOptions, run_stream
    from tests.helpers import generate

    inp = tmp_path / "in"
    inp.mkdir()
    opts = StreamOptions(
        input=str(inp), output=str(tmp_path / "out"), checkpoint=str(tmp_path / "chk"), partitions=2
    )
    lines: list[str] = []
    assert run_stream(opts, spark, on_batch=lines.append) == []
    assert lines == ["no input yet: no batch to run (the next run starts at batch 0)"]
    generate(inp, hours=1, users=20, events_per_hour=100, files_per_hour=1)
    records = run_stream(opts, spark, on_batch=lambda _: None)
    lines.clear()
    assert run_stream(opts, spark, on_batch=lines.append) == []
    assert lines == [f"no new input since batch {records[-1]['version']}: no batch to run"]
