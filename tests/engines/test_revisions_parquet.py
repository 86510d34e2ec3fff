"""`--revise-within` end to end on Parquet (docs/concepts/revisions.md): a stream read file
by file whose held-back files bring events hours behind the watermark; within the window
they revise the sessions they join, and the current sessions (the docs' query over
`sessions` and `session_revisions`) equal `sessionize batch` over all the events. A kill -9
inside the publish of a revising batch, then a restart, writes what the uninterrupted run
wrote; the states and options that cannot take revisions yet are refused in one line
(Parquet on s3://: test_revisions_parquet_s3.py)."""

from __future__ import annotations

import json
import os
import shutil

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from sessionize.commands.batch import BatchOptions, run_batch
from sessionize.commands.statetools.inspect import export_sessions, read_state
from sessionize.commands.statetools.job import locate
from sessionize.errors import SinkError
from sessionize.sinks.parquet import ParquetSink
from tests.engines.revising import (
    CURRENT,
    FLUSH_USER,
    MAPPING,
    OUTPUTS,
    REVISING_BATCH,
    RULES,
    START,
    batch_of_every_event,
    read,
    revising_args,
)
from tests.helpers import cli_env, generate, run_until_killed, sessionize


@pytest.fixture
def data(revised_parquet):
    """The shared revising stream and its batch run (tests/engines/conftest.py)."""
    return revised_parquet


def current_sessions(spark, out) -> list[dict]:
    sessions = spark.read.parquet(str(out / "sessions"))
    revisions = spark.read.parquet(str(out / "session_revisions"))
    sessions.unionByName(revisions, allowMissingColumns=True).createOrReplaceTempView("written")
    rows = spark.sql(CURRENT.format(written="written")).drop(
        "latest", "revision", "retracted", "batch_id"
    )
    return sorted((r.asDict() for r in rows.collect()), key=lambda r: r["session_id"])


def test_current_sessions_after_the_stream_equal_one_batch_of_every_event(spark, data):
    root, _ = data
    out = root / "clean" / "out"
    revisions = read(out, "session_revisions").to_pylist()
    assert any(not r["retracted"] for r in revisions), "no session was revised"
    assert {r["batch_id"] for r in revisions} >= {REVISING_BATCH}
    views = read(out, "page_view_revisions").to_pylist()
    assert {v["session_id"] for v in views} == {
        r["session_id"] for r in revisions if not r["retracted"]
    }
    assert read(out, "late_events").num_rows == 0, "the window covers the input's lateness"
    batch = spark.read.parquet(str(root / "batch" / "out" / "sessions")).drop("batch_id")
    want = sorted((r.asDict() for r in batch.collect()), key=lambda r: r["session_id"])
    got = current_sessions(spark, out)
    assert [r for r in got if r["user_id"] != FLUSH_USER] == [
        r for r in want if r["user_id"] != FLUSH_USER
    ]


def test_kill_9_inside_a_revising_publish_then_restart_writes_what_an_uninterrupted_run_does(
    data,
):
    root, inp = data
    run = root / "killed"
    point = f"published-session_revisions:{REVISING_BATCH}"
    seen = run_until_killed(
        revising_args(inp, run),
        f"PAUSED {point.replace(':', ' ')}",
        cli_env(SESSIONIZE_PAUSE_AT=point),
    )
    assert "PAUSED" in seen
    done = sessionize(*revising_args(inp, run))
    assert done.returncode == 0, done.stderr[-3000:]
    for name in OUTPUTS:
        assert read(run / "out", name).equals(read(root / "clean" / "out", name)), name


def test_state_tools_read_the_kept_sessions_and_export_the_open_ones_only(data, tmp_path):
    """At the revising batch the state holds sessions already written (kept for the
    window, marked with their id) and open ones: `state export` writes the open ones, none
    of them a session current in the outputs by then."""
    root, _ = data
    job = locate(str(root / "clean" / "chk"), None)
    _, _, parts = read_state(job, REVISING_BATCH)
    rows = pa.concat_tables([p.rows for p in parts])
    kept = set(rows.filter(pc.is_valid(rows["emitted_session"]))["emitted_session"].to_pylist())
    current: dict[str, dict] = {}  # the docs' rule, by a plain loop over batches <= it
    out = root / "clean" / "out"
    written = [*read(out, "sessions").to_pylist(), *read(out, "session_revisions").to_pylist()]
    for row in sorted(written, key=lambda r: (r["batch_id"], r.get("revision") or 0)):
        if row["batch_id"] <= REVISING_BATCH:
            current[row["session_id"]] = row
    live = {sid for sid, r in current.items() if not r.get("retracted")}
    assert kept and kept <= live
    _, count = export_sessions(job, str(tmp_path / "open.parquet"), REVISING_BATCH)
    exported = set(pq.read_table(tmp_path / "open.parquet")["session_id"].to_pylist())
    assert count == len(exported) > 0
    assert not exported & live


