"""The `spark` engine (`--state spark-rocksdb | spark-hdfs`): the same outputs as the `files`
state, late events judged by the rules of docs/design.md (Spark drops none), exactly once
through kill -9,
and a checkpoint bound to the state it was created with."""

from __future__ import annotations

import json
import os
from datetime import UTC, datetime

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from sessionize import spark_version
from sessionize.commands.stream import StreamOptions, run_stream
from sessionize.config import SessionRules
from sessionize.engines.spark_processor import (
    Shapes,
    _decode,
    _encode,
    _state_from_tuples,
    _state_tuples,
    _timer,
    wide_tuples,
)
from sessionize.engines.spark_state import narrow
from sessionize.logic import advance
from sessionize.mapping import EventMapping
from sessionize.schema import OUTPUTS, STATE
from tests.helpers import OUTPUTS as OUTPUT_NAMES
from tests.helpers import cli_env, generate, read_output, run_until_killed, sessionize

# spark-rocksdb needs Spark 4.1, spark-hdfs 4.0 (spark_version): older lines refuse them
# (tests/test_spark_lines.py) and run what they have.
SPARK_STATES = [
    s
    for s, feature in (
        ("spark-rocksdb", "transform_with_state"),
        ("spark-hdfs", "pandas_with_state"),
    )
    if spark_version.has(feature)
]
ROCKSDB = pytest.mark.needs_spark("transform_with_state")
MIN = 60_000_000
T0 = int(datetime(2026, 11, 1, tzinfo=UTC).timestamp()) * 1_000_000


def _run(spark, root, state, inp, **kw):
    opts = StreamOptions(
        input=str(inp),
        output=str(root / state / "out"),
        checkpoint=str(root / state / "chk"),
        state=state,
        partitions=kw.pop("partitions", 2),
        **kw,
    )
    lines: list[str] = []
    records = run_stream(opts, spark, on_batch=lines.append)
    return records, lines


def _outputs(root, state, *, with_batch=False):
    return {n: read_output(root / state / "out", n, with_batch=with_batch) for n in OUTPUT_NAMES}


# ---------------------------------------------------------------------------- parity


@pytest.fixture(scope="module")
def parity(spark, tmp_path_factory):
    """One generated input with duplicates, late and invalid lines, run with each state."""
    root = tmp_path_factory.mktemp("parity")
    inp = generate(
        root / "in",
        hours=2,
        users=60,
        events_per_hour=500,
        duplicate_rate=0.03,
        late_rate=0.01,
        invalid_rate=0.01,
        close_rate=0.2,
    )
    records = {
        state: _run(spark, root, state, inp, max_files_per_trigger=1)[0]
        for state in ["files", *SPARK_STATES]
    }
    return root, records


@pytest.mark.parametrize("state", SPARK_STATES)
def test_same_outputs_as_the_files_state(parity, state):
    root, _ = parity
    expected, got = _outputs(root, "files"), _outputs(root, state)
    for name in OUTPUT_NAMES:
        assert got[name].equals(expected[name]), name
    assert got["sessions"].num_rows > 0 and got["late_events"].num_rows > 0
    assert got["invalid_events"].num_rows > 0


@pytest.mark.parametrize("state", SPARK_STATES)
def test_late_and_invalid_lines_land_in_the_batch_that_read_them(parity, state):
    """Unlike sessions, they leave in the batch that read them, as with the files state."""
    root, _ = parity
    for name in ("late_events", "invalid_events"):
        expected = read_output(root / "files" / "out", name)
        assert read_output(root / state / "out", name).equals(expected), name
    # One source in the query: every batch's offsets name a single source position.
    offsets = (root / state / "chk" / "offsets" / "0").read_text().splitlines()
    assert len(offsets) == 3, offsets  # version, metadata, one source


@pytest.mark.parametrize("state", SPARK_STATES)
def test_same_totals_and_open_sessions_as_the_files_state(parity, state):
    _, records = parity
    files, spark_state = records["files"][-1], records[state][-1]
    assert spark_state["totals"] == files["totals"]
    assert spark_state["totals"]["duplicates"] > 0
    assert spark_state["batch"]["open_sessions"] == files["batch"]["open_sessions"] > 0


