"""An output has one owner, through the command line on local Parquet: another checkpoint,
a batch job on a stream's output, a stream on a batch job's output and a keyed job are each
refused at start in one line naming the owner, before they record or write anything; an
output written before owners were recorded is taken by the checkpoint that wrote it only;
the owner's checkpoint moved, rewound, or with its outputs moved keeps writing its output.

The writers run in this process (the shared SparkSession); the refused jobs are the CLI,
which refuses before it starts Spark (the keyed example starts Spark first)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

import pyarrow.compute as pc

from sessionize.commands.batch import BatchOptions, run_batch
from sessionize.commands.rewind import rewind
from sessionize.commands.stream import StreamOptions, run_stream
from tests.helpers import cli_env, generate, read_output, sessionize

REPO = Path(__file__).resolve().parents[2]
HOUR0 = datetime(2026, 11, 1, tzinfo=UTC)


def _refused(done: subprocess.CompletedProcess) -> str:
    """The one line of a refused command."""
    assert done.returncode == 2, done.stdout + done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    return lines[0]


def _tree(root: Path) -> dict[str, int]:
    """Every file under `root` with its size: what a refused job must leave as it was."""
    return {str(p.relative_to(root)): p.stat().st_size for p in root.rglob("*") if p.is_file()}


def _hour(inp: Path, hour: int) -> None:
    generate(
        inp,
        start=HOUR0.replace(hour=hour),
        hours=1,
        users=60,
        events_per_hour=600,
        files_per_hour=1,
        seed=hour,
    )


def _owner(output: Path) -> dict:
    return json.loads((output / "_owner.json").read_text())


def _id(checkpoint: Path) -> str:
    return json.loads((checkpoint / "sessionize-id.json").read_text())["id"]


def _each_session_once(output: Path) -> int:
    ids = read_output(output, "sessions")["session_id"]
    assert len(ids) == len(pc.unique(ids)) > 0
    return len(ids)


def test_one_owner_per_output_refusals_through_the_cli(spark, tmp_path):
    inp, out, chk = tmp_path / "in", tmp_path / "out", tmp_path / "chk"
    _hour(inp, 0)
    opts = StreamOptions(input=str(inp), output=str(out), checkpoint=str(chk), partitions=2)
    run_stream(opts, spark, on_batch=lambda _: None)
    assert _owner(out) == {
        "id": _id(chk),
        "kind": "stream",
        "job": "sessionize",
        "place": str(chk),
        "processor": None,
    }
    written = _tree(out)
    owned = f"output {out} belongs to the stream of checkpoint {chk}, not to "

    line = _refused(
        sessionize(
            "stream",
            "--input",
            str(inp),
            "--output",
            str(out),
            "--checkpoint",
            str(tmp_path / "chk2"),
        )
    )
    assert owned + f"the stream of checkpoint {tmp_path / 'chk2'}: run that checkpoint" in line
    line = _refused(
        sessionize(
            "batch",
            "--input",
            str(inp),
            "--output",
            str(out),
            "--from",
            "2026-11-01T00",
            "--to",
            "2026-11-01T00",
        )
    )
    assert owned + "the batch job 'sessionize' with state files:" in line, line
    orders = tmp_path / "orders"
    orders.mkdir()
    (orders / "a.json").write_text('{"customer_id": 1, "amount": 2.5}\n')
    keyed = subprocess.run(
        [
            sys.executable,
            "-m",
            "examples.running_totals",
            "--input",
            str(orders),
            "--output",
            str(out),
            "--checkpoint",
            str(tmp_path / "kchk"),
        ],
        capture_output=True,
        text=True,
        cwd=REPO,
        env=cli_env(),
        timeout=600,
    )
    line = _refused(keyed)
    assert owned + "the stateful stream of processor RunningTotals at checkpoint " in line, line
    assert _tree(out) == written  # nothing recorded or written by the refused jobs
    assert not any((tmp_path / c).exists() for c in ("chk2", "kchk"))

    batch_out = tmp_path / "daily"
    run_batch(
        BatchOptions(input=str(inp), output=str(batch_out), start=HOUR0, end=HOUR0, partitions=2),
        spark,
        on_hour=lambda _: None,
    )
    daily = _tree(batch_out)
    line = _refused(
        sessionize(
            "stream",
            "--input",
            str(inp),
            "--output",
            str(batch_out),
            "--checkpoint",
            str(tmp_path / "chk3"),
        )
    )
    assert line.endswith(
        f"output {batch_out} belongs to the batch job 'sessionize' with state files, not to the "
        f"stream of checkpoint {tmp_path / 'chk3'}: run `sessionize batch` with that state and "
        "job, or give this job another --output"
    ), line
    assert _tree(batch_out) == daily and not (tmp_path / "chk3").exists()


def test_an_output_without_an_owner_record_goes_to_the_checkpoint_that_wrote_it(spark, tmp_path):
    """The output of a checkpoint that ran before owners were recorded: its record removed
    (what today's runs left); then the owner's checkpoint is moved, rewound, and its
    outputs moved, and it keeps writing its own output, each session once."""
    inp, out, chk = tmp_path / "in", tmp_path / "out", tmp_path / "chk"
    _hour(inp, 0)
    opts = StreamOptions(input=str(inp), output=str(out), checkpoint=str(chk), partitions=2)
    run_stream(opts, spark, on_batch=lambda _: None)
    (out / "_owner.json").unlink()

    line = _refused(
        sessionize(
            "stream",
            "--input",
            str(inp),
            "--output",
            str(out),
            "--checkpoint",
            str(tmp_path / "chk2"),
        )
    )
    assert line.startswith(f"sessionize: error: output {out} holds ")
    other = f"the stream of checkpoint {tmp_path / 'chk2'}"
    assert f"owner and not by {other}: write it with the job that wrote it" in line, line
    _hour(inp, 1)
    run_stream(opts, spark, on_batch=lambda _: None)  # the checkpoint that wrote it
    assert _owner(out)["id"] == _id(chk) and _owner(out)["place"] == str(chk)

    moved = tmp_path / "moved-chk"
    shutil.move(chk, moved)
    _hour(inp, 2)
    run_stream(replace(opts, checkpoint=str(moved)), spark, on_batch=lambda _: None)
    assert _owner(out) == {**_owner(out), "id": _id(moved), "place": str(moved)}
    assert set(read_output(out, "page_views")["batch_id"].to_pylist()) == {0, 1, 2}
    sessions = _each_session_once(out)

    rewind(str(moved), -1, say=lambda _: None)  # every batch undone, the settings forgotten
    run_stream(replace(opts, checkpoint=str(moved)), spark, on_batch=lambda _: None)
    assert _each_session_once(out) == sessions  # the three hours again, in one batch
    assert set(read_output(out, "page_views")["batch_id"].to_pylist()) == {0}

    new = tmp_path / "new-out"
    done = sessionize(
        "maintain", "--output", str(out), "--checkpoint", str(moved), "--move-output", str(new)
    )
    assert done.returncode == 0, done.stderr
    _hour(inp, 3)
    run_stream(
        replace(opts, output=str(new), checkpoint=str(moved)), spark, on_batch=lambda _: None
    )
    assert _owner(new)["id"] == _id(moved)
    assert _each_session_once(new) > sessions
