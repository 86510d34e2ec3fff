"""The `store` engine end to end: outputs, accounting, batching independence, the oracle.
The tests that carry state across batches run on the backends each names (tests/state_params.py);
the oracle and the partition count test session logic, which no backend changes, on `files`."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from urllib.parse import unquote, urlparse

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from pyspark.sql import functions as F

from sessionize.commands.stream import StreamOptions, run_stream
from sessionize.config import SessionRules
from sessionize.engines.progress import read_progress
from sessionize.schema import layout
from sessionize.state import open_backend
from sessionize.state.rows import layout_rows
from tests.helpers import generate, read_output
from tests.logic.reference import reference_advance

MINUTE = 60_000_000
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def _run(spark, tmp_path, name, inp, **kw):
    opts = StreamOptions(
        input=str(inp),
        output=str(tmp_path / name / "out"),
        checkpoint=str(tmp_path / name / "chk"),
        partitions=kw.pop("partitions", 3),
        **kw,
    )
    lines = []
    records = run_stream(opts, spark, on_batch=lines.append)
    return opts, records, lines


def _open_state_rows(opts: StreamOptions, version: int) -> pa.Table:
    """Every open-session event left in the store at `version`, across partitions."""
    backend = open_backend(opts.state_uri(), layout_rows(layout(opts.mapping)))
    tables = []
    for p in range(opts.partitions):
        ps = backend.open(opts.job, p, version)
        tables.append(ps.get_many(ps.expiring(2**62)))
        ps.abort()
    return pa.concat_tables(tables)


def _parsed(line: bytes) -> dict | None:
    """The event of one input line by the rules of docs/design.md, "Events" (default
    mapping), or None for an invalid line; written plainly, apart from the engine's parser."""
    try:
        obj = json.loads(line)
        user, page = obj["user_id"], obj["page"]["current"]
        when = datetime.fromisoformat(obj["event_time"])
    except (ValueError, KeyError, TypeError):
        return None
    if type(user) is not int or not isinstance(page, str):
        return None
    when = when if when.tzinfo else when.replace(tzinfo=UTC)
    source, technical = obj.get("source") or {}, obj.get("technical") or {}
    return {
        "user_id": user,
        "event_time": (when - EPOCH) // timedelta(microseconds=1),
        "page": page,
        "action": obj.get("action", "view"),
        "site": source.get("site"),
        "api_version": source.get("api_version"),
        "browser": technical.get("browser"),
        "language": technical.get("lang"),
        "device_type": (technical.get("device") or {}).get("type"),
    }


def _reference_stream(chk: Path, batches: int, rules: SessionRules) -> dict:
    """The reference logic (tests/logic/reference.py) run over the files each batch read
    (Spark's file source log) with the watermark rule of docs/design.md: what the outputs
    and the state must hold."""
    logged = set()  # (batch, file); a compacted log repeats the earlier batches' files
    for log in (chk / "sources" / "0").iterdir():
        if log.name.removesuffix(".compact").isdigit():  # not Spark's .crc files
            entries = [json.loads(x) for x in log.read_text().splitlines()[1:] if x]
            logged |= {(e["batchId"], e["path"]) for e in entries}
    state: dict[int, list[dict]] = {}
    out = {"sessions": [], "events": [], "views": [], "late": [], "duplicates": 0, "invalid": 0}
    watermark, max_seen = None, None
    for batch in range(batches):
        events = []
        for path in sorted(path for b, path in logged if b == batch):
            for line in Path(unquote(urlparse(path).path)).read_bytes().splitlines():
                event = _parsed(line)
                out["invalid"] += event is None
                events += [event] if event else []
        if events:
            seen = max(e["event_time"] for e in events)
            max_seen = seen if max_seen is None else max(max_seen, seen)
        after = None if max_seen is None else max_seen - rules.lateness_us
        step = reference_advance(
            [row for rows in state.values() for row in rows],
            events,
            gap_us=rules.gap_us,
            close_actions=rules.close_actions,
            watermark_before=watermark,
            watermark_after=after,
            schema3=True,
        )
        for user in step["state_removes"]:
            del state[user]
        for user in {row["user_id"] for row in step["state_puts"]}:
            state[user] = [row for row in step["state_puts"] if row["user_id"] == user]
        for name in ("sessions", "events", "views", "late"):
            out[name] += step[name]
        out["duplicates"] += step["stats"]["duplicates"]
        watermark = after
    out["state"] = [row for rows in state.values() for row in rows]
    return out