@ROCKSDB
def test_sessions_wait_for_the_watermark_of_the_next_batch(parity):
    """Same sessions, one batch later: Spark's operators see a watermark at a batch's start."""
    root, _ = parity
    files = read_output(root / "files" / "out", "sessions")
    rocks = read_output(root / "spark-rocksdb" / "out", "sessions")
    by_id = dict(zip(rocks["session_id"].to_pylist(), rocks["batch_id"].to_pylist(), strict=True))
    pairs = zip(files["session_id"].to_pylist(), files["batch_id"].to_pylist(), strict=True)
    later = [by_id[s] - b for s, b in pairs]
    assert set(later) == {1}


# ---------------------------------------------------------------------------- late events


def _write_lines(path, name, mtime, events):
    path.mkdir(parents=True, exist_ok=True)
    f = path / name
    lines = []
    for user, t_us, page, action in events:
        stamp = datetime.fromtimestamp(t_us / 1e6, UTC).isoformat(timespec="milliseconds")
        lines.append(
            json.dumps(
                {"user_id": user, "event_time": stamp, "page": {"current": page}, "action": action}
            )
        )
    f.write_text("\n".join(lines) + "\n")
    os.utime(f, (mtime, mtime))


@pytest.fixture(scope="module")
def edges(spark, tmp_path_factory):
    """Two batches: the second has events at, just below and far below the watermark."""
    root = tmp_path_factory.mktemp("edges")
    inp = root / "in" / "event_date=2026-11-01" / "event_hour=00"
    _write_lines(
        inp,
        "a.json",
        1_000,
        [
            (1, T0, "home", "view"),
            (1, T0 + 1 * MIN, "cart", "browser_close"),
            (2, T0 + 20 * MIN, "home", "view"),  # watermark after batch 0: T0 + 10 min
        ],
    )
    _write_lines(
        inp,
        "b.json",
        2_000,
        [
            (3, T0 + 10 * MIN, "at", "view"),  # == watermark: on time
            (3, T0 + 10 * MIN - 1_000, "below", "view"),  # 1 ms below: late
            (4, T0, "far", "view"),  # late
            (2, T0 + 20 * MIN, "home", "view"),  # duplicate of state
            (2, T0 + 25 * MIN, "next", "view"),
        ],
    )
    for state in ["files", *SPARK_STATES]:
        _run(spark, root, state, root / "in", max_files_per_trigger=1)
    return root


@pytest.mark.parametrize("state", SPARK_STATES)
def test_late_events_are_judged_by_the_previous_batch_watermark(edges, state):
    got = _outputs(edges, state)
    late = got["late_events"]
    assert sorted(late["page"].to_pylist()) == ["below", "far"]
    assert set(late["watermark"].cast(pa.int64()).to_pylist()) == {T0 + 10 * MIN}
    for name in OUTPUT_NAMES:
        assert got[name].equals(_outputs(edges, "files")[name]), name
    sessions = got["sessions"]
    # The explicit close of user 1 is emitted; user 3's event at the watermark is on time.
    assert sessions.filter(pc.equal(sessions["user_id"], 1))["end_reason"].to_pylist() == [
        "explicit"
    ]


# ---------------------------------------------------------------------------- one step


