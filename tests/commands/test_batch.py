"""Hourly batch mode: stream parity, reprocessing, idempotence, the sequential guard; each
test once per state backend (tests/state_params.py)."""

from __future__ import annotations

import shlex
import shutil
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pyarrow.compute as pc
import pytest

from sessionize.cli import main as cli_main
from sessionize.commands.batch import BatchOptions, run_batch
from sessionize.commands.statetools.job import locate
from sessionize.commands.stream import StreamOptions, run_stream
from sessionize.config import SessionRules
from sessionize.engines.progress import read_progress
from sessionize.errors import ConfigError, IncompatibleCheckpoint, StateError
from sessionize.state import open_backend
from tests.helpers import OUTPUTS, generate, read_output
from tests.settings_in_records import move_settings_into_records

H0 = datetime(2026, 11, 1, tzinfo=UTC)
HOUR = timedelta(hours=1)


def _batch(spark, inp, out, start, end, lines=None, *, state):
    opts = BatchOptions(
        input=str(inp), output=str(out), start=start, end=end, partitions=3, state=state
    )
    return run_batch(opts, spark, on_hour=(lines.append if lines is not None else lambda _: None))


def _outputs(root) -> dict:
    return {name: read_output(root, name) for name in OUTPUTS}


def _same_outputs(a, b) -> None:
    for name, table in _outputs(a).items():
        assert table.equals(read_output(b, name)), name


# With the cases below, batch mode runs on every store: files and Redis here, DynamoDB
# (idempotence), PostgreSQL (reprocessing).
@pytest.mark.parametrize("state", ["files", "redis"], indirect=True)
def test_batch_sessions_equal_stream_sessions(spark, tmp_path, state):
    inp = generate(tmp_path / "in", hours=3, late_rate=0.0)
    _batch(spark, inp, tmp_path / "batch", H0, H0 + 2 * HOUR, state=state("batch"))
    logged = read_progress(str(tmp_path / "batch" / "_progress.jsonl"))
    assert [r["version"] for r in logged] == [2026110100, 2026110101, 2026110102]
    assert logged[1]["input"]["path"].endswith("event_date=2026-11-01/event_hour=01")
    stream = StreamOptions(
        input=str(inp),
        output=str(tmp_path / "stream"),
        checkpoint=str(tmp_path / "chk"),
        partitions=3,
        max_files_per_trigger=1,
        state=state("stream"),
    )
    records = run_stream(stream, spark, on_batch=lambda _: None)
    assert records[-1]["totals"]["late"] == 0
    watermark = records[-1]["watermark"]
    s = read_output(tmp_path / "stream", "sessions", with_batch=False)
    b = read_output(tmp_path / "batch", "sessions", with_batch=False)
    # The stream has emitted what its final watermark closed; batch has emitted those and
    # the sessions closing before the end of the last hour.
    closed = pc.less(pc.cast(b["closed_at"], "int64"), watermark)
    assert s.num_rows > 100
    assert b.filter(closed).equals(s)
    sv = read_output(tmp_path / "stream", "page_views", with_batch=False)
    bv = read_output(tmp_path / "batch", "page_views", with_batch=False)
    assert bv.filter(pc.is_in(bv["session_id"], s["session_id"])).equals(sv)


# Idempotence rests on each store's truncate_after (tests/state/contract.py): the local
# store and one with no transactions prove the command's side.
@pytest.mark.parametrize("state", ["files", "dynamodb"], indirect=True)
def test_rerunning_hours_with_the_same_input_changes_nothing(spark, tmp_path, state):
    inp = generate(tmp_path / "in", hours=3, late_rate=0.0)
    out = tmp_path / "out"
    _batch(spark, inp, out, H0, H0 + 2 * HOUR, state=state())
    before = _outputs(out)
    lines: list[str] = []
    _batch(spark, inp, out, H0 + 2 * HOUR, H0 + 2 * HOUR, lines, state=state())
    _batch(spark, inp, out, H0 + HOUR, H0 + 2 * HOUR, lines, state=state())
    assert sum("reprocessing" in line for line in lines) == 2
    assert before["sessions"].num_rows > 0
    for name, table in _outputs(out).items():
        assert table.equals(before[name]), name


@pytest.mark.parametrize("state", ["files", "postgres"], indirect=True)
def test_reprocessing_a_changed_hour_equals_a_clean_run(spark, tmp_path, state):
    inp = generate(tmp_path / "in", hours=3, late_rate=0.0)
    out = tmp_path / "out"
    _batch(spark, inp, out, H0, H0 + 2 * HOUR, state=state("out"))
    before = read_output(out, "sessions")
    # Hour 1's data changes: drop every third line of its files.
    for f in sorted((inp / "event_date=2026-11-01" / "event_hour=01").glob("*.json")):
        kept = [x for i, x in enumerate(f.read_text().splitlines()) if i % 3]
        f.write_text("\n".join(kept) + "\n")
    _batch(spark, inp, out, H0 + HOUR, H0 + 2 * HOUR, state=state("out"))
    _batch(spark, inp, tmp_path / "clean", H0, H0 + 2 * HOUR, state=state("clean"))
    _same_outputs(out, tmp_path / "clean")
    assert not read_output(out, "sessions").equals(before)


@pytest.mark.parametrize("state", ["files"], indirect=True)  # the command's rule, no store's
def test_an_hour_needs_the_previous_hour_committed(spark, tmp_path, state):
    inp = generate(tmp_path / "in", hours=3, late_rate=0.0)
    _batch(spark, inp, tmp_path / "out", H0, H0, state=state())
    with pytest.raises(StateError, match=r"run --from 2026-11-01T01"):
        _batch(spark, inp, tmp_path / "out", H0 + 2 * HOUR, H0 + 2 * HOUR, state=state())