def _keys(table: pa.Table | list[dict], names: list[str]) -> list[tuple]:
    if isinstance(table, pa.Table):
        table = (
            table.select(names)
            .cast(
                pa.schema(
                    [
                        pa.field(n, pa.int64() if pa.types.is_timestamp(t) else t)
                        for n, t in zip(names, table.select(names).schema.types, strict=True)
                    ]
                )
            )
            .to_pylist()
        )
    return sorted(tuple(row[n] for n in names) for row in table)


# The stores' versions are proven by tests/state/contract.py on all four and their stream
# outputs by tests/state/test_*.py; the accounting runs on the local one and on the layout
# with the most moving parts (DynamoDB: key items, expiry index, version records).
@pytest.mark.parametrize("state", ["files", "dynamodb"], indirect=True)
def test_every_event_is_accounted_for_once(spark, tmp_path, state):
    inp = generate(tmp_path / "in", invalid_rate=0.01, duplicate_rate=0.03, late_rate=0.01)
    opts, records, lines = _run(
        spark, tmp_path, "a", inp, max_files_per_trigger=1, state=state("a")
    )
    assert len(records) >= 6 and len(lines) == len(records)
    assert lines[0].startswith("batch 0: ") and "sessions out" in lines[0]
    # The progress log has each batch once, with what it read: one file per batch here.
    logged = read_progress(str(tmp_path / "a" / "chk" / "progress.jsonl"))
    assert [r["version"] for r in logged] == [r["version"] for r in records]
    assert all(r["input"]["files"] == 1 for r in logged)
    assert set(logged[0]["phases_s"]) == {"plan", "run", "publish"}
    out = tmp_path / "a" / "out"
    totals = records[-1]["totals"]
    sessions, events = read_output(out, "sessions"), read_output(out, "events")
    views = read_output(out, "page_views")
    invalid, late = read_output(out, "invalid_events"), read_output(out, "late_events")
    state = _open_state_rows(opts, records[-1]["version"])

    raw_lines = sum(len(p.read_bytes().splitlines()) for p in inp.rglob("*.json") if p.is_file())
    assert totals["records"] == raw_lines
    # The outputs and the state are what the reference logic gives on the batches' files.
    want = _reference_stream(tmp_path / "a" / "chk", len(records), opts.rules)
    assert invalid.num_rows == want["invalid"] > 0
    late_key = ["user_id", "event_time", "page", "watermark"]
    assert late.num_rows > 0 and _keys(late, late_key) == _keys(want["late"], late_key)
    session_key = ["user_id", "start_time", "closed_at", "event_count"]
    assert _keys(sessions, session_key) == _keys(want["sessions"], session_key)
    event_key = ["user_id", "event_time", "page", "action", "position", "page_view_id"]
    assert _keys(events, event_key) == _keys(want["events"], event_key)
    view_key = ["page_view_id", "event_time", "position", "time_on_page_ms", "engaged_time_ms"]
    assert views.num_rows > 0 and _keys(views, view_key) == _keys(want["views"], view_key)
    event_key = ["user_id", "event_time", "page"]
    assert _keys(state, event_key) == _keys(want["state"], event_key)
    assert want["duplicates"] > 0
    # The engine's counters agree.
    assert (totals["invalid"], totals["late"], totals["duplicates"], totals["sessions_out"]) == (
        invalid.num_rows,
        late.num_rows,
        want["duplicates"],
        sessions.num_rows,
    )
    # Every on-time, deduplicated event is in exactly one emitted event row or open state row.
    keys = pa.concat_tables(
        [
            events.select(["user_id", "event_time", "page"]),
            state.select(["user_id", "event_time", "page"]),
        ]
    )
    assert keys.group_by(["user_id", "event_time", "page"]).aggregate([]).num_rows == keys.num_rows
    assert pc.sum(sessions["event_count"]).as_py() == events.num_rows
    assert sessions.num_rows > 0
    assert records[-1]["batch"]["open_sessions"] > 0
    assert records[-1]["batch"]["open_users"] == len(pc.unique(state["user_id"]))
    # Late events missed the watermark they are tagged with.
    assert pc.all(pc.less(late["event_time"], late["watermark"])).as_py()
    # Plain Spark reads see exactly the same committed rows.
    assert spark.read.parquet(str(out / "sessions")).count() == sessions.num_rows
    assert spark.read.parquet(str(out / "page_views")).count() == views.num_rows
    assert spark.read.parquet(str(out / "events")).count() == events.num_rows


