"""kill -9 in the middle of a publish, and the S3 server stopped in the middle of one."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

from sessionize import faults
from sessionize.errors import SinkError
from tests.s3_fixtures import _script
from tests.sinks.conftest import REPO, make_sink
from tests.sinks.rows import stage
from tests.sinks.test_exactly_once import _expected, _seen


def _publish_until_paused(kind: str, root: str, point: str) -> None:
    env = {**os.environ, "SESSIONIZE_PAUSE_AT": point}
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.sinks.publish_proc", kind, root, "0", "new"],
        cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        start_new_session=True,
    )  # fmt: skip
    try:
        line = proc.stdout.readline()
        assert line.startswith("PAUSED"), f"no pause: {line!r} {proc.stderr.read()[-2000:]}"
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def test_kill_after_one_output_then_rerun(kind, root):
    sink = make_sink(kind, root)
    sink.clear_staging(0)
    stage(sink, 0, "old")
    sink.publish(0)
    # `sessions` is published first: killed there, files show the new attempt there and the
    # old one in the others, each whole; PostgreSQL commits all outputs in one transaction,
    # so every output still shows the old attempt.
    _publish_until_paused(kind, root, "published-sessions:0")
    sessions = "old" if kind == "postgresql" else "new"
    assert _seen(kind, root, "sessions") == _expected(0, sessions)
    assert _seen(kind, root, "invalid_events") == _expected(0, "old")
    sink.clear_staging(0)  # the restarted job runs the batch again
    stage(sink, 0, "new")
    sink.publish(0)
    for name in ("sessions", "invalid_events"):
        assert _seen(kind, root, name) == _expected(0, "new")


@pytest.mark.parametrize("kind", ["parquet-s3", "delta-s3"])
def test_s3_down_mid_publish_is_one_line_and_a_retry_completes(kind, root, monkeypatch):
    sink = make_sink(kind, root)
    sink.clear_staging(0)
    stage(sink, 0, "old")
    sink.publish(0)
    sink.clear_staging(0)
    stage(sink, 0, "new")
    real = faults.pause_point

    def stop_server(name: str, version: int) -> None:
        if name == "published-sessions":
            _script("stop")
        real(name, version)

    monkeypatch.setattr(faults, "pause_point", stop_server)
    try:
        with pytest.raises(SinkError) as err:
            sink.publish(0)
    finally:
        _script("start")
    message = str(err.value)
    assert "\n" not in message and message.startswith("publishing batch 0"), message
    monkeypatch.setattr(faults, "pause_point", real)
    sink.publish(0)  # the retry, with the staged rows still there
    for name in ("sessions", "invalid_events"):
        assert _seen(kind, root, name) == _expected(0, "new")