@pytest.mark.parametrize(
    "extra, line",
    [
        (["--state", "spark-rocksdb"], "not in Spark-managed state (--state spark-*)"),
        (["--open-sessions", "--output-format", "delta"], "or --open-sessions"),
    ],
)
def test_what_cannot_take_revisions_yet_is_refused_in_one_line(data, tmp_path, extra, line):
    _, inp = data
    done = sessionize(*revising_args(inp, tmp_path), *extra)
    assert done.returncode == 2, done.stderr[-3000:]
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and line in lines[0], done.stderr[-3000:]
    assert not (tmp_path / "out").exists()


def test_maintain_compact_folds_revisions_into_sessions_and_page_views(spark, data, tmp_path):
    """`maintain --compact` over the stream's output, killed once in the middle of its
    fold: the docs' query gives the same current sessions throughout; `sessions` and
    `page_views` read alone are then the current sessions and their page views (by a plain
    loop over what the batches wrote); a rewind into the folded batches is refused in one
    line."""
    root, _ = data
    out = tmp_path / "out"
    shutil.copytree(root / "clean" / "out", out, symlinks=True)
    before = current_sessions(spark, out)
    latest: dict[str, dict] = {}  # the docs' rule, by a plain loop
    for source, name in ((False, "sessions"), (True, "session_revisions")):
        for row in read(out, name).to_pylist():
            rank = (row["batch_id"], row.get("revision") or 0)
            if row["session_id"] not in latest or rank > latest[row["session_id"]]["rank"]:
                latest[row["session_id"]] = {**row, "rank": rank, "source": source}
    live = {sid: r for sid, r in latest.items() if not r.get("retracted")}
    views = []
    for source, name in ((False, "page_views"), (True, "page_view_revisions")):
        for pv in read(out, name).to_pylist():
            r = live.get(pv["session_id"])
            if r is not None and (r["batch_id"], r["source"]) == (pv["batch_id"], source):
                views.append(pv)
    assert any(r["source"] for r in live.values()) and len(live) < len(latest)

    # Killed after `sessions` and `page_views` switched, before `session_revisions`: the
    # query reads the same rows, and the next compaction folds to the same end.
    point = "folded-files-session_revisions:1"
    seen = run_until_killed(
        ["maintain", "--output", str(out), "--compact"],
        f"PAUSED {point.replace(':', ' ')}",
        cli_env(SESSIONIZE_PAUSE_AT=point),
    )
    assert "PAUSED" in seen
    assert read(out, "session_revisions").num_rows > 0
    assert current_sessions(spark, out) == before
    done = sessionize("maintain", "--output", str(out), "--compact", env=cli_env())
    assert done.returncode == 0, done.stderr[-3000:]

    assert current_sessions(spark, out) == before
    alone = spark.read.parquet(str(out / "sessions")).drop("batch_id").collect()
    assert sorted((r.asDict() for r in alone), key=lambda r: r["session_id"]) == before
    assert [r["session_id"] for r in before] == sorted(live)
    key = ("session_id", "position")
    assert sorted(read(out, "page_views").to_pylist(), key=lambda v: [v[k] for k in key]) == (
        sorted(views, key=lambda v: [v[k] for k in key])
    )
    assert read(out, "session_revisions").num_rows == 0
    sink = ParquetSink(str(out))
    with pytest.raises(SinkError, match=r"batches up to \d+ were compacted with their revisions"):
        sink.check_retractable(REVISING_BATCH, "add --accept-duplicates")  # what rewind asks
    with pytest.raises(SinkError) as refused:  # what rewind and batch --from then do
        sink.invalidate_from(REVISING_BATCH)
    assert "\n" not in str(refused.value)
    assert current_sessions(spark, out) == before