# Batch boundaries are the engine's concern; each store's versions are proven by the
# contract suite.
@pytest.mark.parametrize("state", ["files", "postgres"], indirect=True)
def test_sessions_do_not_depend_on_micro_batch_size(spark, tmp_path, state):
    inp = generate(tmp_path / "in", invalid_rate=0.0, late_rate=0.0)
    _, one_by_one, _ = _run(
        spark, tmp_path, "small", inp, max_files_per_trigger=1, state=state("small")
    )
    _, all_at_once, _ = _run(spark, tmp_path, "big", inp, state=state("big"))
    assert len(one_by_one) > 1 and len(all_at_once) == 1
    for name in ("sessions", "page_views", "events"):
        a = read_output(tmp_path / "small" / "out", name, with_batch=False)
        b = read_output(tmp_path / "big" / "out", name, with_batch=False)
        assert a.num_rows > 0
        assert a.equals(b), name


def test_sessions_equal_spark_session_window_oracle(spark, tmp_path):
    """docs/design.md, "Semantics", item 4: without closing actions or late events, our
    sessions are exactly
    Spark's session_window(event_time, gap) over the deduplicated events."""
    gap = 10 * MINUTE
    inp = generate(tmp_path / "in", close_rate=0.0, late_rate=0.0, invalid_rate=0.0, hours=4)
    opts, records, _ = _run(
        spark,
        tmp_path,
        "o",
        inp,
        max_files_per_trigger=1,
        rules=SessionRules(gap_us=gap, lateness_us=10 * MINUTE, close_actions=()),
    )
    ours = read_output(tmp_path / "o" / "out", "sessions")
    final_watermark = records[-1]["watermark"]

    events = (
        spark.read.json(str(inp), recursiveFileLookup=True)
        .select(
            "user_id",
            F.col("event_time").cast("timestamp").alias("t"),
            F.col("page.current").alias("page"),
        )
        .dropDuplicates(["user_id", "t", "page"])
    )
    oracle = (
        events.groupBy("user_id", F.session_window("t", "10 minutes").alias("w"))
        .agg(F.count(F.lit(1)).alias("n"))
        .select(
            "user_id",
            F.unix_micros(F.col("w.start")).alias("start"),
            F.unix_micros(F.col("w.end")).alias("end"),
            "n",
        )
    )
    # Keep the sessions the final watermark has closed. Filtered in Python: Spark pushes a
    # filter on the session window below the aggregate, onto single events, which cuts
    # sessions short.
    expected = sorted(tuple(r) for r in oracle.collect() if r["end"] < final_watermark)
    got = sorted(
        zip(
            ours["user_id"].to_pylist(),
            pc.cast(ours["start_time"], pa.int64()).to_pylist(),
            pc.cast(ours["closed_at"], pa.int64()).to_pylist(),
            ours["event_count"].to_pylist(),
            strict=True,
        )
    )
    assert len(expected) > 100
    assert got == expected


@pytest.mark.parametrize("partitions", [1, 5])
def test_partition_count_does_not_change_sessions(spark, tmp_path, partitions):
    inp = generate(tmp_path / "in", hours=2, late_rate=0.0)
    _run(spark, tmp_path, "ref", inp, partitions=3)
    _run(spark, tmp_path, "p", inp, partitions=partitions)
    a = read_output(tmp_path / "ref" / "out", "sessions")
    b = read_output(tmp_path / "p" / "out", "sessions")
    assert a.num_rows > 0 and a.equals(b)
