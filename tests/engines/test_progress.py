"""The progress log: one JSON line per committed batch, rotated by size."""

from __future__ import annotations

import json

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
