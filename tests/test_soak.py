"""The soak benchmark, short: a continuous stream past the retention of its logs and state.

`benchmarks/soak.py` feeds a file tree two batches ahead of `sessionize stream
--trigger processing-time=...` for 130 micro-batches (retention keeps 100), sampling
every 20. Once retention has started trimming, the checkpoint's and the state's file
counts and sizes stop growing, and so do the driver's open handles and threads; Spark's
file-source log keeps no more than its latest compacted file, the plain files after it and
the redundant ones of the last minute. Sizes and counts only: never durations.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from sessionize.engines.runner import RETAIN
from tests.helpers import cli_env

SOAK = Path(__file__).parents[1] / "benchmarks" / "soak.py"
BATCHES, EVERY = 130, 20


def test_a_long_stream_stops_growing_once_retention_trims(tmp_path):
    work, out = tmp_path / "work", tmp_path / "soak.json"
    subprocess.run(
        [sys.executable, str(SOAK), "--batches", str(BATCHES), "--every", str(EVERY),
         "--events", "50", "--users", "300", "--partitions", "1", "--trigger", "100ms",
         "--keep", str(work), "--json", str(out)],
        env=cli_env(), check=False, timeout=1500,
    )  # fmt: skip
    samples = json.loads(out.read_text())["samples"]
    assert [s["batches"] for s in samples] == list(range(EVERY, BATCHES + 1, EVERY))
    # Samples once the logs and the state hold RETAIN batches (trimmed every 10).
    trimmed = [s for s in samples if s["batches"] >= RETAIN + 20]
    assert len(trimmed) >= 2
    first, last = trimmed[0], trimmed[-1]
    assert last["checkpoint_files"] <= first["checkpoint_files"] + 24  # a compaction cycle
    assert last["state_files"] <= first["state_files"] + 25  # a clean-up cycle
    assert last["driver_py_fds"] <= first["driver_py_fds"] + 2
    assert last["driver_jvm_fds"] <= first["driver_jvm_fds"] + 10
    assert last["driver_py_threads"] <= first["driver_py_threads"] + 2
    chk = work / "chk"
    for log in ("offsets", "commits"):
        entries = [p for p in (chk / log).iterdir() if p.name.isdigit()]
        assert len(entries) <= RETAIN + 1, log
    source_log = [p.name for p in (chk / "sources" / "0").iterdir() if p.name[0].isdigit()]
    compacted = [n for n in source_log if n.endswith(".compact")]
    # Redundant compacted files live a minute: at most a few at any trigger.
    assert len(source_log) - len(compacted) <= 10 and len(compacted) <= 7, sorted(source_log)