@ROCKSDB
def test_timer_fires_exactly_when_the_watermark_passes_closed_at():
    """A transformWithState timer at T fires when watermark_ms >= T (measured)."""
    for closed_at in (T0, T0 + 1, T0 + 999, T0 + 1_000, T0 + 1_001):
        timer = _timer(closed_at)
        for wm_ms in range(closed_at // 1000 - 2, closed_at // 1000 + 3):
            assert (wm_ms >= timer) == (wm_ms * 1000 > closed_at)
    # An applyInPandasWithState timeout at T fires when watermark_ms > T.
    for closed_at in (T0, T0 + 1, T0 + 999, T0 + 1_000):
        for wm_ms in range(closed_at // 1000 - 2, closed_at // 1000 + 3):
            assert (wm_ms > closed_at // 1000) == (wm_ms * 1000 > closed_at)


def _step_outputs():
    from tests.logic.helpers import ev, events_table

    events = events_table(
        [ev(7, T0, "a", site="s"), ev(7, T0 + MIN, "b"), ev(7, T0 + 30 * MIN, "c")]
        + [ev(7, T0 - 5 * MIN, "late")]
    )
    return advance(
        STATE.empty_table(),
        events,
        rules=SessionRules(),
        watermark_before=T0 - MIN,
        watermark_after=T0 + 20 * MIN,
    )


def test_wide_rows_round_trip_to_every_output_schema():
    res = _step_outputs()
    sh = Shapes(EventMapping())
    tables = {"sessions": res.sessions, "page_views": res.page_views, "late_events": res.late}
    for name, table in tables.items():
        assert table.num_rows > 0
        rows = list(wide_tuples(sh, name, table))
        dicts = [dict(zip(sh.wide.names, r, strict=True)) for r in rows]
        wide = pa.Table.from_pylist(dicts, sh.wide)
        assert narrow(OUTPUTS[name], wide).equals(table.cast(OUTPUTS[name])), name


def test_state_rows_round_trip_through_both_state_encodings():
    state = _step_outputs().state_puts
    assert state.num_rows > 0
    sh = Shapes(EventMapping())
    assert _state_from_tuples(sh, 7, _state_tuples(sh, state)).equals(state)
    assert _decode(_encode(state)).equals(state)


# ---------------------------------------------------------------------------- restart


def _args(inp, root, state):
    return [
        "stream",
        "--input",
        str(inp),
        "--output",
        str(root / "out"),
        "--checkpoint",
        str(root / "chk"),
        "--state",
        state,
        "--partitions",
        "2",
        "--max-files-per-trigger",
        "1",
    ]


@pytest.fixture(scope="module")
def restart_input(tmp_path_factory):
    root = tmp_path_factory.mktemp("restart")
    return root, generate(root / "in", hours=2, users=60, events_per_hour=400, late_rate=0.01)


# Each kill lands at a step of a batch's commit (engines/runner.py) that is the Spark engine's
# own: its state committed in Spark's checkpoint (the rerun must start from the version
# before), and its record written in the checkpoint's `sessionize-batches/` before Spark's
# commit log (the rerun rewrites it). The publish in between is the sink's, the same for
# both engines: tests/engines/test_store_restart.py kills there. The step order is the
# engine's, not the state provider's, so one provider proves it.
KILLS = ["after-state-commit:1", "after-record:2"]


@ROCKSDB
def test_kill_9_then_restart_gives_an_uninterrupted_runs_output(spark, restart_input):
    root, inp = restart_input
    state = "spark-rocksdb"
    _run(spark, root / "clean", state, inp, max_files_per_trigger=1)
    run = root / f"killed-{state}"
    for point in KILLS:
        out = run_until_killed(
            _args(inp, run, state),
            f"PAUSED {point.replace(':', ' ')}",
            cli_env(SESSIONIZE_PAUSE_AT=point),
        )
        assert "PAUSED" in out
    final = sessionize(*_args(inp, run, state))
    assert final.returncode == 0, final.stderr[-3000:]
    for name in OUTPUT_NAMES:
        expected = read_output(root / "clean" / state / "out", name)
        assert read_output(run / "out", name).equals(expected), name
    assert read_output(run / "out", "sessions").num_rows > 0


# ---------------------------------------------------------------------------- checkpoint


@ROCKSDB
def test_a_checkpoint_refuses_another_state(spark, edges):
    """The spark-rocksdb checkpoint of `edges`, reused with other states: one line, exit 2."""
    inp, root = edges / "in", edges / "spark-rocksdb"
    for other in ["spark-hdfs", "files"]:
        args = [
            "stream",
            "--input",
            str(inp),
            "--output",
            str(root / "out"),
            "--checkpoint",
            str(root / "chk"),
            "--state",
            other,
            "--partitions",
            "2",
        ]
        res = sessionize(*args)
        assert res.returncode == 2
        assert res.stderr.count("\n") == 1, res.stderr
        assert f"--state spark-rocksdb (this run: {other})" in res.stderr
