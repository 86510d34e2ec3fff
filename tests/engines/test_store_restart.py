"""Exactly once through crashes: kill -9 a real `sessionize stream` process at every
commit step, restart it with the same checkpoint, and get an uninterrupted run's output."""

from __future__ import annotations

import pytest

from tests.helpers import (
    assert_same_as_clean,
    clean_stream_run,
    cli_env,
    run_until_killed,
    sessionize,
)
from tests.helpers import stream_args as _args


@pytest.fixture(scope="module")
def data(spark, tmp_path_factory):
    """The input, and its uninterrupted run (in this process: the CLI's defaults)."""
    root = tmp_path_factory.mktemp("restart")
    return root, clean_stream_run(spark, root)


# One kill at each step of a batch's commit (engines/partition.py module doc), in a row: every
# restart resumes from the state the previous kill left.
KILLS = ["after-record:0", "after-state-commit:1", "before-publish:2", "after-publish:3"]


def test_kill_9_at_each_commit_step_then_restart_gives_same_output(data):
    root, inp = data
    run = root / "killed"
    for point in KILLS:
        out = run_until_killed(
            _args(inp, run),
            f"PAUSED {point.replace(':', ' ')}",
            cli_env(SESSIONIZE_PAUSE_AT=point),
        )
        assert "PAUSED" in out
    final = sessionize(*_args(inp, run))
    assert final.returncode == 0, final.stderr[-3000:]
    assert_same_as_clean(root, run)
