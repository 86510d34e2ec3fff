"""Exactly once through crashes: kill -9 a real `sessionize stream` process at every
commit step, restart it with the same checkpoint, and get an uninterrupted run's output."""

from __future__ import annotations

import pytest

from sessionize.commands.stream import StreamOptions, run_stream
from tests.helpers import OUTPUTS, cli_env, generate, read_output, run_until_killed, sessionize


def _args(inp, root):
    return [
        "stream", "--input", str(inp), "--output", str(root / "out"),
        "--checkpoint", str(root / "chk"), "--partitions", "3", "--max-files-per-trigger", "1",
    ]  # fmt: skip


@pytest.fixture(scope="module")
def data(spark, tmp_path_factory):
    """The input, and its uninterrupted run (in this process: the CLI's defaults)."""
    root = tmp_path_factory.mktemp("restart")
    inp = generate(root / "in", hours=2, invalid_rate=0.01, late_rate=0.01)
    clean = StreamOptions(
        input=str(inp), output=str(root / "clean" / "out"),
        checkpoint=str(root / "clean" / "chk"), partitions=3, max_files_per_trigger=1,
    )  # fmt: skip
    run_stream(clean, spark, on_batch=lambda _: None)
    return root, inp


# One kill at each step of a batch's commit (engines/store.py module doc), in a row: every
# restart resumes from the state the previous kill left.
KILLS = ["after-record:0", "after-state-commit:1", "before-publish:2", "after-publish:3"]


def test_kill_9_at_each_commit_step_then_restart_gives_same_output(data):
    root, inp = data
    run = root / "killed"
    for point in KILLS:
        out = run_until_killed(
            _args(inp, run), f"PAUSED {point.replace(':', ' ')}",
            cli_env(SESSIONIZE_PAUSE_AT=point),
        )  # fmt: skip
        assert "PAUSED" in out
    final = sessionize(*_args(inp, run))
    assert final.returncode == 0, final.stderr[-3000:]
    for name in OUTPUTS:
        expected = read_output(root / "clean" / "out", name)
        got = read_output(run / "out", name)
        assert got.equals(expected), name
    assert read_output(run / "out", "sessions").num_rows > 0