def test_reprocessing_a_revised_hour_equals_a_clean_run(spark, tmp_path):
    """`sessionize batch` by arrival hour: each hour's directory brings events of the hour
    before, which revise its sessions. Hours 1 and 2 then change and are run again: every
    output, the revisions included, equals a clean run of the changed input, since the
    rerun starts from the state before hour 1 with its kept sessions and retires the
    revisions the first run wrote for the hours it reruns."""
    inp = generate(tmp_path / "in", hours=3, users=60, events_per_hour=600, late_rate=0.0)
    hour = {h: inp / "event_date=2026-11-01" / f"event_hour={h:02d}" for h in range(3)}
    # A third of hour 0's lines arrive in hour 1's directory, and of hour 1's in hour 2's,
    # behind the watermark.
    for h in (0, 1):
        for f in sorted(hour[h].glob("part-*.json")):
            lines = f.read_text().splitlines()
            f.write_text("\n".join(x for i, x in enumerate(lines) if i % 3) + "\n")
            (hour[h + 1] / f"late-{f.name}").write_text("\n".join(lines[::3]) + "\n")

    def batch(out, start_hour: int) -> None:
        options = BatchOptions(
            input=str(inp),
            output=str(out),
            start=START.replace(hour=start_hour),
            end=START.replace(hour=2),
            partitions=3,
            rules=RULES,
            mapping=MAPPING,
        )
        run_batch(options, spark, on_hour=lambda _: None)

    out = tmp_path / "out"
    batch(out, 0)
    revised = read(out, "session_revisions").to_pylist()
    assert any(r["retracted"] for r in revised) and any(not r["retracted"] for r in revised)
    assert {r["batch_id"] for r in revised} >= {2026110101, 2026110102}, revised
    before = read(out, "session_revisions")
    # Hours 1 and 2 change: hour 1's late files lose every other line, hour 2's are gone,
    # so the rerun's hour 2 revises nothing where the first run's did.
    for f in sorted(hour[1].glob("late-*.json")):
        lines = f.read_text().splitlines()
        f.write_text("\n".join(lines[::2]) + "\n")
    for f in hour[2].glob("late-*.json"):
        f.unlink()
    batch(out, 1)
    clean = tmp_path / "clean"
    batch(clean, 0)
    for name in OUTPUTS:
        assert read(out, name).equals(read(clean, name)), name
    assert not read(out, "session_revisions").equals(before)


def current_page_views(out) -> list[dict]:
    """The docs' rule by a plain loop: per current session, the page views of the latest
    batch that wrote some (a revision's before a first write's in one batch)."""
    latest: dict[str, dict] = {}
    for name in ("sessions", "session_revisions"):
        for row in read(out, name).to_pylist():
            rank = (row["batch_id"], row.get("revision") or 0)
            if row["session_id"] not in latest or rank > latest[row["session_id"]]["rank"]:
                latest[row["session_id"]] = {**row, "rank": rank}
    live = {s for s, r in latest.items() if not r.get("retracted")}
    views: dict[str, dict] = {}
    for rank, name in enumerate(("page_views", "page_view_revisions")):
        for pv in read(out, name).to_pylist():
            if pv["session_id"] in live:
                views.setdefault(pv["session_id"], {}).setdefault((pv["batch_id"], rank), [])
                views[pv["session_id"]][(pv["batch_id"], rank)].append(pv)
    return sorted(
        ((sid, pv["position"], pv["page"]) for sid, by in views.items() for pv in by[max(by)]),
    )


def test_a_late_close_event_leaves_a_revised_session_without_its_old_page_views(spark, tmp_path):
    """A session of a click and two page views, closed and written; a late `browser_close`
    one minute after the click then cuts the page views off into a session of their own:
    the revised session (`page_view_count` 0) keeps only its own events' rows (one per
    event), in the docs' rule and after `maintain --compact`, and the current page views
    equal one batch of every event."""
    inp = tmp_path / "in"
    hour = {h: inp / "event_date=2026-11-01" / f"event_hour={h:02d}" for h in (0, 1)}
    lines = {
        hour[0] / "part-0.json": [
            (1, "00:00", "click", "home"), (1, "00:05", "view", "pricing"),
            (1, "00:06", "view", "blog"),
        ],
        hour[1] / "part-0.json": [(2, "01:00", "view", "home")],  # the watermark passes
        hour[0] / "part-1.json": [(1, "00:01", "browser_close", "home")],  # late
    }  # fmt: skip
    for order, (path, events) in enumerate(lines.items()):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("".join(
            json.dumps({"user_id": u, "event_time": f"2026-11-01T{t}:00Z", "action": a,
                        "page": {"current": p}}) + "\n"
            for u, t, a, p in events
        ))  # fmt: skip
        os.utime(path, (1_800_000_000 + order, 1_800_000_000 + order))
    done = sessionize(*revising_args(inp, tmp_path))
    assert done.returncode == 0, done.stderr[-3000:]
    out = tmp_path / "out"
    cut = "1-" + str(int(START.timestamp() * 1000))  # user 1's session from 00:00
    revised = [r for r in read(out, "session_revisions").to_pylist() if r["session_id"] == cut]
    assert [(r["page_view_count"], r["event_count"]) for r in revised] == [(0, 2)]
    batch_of_every_event(spark, inp, tmp_path / "batch" / "out")
    want = sorted(  # user 1's: user 2's session is still open at the stream's end
        (v["session_id"], v["position"], v["page"])
        for v in read(tmp_path / "batch" / "out", "page_views").to_pylist()
        if v["user_id"] == 1
    )
    assert [v[1:] for v in want if v[0] == cut] == [(1, "home"), (2, "home")]
    assert [v[2] for v in want if v[0] != cut] == ["pricing", "blog"]
    assert current_page_views(out) == want

    done = sessionize("maintain", "--output", str(out), "--compact", env=cli_env())
    assert done.returncode == 0, done.stderr[-3000:]
    alone = read(out, "page_views").to_pylist()
    assert sorted((v["session_id"], v["position"], v["page"]) for v in alone) == want
