"""One driver at a time: real `sessionize stream` processes on one checkpoint.

A second driver refuses in one line naming the first; a driver that stalls and loses its
lease publishes nothing more; either way the final outputs equal an uninterrupted run.
"""

from __future__ import annotations

import os
import signal
import time

import pytest

from sessionize.state.lease import DirectoryLeaseRecords, Holder
from tests.helpers import assert_same_as_clean as _same_as_clean
from tests.helpers import clean_stream_run, cli_env, sessionize, start_cli, wait_for
from tests.helpers import stream_args as _args
from tests.state_params import state  # noqa: F401 - fixture


@pytest.fixture(scope="module")
def data(spark, tmp_path_factory):
    root = tmp_path_factory.mktemp("fencing")
    return root, clean_stream_run(spark, root)


def _one_error_line(stderr: str) -> str:
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("sessionize: error: "), stderr[-3000:]
    return lines[0]


def test_a_second_driver_mid_batch_is_refused_then_resumes_after_the_first_dies(data):
    root, inp = data
    run = root / "mid-batch"
    first = start_cli(_args(inp, run), cli_env(SESSIONIZE_PAUSE_AT="after-state-commit:1"))
    try:
        wait_for(first, "PAUSED after-state-commit 1")
        second = sessionize(*_args(inp, run))
        assert second.returncode == 2
        line = _one_error_line(second.stderr)
        assert f"checkpoint {run / 'chk'} is in use by the driver on" in line
        assert f"pid {first.pid}," in line
    finally:
        os.killpg(first.pid, signal.SIGKILL)
        first.wait()
    final = sessionize(*_args(inp, run))  # same host, holder gone: taken over at once
    assert final.returncode == 0, final.stderr[-3000:]
    _same_as_clean(root, run)


def test_two_drivers_started_together_one_runs_one_refuses(data):
    root, inp = data
    run = root / "together"
    procs = [start_cli(_args(inp, run), cli_env(), merged=False) for _ in range(2)]
    results = [(p.wait(timeout=600), p.stderr.read()) for p in procs]
    codes = sorted(code for code, _ in results)
    assert codes == [0, 2], results
    refused = next(err for code, err in results if code == 2)
    assert "is in use by the driver on" in _one_error_line(refused)
    _same_as_clean(root, run)


def test_a_driver_that_lost_its_lease_publishes_nothing_more(data, tmp_path):
    root, inp = data
    run = root / "stalled"
    resume = tmp_path / "resume"
    env = cli_env(SESSIONIZE_PAUSE_AT="before-publish:1", SESSIONIZE_RESUME_FILE=str(resume))
    stalled = start_cli(_args(inp, run), env)
    wait_for(stalled, "PAUSED before-publish 1")
    # While it stalls, a driver elsewhere presumed it dead and took the lease.
    records = DirectoryLeaseRecords(str(run / "chk" / "_lease"))
    epoch = records.latest().epoch
    other = Holder(epoch + 1, "elsewhere", 1, "2026-11-01T00:00:00+00:00", "t", time.time(), 30)
    assert records.create(other)
    resume.touch()
    assert stalled.wait(timeout=300) == 2
    rest = stalled.stdout.read()
    errors = [x for x in rest.splitlines() if x.startswith("sessionize: error: ")]
    assert len(errors) == 1 and "Traceback" not in rest, rest[-3000:]
    assert "lost its lease on checkpoint" in errors[0] and "the driver on elsewhere" in errors[0]
    assert not list((run / "out" / "sessions").glob("batch_id=1"))
    # The other driver goes away cleanly; the next run completes the job exactly once.
    records.update(Holder(**{**other.__dict__, "released": True}))
    final = sessionize(*_args(inp, run))
    assert final.returncode == 0, final.stderr[-3000:]
    _same_as_clean(root, run)


# The store's own refusal is proved on every backend by tests/state/contract.py; end to end
# here on one that reads the fence before publishing (the narrower guarantee).
@pytest.mark.parametrize("state", ["dynamodb"], indirect=True)
def test_a_driver_taken_over_mid_batch_is_refused_by_the_store_itself(data, tmp_path, state):  # noqa: F811
    """The first driver stalls inside partition 0's task of batch 1, its state written but
    not committed, and stops heartbeating (its records of the checkpoint's and the output's
    leases are made to look so); a second driver takes the leases over and runs the job to
    the end. When the first wakes up, the state
    store itself rejects its commit (the fence of state/lease.py), before any runner check:
    it stops with one line and the outputs are those of one uninterrupted run."""
    root, inp = data
    run = tmp_path / "taken-over"
    args = [*_args(inp, run), "--state", state()]
    resume = tmp_path / "resume"
    env = cli_env(
        SESSIONIZE_PAUSE_AT="before-state-commit:1",
        SESSIONIZE_RESUME_FILE=str(resume),
        SESSIONIZE_LEASE_TTL_S="600",
    )
    first = start_cli(args, env)
    try:
        wait_for(first, "PAUSED before-state-commit 1")
        for lease in (run / "chk" / "_lease", run / "out" / "_lease"):
            records = DirectoryLeaseRecords(str(lease))
            held = records.latest()
            records.update(Holder(**{**held.__dict__, "host": "elsewhere", "heartbeat": 0.0}))
        second = sessionize(*args)
        assert second.returncode == 0, second.stderr[-3000:]
        resume.touch()
        assert first.wait(timeout=300) == 2
    finally:
        if first.poll() is None:
            os.killpg(first.pid, signal.SIGKILL)
    rest = first.stdout.read()
    errors = [x for x in rest.splitlines() if x.startswith("sessionize: error: ")]
    assert len(errors) == 1 and "Traceback" not in rest, rest[-3000:]
    assert "was taken over by a newer driver" in errors[0], errors[0]
    _same_as_clean(root, run)
