"""The examples on the real engine (Spark, the store): a stream is killed with kill -9 after
publishing a batch whose record it had not written yet, and restarted; what the outputs hold
at the end equals the independent references of tests/stateful (plain loops over the events).

Two examples go through the kill: running_totals (state without event time: totals that must
continue across the restart, and a line that is no order, set aside in `invalid` once) and
alerts (string keys, a watermark and timers: failures that carry over the killed batch into
a later alert). dedup runs on the same engine paths as alerts (string keys, timers); its
rules are proved against its loop by tests/stateful/test_dedup.py, for any micro-batch
split."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path

import pyarrow as pa
import pyarrow.dataset as ds

from tests.helpers import cli_env, wait_for

from . import test_alerts, test_running_totals

ROOT = Path(__file__).resolve().parents[2]
MINUTE_US = 60_000_000


def _iso(us: int) -> str:
    return datetime.fromtimestamp(us / 1e6, UTC).isoformat()


def _orders() -> list[list[dict]]:
    amounts = iter(range(1, 100))
    return [
        [{"customer_id": c, "amount": float(next(amounts))} for c in batch]
        for batch in ([1, 2, 1], [2, 3], [1, 4, 4], [3])
    ]


def _logins() -> list[list[dict]]:
    plan = [("ann", 0, "failure"), ("ann", 2, "failure"), ("bob", 3, "failure"),
            ("ann", 4, "failure"), ("ann", 5, "success"), ("bob", 20, "failure"),
            ("bob", 21, "failure"), ("bob", 22, "failure"), ("ann", 30, "failure")]  # fmt: skip
    rows = [{"user": u, "event_time": m * MINUTE_US, "outcome": o} for u, m, o in plan]
    return [rows[0:3], rows[3:5], rows[5:7], rows[7:]]


def _write(inp: Path, split: list[list[dict]], bad: dict[int, str] | None = None) -> None:
    """One file per micro-batch, modified in order (files are read by modification time);
    `bad` adds a line to a batch's file."""
    inp.mkdir()
    for n, batch in enumerate(split):
        path = inp / f"{n:03d}.jsonl"
        rows = [{k: _iso(v) if k == "event_time" else v for k, v in row.items()} for row in batch]
        lines = [json.dumps(row) for row in rows] + ([bad[n]] if bad and n in bad else [])
        path.write_text("".join(line + "\n" for line in lines))
        os.utime(path, (1_000_000 + n, 1_000_000 + n))


def _run(
    module: str, tmp: Path, env: dict[str, str], log: Path | None = None, package="examples"
) -> subprocess.Popen:
    args = [
        sys.executable,
        "-m",
        f"{package}.{module}",
        "--input",
        str(tmp / "in"),
        "--output",
        str(tmp / "out"),
        "--checkpoint",
        str(tmp / "chk"),
        "--files-per-trigger",
        "1",
        "--partitions",
        "2",
    ]
    return subprocess.Popen(
        args,
        cwd=ROOT,
        stdout=log.open("w") if log else subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
        start_new_session=True,
    )


def _killed_then_finished(tmp: dict[str, Path]) -> None:
    """Kill -9 each example after its batch 1 is published, then restart them. The examples
    run side by side, so their JVM starts and trigger waits overlap."""
    procs = {m: _run(m, t, cli_env(SESSIONIZE_PAUSE_AT="after-publish:1")) for m, t in tmp.items()}
    for proc in procs.values():
        wait_for(proc, "PAUSED after-publish 1")
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    # The restarts write to files: pipes read one after the other could fill and stall.
    procs = {m: _run(m, t, cli_env(), t / "restart.log") for m, t in tmp.items()}
    for module, proc in procs.items():
        proc.wait(timeout=600)
        out = (tmp[module] / "restart.log").read_text()
        assert proc.returncode == 0, f"{module}: {out[-3000:]}"
        assert "batch 3:" in out, module


def read_output(root: Path, name: str) -> pa.Table:
    """Every published batch of output `name`, with its `batch_id`."""
    return ds.dataset(str(root / name), format="parquet", partitioning="hive").to_table()


def _us(table: pa.Table, column: str) -> list[int]:
    return table.column(column).cast(pa.timestamp("us", tz="UTC")).cast(pa.int64()).to_pylist()


MODULES = {"running_totals": _orders, "alerts": _logins}
# A line of the killed batch that is no order: it goes to `invalid` once, with its reason.
BAD_ORDER = '{"amount": 7.5}'


def test_each_example_killed_mid_stream_and_restarted_equals_the_reference(tmp_path):
    splits = {module: make() for module, make in MODULES.items()}
    tmp = {module: tmp_path / module for module in MODULES}
    for module, split in splits.items():
        tmp[module].mkdir()
        _write(tmp[module] / "in", split, {1: BAD_ORDER} if module == "running_totals" else None)
    _killed_then_finished(tmp)

    split, out = splits["running_totals"], tmp["running_totals"] / "out"
    totals = read_output(out, "totals")
    got = [set() for _ in split]
    for row in totals.to_pylist():
        got[row["batch_id"]].add((row["customer_id"], row["orders"], row["total"]))
    assert got == test_running_totals.reference(split)
    invalid = read_output(out, "invalid").to_pylist()
    source = f"file:{tmp['running_totals'] / 'in' / '001.jsonl'}"
    assert invalid == [
        {"raw": BAD_ORDER, "reason": "missing customer_id", "source": source, "batch_id": 1}
    ]

    split, out = splits["alerts"], tmp["alerts"] / "out"
    alerts = read_output(out, "alerts")
    got_alerts = Counter(
        zip(
            alerts["user"].to_pylist(),
            _us(alerts, "alert_time"),
            _us(alerts, "first_failure"),
            strict=True,
        )
    )
    expected = test_alerts.reference([row for batch in split for row in batch], 3)
    assert got_alerts == expected and sum(expected.values()) == 2