@pytest.mark.parametrize("state", ["files"], indirect=True)  # the command's rule, no store's
def test_missing_input_hour_is_an_empty_hour(spark, tmp_path, state):
    inp = generate(tmp_path / "in", hours=3, late_rate=0.0)
    shutil.rmtree(inp / "event_date=2026-11-01" / "event_hour=01")
    lines: list[str] = []
    records = _batch(spark, inp, tmp_path / "out", H0, H0 + 2 * HOUR, lines, state=state())
    assert any("no input" in line and "treated as an empty hour" in line for line in lines)
    assert records[1]["batch"]["records"] == 0
    # Sessions open after hour 0 still closed during the empty hour 1.
    assert records[1]["batch"]["sessions_out"] > 0
    assert read_output(tmp_path / "out", "sessions").num_rows > 0


def test_a_missing_input_tree_is_refused_before_anything_is_written(tmp_path):
    """A tree that is not there is a mistake (a typo, an unmounted disk), as `stream` says;
    only a missing hour inside an existing tree is an empty hour."""
    opts = BatchOptions(
        input=str(tmp_path / "no-such-tree"), output=str(tmp_path / "out"), start=H0, end=H0 + HOUR
    )
    with pytest.raises(ConfigError, match="--input .*no-such-tree is not a directory"):
        run_batch(opts, on_hour=lambda _: None)
    assert not (tmp_path / "out").exists()


def test_a_changed_setting_is_refused_with_a_fresh_start_that_runs(spark, tmp_path):
    """The refusal names everything a fresh start needs at once: the output goes with its
    state, so a new state alone would be refused again, for the output."""
    inp = generate(tmp_path / "in", hours=1, late_rate=0.0)
    _batch(spark, inp, tmp_path / "out", H0, H0, state="files")
    changed = BatchOptions(
        input=str(inp),
        output=str(tmp_path / "out"),
        start=H0,
        end=H0,
        partitions=3,
        rules=SessionRules(gap_us=300_000_000),
    )
    with pytest.raises(
        IncompatibleCheckpoint,
        match="--gap 10m .this run: 5m.*; or start over with a new --output$",
    ):
        run_batch(changed, spark, on_hour=lambda _: None)
    records = run_batch(
        replace(changed, output=str(tmp_path / "out2")), spark, on_hour=lambda _: None
    )
    assert records[0]["batch"]["sessions_out"] > 0


def test_a_partial_reprocess_ends_with_the_command_that_recomputes_the_rest(spark, tmp_path):
    inp = generate(tmp_path / "in", hours=3, late_rate=0.0)
    out = tmp_path / "out"
    _batch(spark, inp, out, H0, H0 + 2 * HOUR, state="files")
    lines: list[str] = []
    _batch(spark, inp, out, H0 + HOUR, H0 + HOUR, lines, state="files")
    assert lines[-1].startswith("hours 2026-11-01T02..2026-11-01T02 were committed before")
    command = lines[-1].split("recompute them with: sessionize ", 1)[1]
    sessions = read_output(out, "sessions")
    assert not pc.any(pc.equal(sessions["batch_id"], 2026110102)).as_py()
    assert "--partitions 3" in command
    cli_main(shlex.split(command))
    _batch(spark, inp, tmp_path / "clean", H0, H0 + 2 * HOUR, state="files")
    _same_outputs(out, tmp_path / "clean")


def test_batch_flags_left_out_take_the_output_s_state_and_the_state_s_settings(spark, tmp_path):
    """An output goes with its state: a run that leaves --state out continues it (instead of
    starting a new one under OUTPUT/_state); the state's rules stand in for those left out,
    read from a store whose job records carry the settings as from its settings entry;
    a flag given with another value, even the default, is refused naming it."""
    inp = generate(tmp_path / "in", hours=2, users=40, events_per_hour=300, files_per_hour=1)
    out, state = tmp_path / "out", f"files:{tmp_path / 'st'}"
    first = BatchOptions(
        input=str(inp),
        output=str(out),
        start=H0,
        end=H0,
        state=state,
        rules=SessionRules(gap_us=300_000_000),
        partitions=3,
    )
    run_batch(first, spark, on_hour=lambda _: None)
    move_settings_into_records(tmp_path / "st", "sessionize")
    left_out = BatchOptions(
        input=str(inp), output=str(out), start=H0 + HOUR, end=H0 + HOUR, explicit=frozenset()
    )
    run_batch(left_out, spark, on_hour=lambda _: None)
    backend = open_backend(state)
    assert backend.job_versions("sessionize") == [2026110100, 2026110101]
    settings = backend.read_job_settings("sessionize")  # written again, once
    assert (settings["gap"], settings["partitions"]) == ("5m", 3)
    assert "settings" not in backend.read_job_record("sessionize", 2026110101)
    assert not (out / "_state").exists()
    assert locate(None, str(out)).state_uri == state  # the state tools find it the same way
    with pytest.raises(IncompatibleCheckpoint, match=r"--state files:\S+st \(this run: files\)"):
        run_batch(replace(left_out, explicit=frozenset({"state"})), spark)
    with pytest.raises(IncompatibleCheckpoint, match=r"--gap 5m \(this run: 10m\)"):
        run_batch(replace(left_out, explicit=frozenset({"gap"})), spark)
    with pytest.raises(IncompatibleCheckpoint, match=r"--job sessionize \(this run: other\)"):
        run_batch(replace(left_out, job="other", explicit=frozenset({"job"})), spark)
