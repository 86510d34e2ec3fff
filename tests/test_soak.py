"""The soak benchmark, short: a continuous stream well past the retention of its logs.

`benchmarks/soak.py` feeds a file tree two batches ahead of `sessionize stream
--trigger processing-time=...` for 40 micro-batches, sampling every 10, with 5 batches
retained (`SESSIONIZE_RETAIN_BATCHES`, 100 by default) and a `files` state whose delta
chains are at most 5 long (deltas stay while a retained version is built on them), so that
retention trims early: from batch 20 on, three samples over two full clean-up cycles. Once
it trims, the checkpoint's and the state's file counts stop growing (samples taken at the
same point of the store's 10-batch clean-up cycle), and so do the driver's open handles
and threads; Spark's offset and commit logs hold the retained batches, its file-source log
(compacted once per retention) its last two compacted files and the plain files after the
older one. Sizes and counts only: never durations.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import cli_env

SOAK = Path(__file__).parents[1] / "benchmarks" / "soak.py"
BATCHES, EVERY, RETAINED = 40, 10, 5


@pytest.mark.timeout(1800)
def test_a_long_stream_stops_growing_once_retention_trims(tmp_path):
    work, out = tmp_path / "work", tmp_path / "soak.json"
    subprocess.run(
        [
            sys.executable,
            str(SOAK),
            "--batches",
            str(BATCHES),
            "--every",
            str(EVERY),
            "--events",
            "50",
            "--users",
            "300",
            "--partitions",
            "1",
            "--trigger",
            "100ms",
            "--snapshot-every",
            str(RETAINED),
            "--keep",
            str(work),
            "--json",
            str(out),
        ],
        env=cli_env(SESSIONIZE_RETAIN_BATCHES=str(RETAINED)),
        check=False,
        timeout=1700,
    )
    samples = json.loads(out.read_text())["samples"]
    assert [s["batches"] // EVERY for s in samples] == list(range(1, BATCHES // EVERY + 1))
    trimmed = [s for s in samples if s["batches"] >= 2 * RETAINED + EVERY]
    first, last = trimmed[0], trimmed[-1]
    assert last["batches"] - first["batches"] >= 2 * EVERY
    # Unbounded, they would grow by about 6 and 3 files a batch: 120 and 60 here.
    assert last["checkpoint_files"] <= first["checkpoint_files"] + 14, (first, last)
    assert last["state_files"] <= first["state_files"] + 12, (first, last)
    assert last["driver_py_fds"] <= first["driver_py_fds"] + 2
    assert last["driver_jvm_fds"] <= first["driver_jvm_fds"] + 10
    assert last["driver_py_threads"] <= first["driver_py_threads"] + 2
    chk = work / "chk"
    for log in ("offsets", "commits"):
        entries = [p for p in (chk / log).iterdir() if p.name.isdigit()]
        assert len(entries) <= RETAINED + 2, log
    source_log = [p.name for p in (chk / "sources" / "0").iterdir() if p.name[0].isdigit()]
    compacted = [n for n in source_log if n.endswith(".compact")]
    # Spark keeps the compacted file before the latest and the plain files after it.
    assert len(compacted) <= 2 and len(source_log) <= 2 * RETAINED + 1, sorted(source_log)
