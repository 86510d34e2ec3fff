"""`sessionize status` on files streams and batch jobs: driver, last batch, input ahead."""

from __future__ import annotations

import json
import os
from datetime import UTC, datetime

from sessionize.cli import main as cli_main
from sessionize.commands.batch import BatchOptions, run_batch
from sessionize.commands.status import batch_status, stream_status
from sessionize.commands.stream import StreamOptions, run_stream
from sessionize.state.lease import DirectoryLeaseRecords, Lease
from tests.helpers import generate


def test_a_stopped_files_stream_and_the_files_that_arrived_since(spark, tmp_path, capsys):
    inp = generate(tmp_path / "in", hours=1)
    chk = tmp_path / "chk"
    opts = StreamOptions(
        input=str(inp),
        output=str(tmp_path / "out"),
        checkpoint=str(chk),
        partitions=2,
        max_files_per_trigger=1,
    )
    records = run_stream(opts, spark, on_batch=lambda _: None)
    status = stream_status(str(chk))
    assert status["driver"]["running"] is False and status["driver"]["pid"] == os.getpid()
    assert status["last_batch"] == status["committed_batch"] == records[-1]["version"]
    assert status["open_sessions"] == records[-1]["batch"]["open_sessions"]
    assert status["totals"]["records"] == sum(r["batch"]["records"] for r in records)
    assert status["input_ahead"] == {"unread": {"files": 0, "bytes": 0}}
    late = inp / "event_date=2026-11-01" / "event_hour=05" / "part-00009.json"
    late.parent.mkdir(parents=True)
    late.write_text('{"user_id": 1}\n')
    (inp / "event_date=2026-11-01" / "_ignored.json").write_text("x\n")
    assert stream_status(str(chk))["input_ahead"] == {"unread": {"files": 1, "bytes": 15}}
    cli_main(["status", "--checkpoint", str(chk), "--json"])
    printed = json.loads(capsys.readouterr().out)
    assert printed["last_batch"] == records[-1]["version"]
    cli_main(["status", "--checkpoint", str(chk)])
    text = capsys.readouterr().out
    assert "driver: not running" in text and "input ahead: 1 file (15 bytes)" in text


def test_a_running_driver_is_named(tmp_path):
    chk = tmp_path / "chk"
    chk.mkdir()
    (chk / "sessionize.json").write_text('{"state": "files"}')
    lease = Lease(DirectoryLeaseRecords(str(chk / "_lease")), "checkpoint")
    lease.acquire()
    try:
        driver = stream_status(str(chk))["driver"]
        assert driver["running"] is True and driver["pid"] == os.getpid()
    finally:
        lease.release()
    assert stream_status(str(chk))["driver"]["running"] is False


def test_a_batch_job(spark, tmp_path):
    inp = generate(tmp_path / "in", hours=2)
    start = datetime(2026, 11, 1, tzinfo=UTC)
    opts = BatchOptions(
        input=str(inp),
        output=str(tmp_path / "out"),
        start=start,
        end=start.replace(hour=1),
        partitions=2,
    )
    records = run_batch(opts, spark, on_hour=lambda _: None)
    status = batch_status(str(tmp_path / "out"))
    assert status["last_batch"] == 2026110101 and status["driver"]["running"] is False
    assert status["totals"]["sessions_out"] == records[-1]["totals"]["sessions_out"] > 0


def test_batch_in_a_terminal_shows_hours_done_and_time_left(tmp_path):
    """The CLI under a pseudo-terminal draws the bar."""
    import pty
    import subprocess
    import sys

    from tests.helpers import cli_env

    inp = generate(tmp_path / "in", hours=2, users=50, events_per_hour=300)

    args = [
        sys.executable,
        "-m",
        "sessionize",
        "batch",
        "--input",
        str(inp),
        "--output",
        str(tmp_path / "out"),
        "--from",
        "2026-11-01T00",
        "--to",
        "2026-11-01T01",
    ]

    leader, follower = pty.openpty()
    proc = subprocess.Popen(args, stdout=follower, stderr=subprocess.DEVNULL, env=cli_env())
    os.close(follower)
    seen = b""
    while True:
        try:
            chunk = os.read(leader, 65536)
        except OSError:
            break
        if not chunk:
            break
        seen += chunk
    assert proc.wait(timeout=300) == 0
    text = seen.decode(errors="replace")
    assert "hour 2026-11-01T01: " in text and "2/2" in text and "left" in text
    # Piped, the bar is not drawn: tests/cluster/test_connect.py's `batch` runs piped.
