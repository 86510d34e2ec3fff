"""Identity end to end on `generate --identity-data` (visitors log in mid-visit or stay
logged in, log out, use two devices, share one): in batch mode each session's user is the
last user id its anonymous id sent up to the session's end, by a plain loop over the input
lines; streamed file by file through our store, the sessions closed by the last watermark
and the current identities are the batch's (also after a kill -9 and a restart), and a
rewind then a rerun writes the same identities again; Spark-managed state is refused in one
line."""

from __future__ import annotations

import gzip
import json
from collections import defaultdict
from datetime import UTC, datetime, timedelta

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from sessionize.commands.batch import BatchOptions, run_batch
from sessionize.commands.rewind import rewind
from sessionize.commands.statetools.inspect import summarize
from sessionize.commands.statetools.job import locate
from sessionize.commands.stream import StreamOptions, run_stream
from sessionize.config import DEFAULT_ATTRIBUTION_LOOKBACK_US, SessionRules
from sessionize.errors import ConfigError
from sessionize.logic.users import UserRules
from sessionize.mapping import EventMapping
from tests.helpers import cli_env, generate, read_output, run_until_killed, sessionize
from tests.logic import test_users

START = datetime(2026, 11, 1, tzinfo=UTC)
MAPPING = EventMapping(anonymous="anonymous_id", user_type="string", session_columns=3)


def sessions_of(root) -> pa.Table:
    table = read_output(root, "sessions", with_batch=False)
    return table.sort_by([("anonymous_id", "ascending"), ("start_time", "ascending")])


@pytest.fixture(scope="module")
def batch_run(spark, tmp_path_factory):
    root = tmp_path_factory.mktemp("identity")
    inp = generate(
        root / "in",
        start=START,
        hours=2,
        users=120,
        events_per_hour=1200,
        identity_data=True,
        invalid_rate=0.0,
        files_per_hour=2,
    )
    run_batch(
        BatchOptions(
            input=str(inp),
            output=str(root / "batch"),
            start=START,
            end=START.replace(hour=2),
            partitions=2,
            mapping=MAPPING,
        ),
        spark,
        on_hour=lambda _: None,
    )
    return root, inp


def input_events(inp) -> list[dict]:
    events = []
    for path in sorted(inp.rglob("*.json*")):
        opener = gzip.open if path.suffix == ".gz" else open
        with opener(path, "rt") as f:
            events += [json.loads(line) for line in f]
    return events


def test_each_session_carries_the_last_user_its_anonymous_id_sent(batch_run):
    root, inp = batch_run
    events = input_events(inp)
    sent: dict[str, list[tuple[datetime, str | None]]] = defaultdict(list)
    for e in events:
        t = datetime.fromisoformat(e["event_time"]).astimezone(UTC)
        sent[e["anonymous_id"]].append((t, e.get("user_id")))
    users_of = defaultdict(set)
    for anonymous_id, seen in sent.items():
        for _, user in seen:
            if user:
                users_of[user].add(anonymous_id)
    shared = [a for a, seen in sent.items() if len({u for _, u in seen if u}) > 1]
    assert shared and any(len(a) > 1 for a in users_of.values())  # the data has both cases

    sessions = sessions_of(root / "batch")
    assert sessions.num_rows > 100
    for s in sessions.to_pylist():
        user = None
        for t, u in sorted(sent[s["anonymous_id"]], key=lambda x: (x[0], x[1] or "")):
            if t > s["end_time"]:
                break
            if u is not None:
                user = u
        assert (s["user_id"], s["stitched_user_id"]) == (user, user or s["anonymous_id"]), s
    users = sessions.column("user_id")
    assert 0 < users.null_count < sessions.num_rows
    # the identities change log: each anonymous id's latest row is its whole input's
    assert current_identities(root / "batch") == whole_identities(events)


def test_sessions_are_numbered_per_stitched_user_as_the_loop_numbers_each_hour(batch_run):
    """The users step on the engine: each hour's emitted sessions, numbered and attributed
    per stitched user over the hours, and the `users` change log, as the plain loop of
    tests/logic/test_users.py gives them (the default TTL of 400 days forgets no one)."""
    root, _ = batch_run
    table = read_output(root / "batch", "sessions")
    us = pa.timestamp("us", tz="UTC")
    for name in ("start_time", "end_time", "closed_at"):
        i = table.schema.get_field_index(name)
        table = table.set_column(i, name, table[name].cast(us).cast(pa.int64()))
    hours = sorted(set(table["batch_id"].to_pylist()))
    rows = table.to_pylist()
    batches = [[r for r in rows if r["batch_id"] == h] for h in hours]
    rules = UserRules(ttl_us=400 * 86_400_000_000, lookback_us=DEFAULT_ATTRIBUTION_LOOKBACK_US)
    numbered, users = test_users.reference(batches, rules)
    got = [{(r["session_id"], r["session_number"], r["is_new_user"], r["attributed_channel"])
            for r in b} for b in batches]  # fmt: skip
    assert got == [{s[:4] for s in b} for b in numbered]
    assert sum(r["session_number"] > 1 for r in rows) > 10  # users come back
    logged = read_output(root / "batch", "users").to_pylist()
    per_hour = [
        {(r["stitched_user_id"], r["sessions"], r["events"], r["page_views"]) for r in logged
         if r["batch_id"] == h}
        for h in hours
    ]  # fmt: skip
    assert per_hour == [{(u[0], u[3], u[4], u[5]) for u in b} for b in users]


def test_bounded_sessions_are_numbered_as_the_hourly_run_numbers_them(spark, batch_run):
    """`Sessionizer.sessions` numbers a bounded input in one pass (its sessions shuffled by
    stitched user after the first step): the sessions the hourly run emitted carry the
    same numbers and attribution, since both number in the order sessions close."""
    from sessionize import Sessionizer

    root, inp = batch_run
    lines = [(json.dumps(e),) for e in input_events(inp)]
    result = Sessionizer(anonymous_field="anonymous_id", user_type="string", partitions=2)
    sessions = result.sessions(spark.createDataFrame(lines, "value string")).sessions
    columns = ["session_id", "session_number", "is_new_user", "attributed_channel"]
    bounded = {r["session_id"]: tuple(r) for r in sessions.select(*columns).collect()}
    hourly = read_output(root / "batch", "sessions").select(columns).to_pylist()
    assert len(hourly) > 100
    assert [bounded.get(r["session_id"]) for r in hourly] == [tuple(r.values()) for r in hourly]


def whole_identities(events: list[dict], ttl: timedelta | None = None) -> dict:
    """Per anonymous id, by a plain loop over the events: the last user id by event time
    (ties: the greater), the first and last event time; an event more than `ttl` after
    its id's previous one starts it afresh."""
    timed = [(datetime.fromisoformat(e["event_time"]).astimezone(UTC), e) for e in events]
    want: dict = {}
    for t, e in sorted(timed, key=lambda te: (te[0], te[1].get("user_id") or "")):
        user, first, last = want.get(e["anonymous_id"], (None, t, t))
        if ttl is not None and t - last > ttl:
            user, first = None, t
        want[e["anonymous_id"]] = (e.get("user_id") or user, first, t)
    return want


def current_identities(root) -> dict:
    """The identities change log's latest row per anonymous id (the docs' query)."""
    rows = read_output(root, "identities").to_pylist()
    latest = {}
    for r in sorted(rows, key=lambda r: r["batch_id"]):
        latest[r["anonymous_id"]] = (r["user_id"], r["first_seen"], r["last_seen"])
    return latest


def test_batch_equals_stream_and_a_rewind_restores_identities(spark, batch_run, tmp_path):
    root, inp = batch_run
    options = StreamOptions(
        input=str(inp),
        output=str(tmp_path / "out"),
        checkpoint=str(tmp_path / "chk"),
        state="files",
        partitions=2,
        max_files_per_trigger=1,
        mapping=MAPPING,
    )
    records = run_stream(options, spark, on_batch=lambda _: None)
    assert len(records) >= 4 and records[-1]["totals"]["late"] == 0
    watermark = records[-1]["watermark"]
    batch = sessions_of(root / "batch")
    closed = batch.filter(pc.less(pc.cast(batch["closed_at"], "int64"), watermark))
    streamed = sessions_of(tmp_path / "out")
    assert streamed.num_rows > 50
    assert streamed.equals(closed)
    assert current_identities(tmp_path / "out") == current_identities(root / "batch")

    # Rewound to batch 1 and run again: the state's identities are batch 1's, so the
    # batches run again write the same identities rows and the same sessions.
    identities = read_output(tmp_path / "out", "identities")
    rewind(str(tmp_path / "chk"), 1, say=lambda _: None)
    kept = read_output(tmp_path / "out", "identities")
    assert kept.equals(identities.filter(pc.less_equal(identities["batch_id"], 1)))
    run_stream(options, spark, on_batch=lambda _: None)
    assert read_output(tmp_path / "out", "identities").equals(identities)
    assert sessions_of(tmp_path / "out").equals(streamed)


def test_a_kill_9_after_a_state_commit_then_a_restart_gives_the_same_identities(
    batch_run, tmp_path
):
    """Killed after batch 2's state commit, before its publish: the restart runs batch 2
    again from the state of batch 1, and the sessions and identities are the batch's."""
    root, inp = batch_run
    args = [
        "stream",
        "--input", str(inp),
        "--output", str(tmp_path / "out"),
        "--checkpoint", str(tmp_path / "chk"),
        "--partitions", "2",
        "--max-files-per-trigger", "1",
        "--anonymous-field", "anonymous_id",
        "--user-type", "string",
    ]  # fmt: skip
    run_until_killed(args, "PAUSED", cli_env(SESSIONIZE_PAUSE_AT="after-state-commit:2"))
    done = sessionize(*args)
    assert done.returncode == 0, done.stderr[-2000:]
    watermark = json.loads((tmp_path / "chk" / "progress.jsonl").read_text().splitlines()[-1])
    batch = sessions_of(root / "batch")
    streamed = sessions_of(tmp_path / "out")
    closed = batch.filter(pc.less(pc.cast(batch["closed_at"], "int64"), watermark["watermark"]))
    assert streamed.num_rows > 50 and streamed.equals(closed)
    assert current_identities(tmp_path / "out") == current_identities(root / "batch")


def test_spark_managed_state_is_refused(spark, batch_run, tmp_path):
    _, inp = batch_run
    options = StreamOptions(
        input=str(inp),
        output=str(tmp_path / "out"),
        checkpoint=str(tmp_path / "chk"),
        state="spark-rocksdb",
        mapping=MAPPING,
    )
    with pytest.raises(ConfigError, match="--anonymous-field: Spark-managed state"):
        run_stream(options, spark, on_batch=lambda _: None)


def delta_identities(root) -> dict:
    """The kept-current `identities` Delta table, one row per anonymous id (checked)."""
    from deltalake import DeltaTable

    rows = DeltaTable(str(root / "identities")).to_pyarrow_table().to_pylist()
    table = {r["anonymous_id"]: (r["user_id"], r["first_seen"], r["last_seen"]) for r in rows}
    assert len(table) == len(rows), "an anonymous id twice"
    return table


def test_identities_kept_current_on_delta_through_a_kill_9_and_a_rewind(batch_run, tmp_path):
    """On Delta `identities` is one row per anonymous id, replaced by key in each batch's
    commit. Killed after batch 2 committed its state and its `identities` but not its other
    tables, the restart replays the publish: no row doubled or lost. Rewound to batch 1 the
    table is emptied, and the batches run again rebuild it from the restored state."""
    _, inp = batch_run
    want = whole_identities(input_events(inp))
    args = [
        "stream",
        "--input", str(inp),
        "--output", str(tmp_path / "out"),
        "--output-format", "delta",
        "--checkpoint", str(tmp_path / "chk"),
        "--partitions", "2",
        "--max-files-per-trigger", "1",
        "--anonymous-field", "anonymous_id",
        "--user-type", "string",
    ]  # fmt: skip
    run_until_killed(args, "PAUSED", cli_env(SESSIONIZE_PAUSE_AT="published-identities:2"))
    done = sessionize(*args)
    assert done.returncode == 0, done.stderr[-2000:]
    assert delta_identities(tmp_path / "out") == want

    rewound = sessionize("rewind", "--checkpoint", str(tmp_path / "chk"), "--to-batch", "1")
    assert rewound.returncode == 0, rewound.stderr[-2000:]
    assert delta_identities(tmp_path / "out") == {}
    again = sessionize(*args)
    assert again.returncode == 0, again.stderr[-2000:]
    assert delta_identities(tmp_path / "out") == want


def test_with_a_user_ttl_batch_equals_stream_and_the_loop(spark, batch_run, tmp_path):
    """`--user-ttl 20m` on two hours of visits: identities restart after 20 minutes without
    an event, by event time, so the hourly batch run and the stream file by file write the
    same sessions and the same current identities, the loop's."""
    _, inp = batch_run
    ttl = timedelta(minutes=20)
    events = input_events(inp)
    want = whole_identities(events, ttl)
    assert want != whole_identities(events)  # visitors come back after the TTL
    rules = SessionRules(user_ttl_us=int(ttl.total_seconds()) * 1_000_000)
    run_batch(
        BatchOptions(
            input=str(inp),
            output=str(tmp_path / "batch"),
            start=START,
            end=START.replace(hour=2),
            partitions=2,
            mapping=MAPPING,
            rules=rules,
        ),
        spark,
        on_hour=lambda _: None,
    )
    assert current_identities(tmp_path / "batch") == want
    options = StreamOptions(
        input=str(inp),
        output=str(tmp_path / "out"),
        checkpoint=str(tmp_path / "chk"),
        state="files",
        partitions=2,
        max_files_per_trigger=1,
        mapping=MAPPING,
        rules=rules,
    )
    records = run_stream(options, spark, on_batch=lambda _: None)
    assert records[-1]["totals"]["late"] == 0
    batch = sessions_of(tmp_path / "batch")
    watermark = records[-1]["watermark"]
    closed = batch.filter(pc.less(pc.cast(batch["closed_at"], "int64"), watermark))
    assert sessions_of(tmp_path / "out").equals(closed)
    assert current_identities(tmp_path / "out") == want
    # The users step's own state, found by its job name (users not yet past the TTL).
    version, parts = summarize(locate(str(tmp_path / "chk"), None, job="sessionize.users"))
    assert version == records[-1]["version"] and sum(p.users for p in parts) > 0


@pytest.fixture
def pg_output():
    """A PostgreSQL output URI with a schema of its own, dropped afterwards."""
    import uuid

    import psycopg

    from tests.state.services_fixtures import service_env

    uri = service_env("postgres")["SESSIONIZE_TEST_POSTGRES"]
    schema = f"identity_{uuid.uuid4().hex[:12]}"
    yield uri, schema
    with psycopg.connect(uri, autocommit=True) as conn:
        conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


def test_postgresql_keeps_the_live_identities_and_deletes_the_expired(
    spark, batch_run, pg_output, tmp_path
):
    """On PostgreSQL `identities` is one row per anonymous id, replaced in each batch's
    transaction; an identity the watermark has carried past its `last_seen + --user-ttl`
    is deleted in the batch that forgets it: what is left is the loop's identities that
    are still live."""
    import psycopg

    _, inp = batch_run
    uri, schema = pg_output
    ttl = timedelta(minutes=20)
    options = StreamOptions(
        input=str(inp),
        output=f"{uri}?schema={schema}",
        checkpoint=str(tmp_path / "chk"),
        state="files",
        partitions=2,
        max_files_per_trigger=1,
        mapping=MAPPING,
        rules=SessionRules(user_ttl_us=int(ttl.total_seconds()) * 1_000_000),
    )
    records = run_stream(options, spark, on_batch=lambda _: None)
    watermark = datetime.fromtimestamp(records[-1]["watermark"] / 1e6, UTC)
    everyone = whole_identities(input_events(inp), ttl)
    live = {a: row for a, row in everyone.items() if row[2] + ttl >= watermark}
    assert 0 < len(live) < len(everyone)
    with psycopg.connect(uri) as conn:
        rows = conn.execute(
            f'SELECT anonymous_id, user_id, first_seen, last_seen FROM "{schema}".identities'
        ).fetchall()
    assert len(rows) == len({r[0] for r in rows})  # one row per anonymous id
    assert {r[0]: (r[1], r[2], r[3]) for r in rows} == live


def test_batch_reprocessing_rebuilds_identities_kept_current_on_delta(spark, batch_run, tmp_path):
    """Hourly batches into Delta: the table is the loop's identities; reprocessing the last
    hour empties it with that hour's batch and the rerun rebuilds it whole from the state
    of the hour before (an anonymous id seen only in the first hour comes back too)."""
    _, inp = batch_run
    want = whole_identities(input_events(inp))

    def hours(start: datetime) -> None:
        run_batch(
            BatchOptions(
                input=str(inp),
                output=str(tmp_path / "out"),
                start=start,
                end=START.replace(hour=1),
                partitions=2,
                mapping=MAPPING,
                output_format="delta",
            ),
            spark,
            on_hour=lambda _: None,
        )

    hours(START)
    assert delta_identities(tmp_path / "out") == want
    hours(START.replace(hour=1))
    assert delta_identities(tmp_path / "out") == want


def _json_time(t: datetime) -> str:
    """The Kafka sink's documented JSON form of a timestamp, written here independently."""
    return t.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def test_kafka_identities_are_a_change_log_keyed_by_anonymous_id(
    spark, batch_run, tmp_path, monkeypatch
):
    """On Kafka `identities` is the change log: every record keyed by its `anonymous_id`
    (what a compacted topic keeps the latest of), and each key's latest record, by
    `batch_id`, is the loop's identity of its anonymous id."""
    from tests.sinks.kafka_consumer import kafka_uri, read_topic
    from tests.sources.conftest import _service_env

    monkeypatch.setenv("SESSIONIZE_TEST_KAFKA", _service_env("kafka")["SESSIONIZE_TEST_KAFKA"])
    _, inp = batch_run
    uri = kafka_uri(tmp_path)
    options = StreamOptions(
        input=str(inp),
        output=uri,
        checkpoint=str(tmp_path / "chk"),
        state="files",
        partitions=2,
        max_files_per_trigger=1,
        mapping=MAPPING,
    )
    records = run_stream(options, spark, on_batch=lambda _: None)
    assert len(records) >= 4
    log = read_topic(uri, "identities")
    assert log and all(r["key"] == r["anonymous_id"] for r in log)
    assert len(log) > len({r["key"] for r in log})  # ids whose identity changed again
    latest = {}
    for r in sorted(log, key=lambda r: r["batch_id"]):
        latest[r["key"]] = (r["user_id"], r["first_seen"], r["last_seen"])
    want = whole_identities(input_events(inp))
    assert latest == {
        a: (user, _json_time(first), _json_time(last)) for a, (user, first, last) in want.items()
    }


def test_identities_kept_current_on_iceberg_through_a_rerun_and_a_rewind(batch_run, tmp_path):
    """On Iceberg `identities` is one row per anonymous id, replaced by key in each batch's
    commit. Killed after batch 2 committed `identities` but not the other tables, the
    restart runs batch 2 again: the table is the loop's identities. Rewound to batch 1 it
    is emptied, and the batches run again rebuild it from the restored state."""
    from tests.sinks.conftest import iceberg_rows, iceberg_uri

    _, inp = batch_run
    want = whole_identities(input_events(inp))
    uri = iceberg_uri(tmp_path)

    def table() -> dict:
        rows = iceberg_rows(uri, "identities").to_pylist()
        got = {r["anonymous_id"]: (r["user_id"], r["first_seen"], r["last_seen"]) for r in rows}
        assert len(got) == len(rows), "an anonymous id twice"
        return got

    args = [
        "stream",
        "--input", str(inp),
        "--output", uri,
        "--checkpoint", str(tmp_path / "chk"),
        "--partitions", "2",
        "--max-files-per-trigger", "1",
        "--anonymous-field", "anonymous_id",
        "--user-type", "string",
    ]  # fmt: skip
    run_until_killed(args, "PAUSED", cli_env(SESSIONIZE_PAUSE_AT="published-identities:2"))
    done = sessionize(*args)
    assert done.returncode == 0, done.stderr[-2000:]
    assert table() == want

    rewound = sessionize("rewind", "--checkpoint", str(tmp_path / "chk"), "--to-batch", "1")
    assert rewound.returncode == 0, rewound.stderr[-2000:]
    assert table() == {}
    again = sessionize(*args)
    assert again.returncode == 0, again.stderr[-2000:]
    assert table() == want


def test_the_cli_attribution_lookback_reaches_the_users_step_and_users_sum_conversions(
    tmp_path,
):
    """`sessionize batch --attribution-lookback 30m`: of two direct sessions after ann's
    campaign one, the one starting 20 minutes after it takes the campaign, the one 45
    minutes after is Direct; `users` sums her purchases and their value. Without
    --anonymous-field the option is refused in one line before anything is written."""
    hour = tmp_path / "in" / "event_date=2026-11-01" / "event_hour=09"
    hour.mkdir(parents=True)
    campaign = "https://shop.example/?utm_source=Google&utm_medium=cpc&utm_campaign=Spring"

    def event(minute: int, page: str, url: str | None = None, **more) -> str:
        line = {"anonymous_id": "d1", "user_id": "ann", "page": {"current": page, "url": url},
                "event_time": f"2026-11-01T09:{minute:02d}:00Z", **more}  # fmt: skip
        return json.dumps(line)

    lines = [
        event(0, "/", campaign),
        event(1, "/buy", action="order", order={"total": 10.5}),
        event(20, "/"),
        event(45, "/"),
        event(46, "/buy", action="order", order={"total": 2.25}),
        event(47, "/buy", action="order"),
    ]
    (hour / "part-0.json").write_text("\n".join(lines) + "\n")
    args = [
        "batch", "--input", str(tmp_path / "in"), "--output", str(tmp_path / "out"),
        "--from", "2026-11-01T09", "--user-type", "string", "--keep-fields", "",
        "--partitions", "1", "--url-field", "page.url",
        "--conversion", "purchase=order,value=order.total", "--attribution-lookback", "30m",
    ]  # fmt: skip
    refused = sessionize(*args)  # without --anonymous-field: nothing to attribute
    assert refused.returncode == 2
    assert refused.stderr.strip().splitlines() == [
        "sessionize: error: --attribution-lookback applies to the users step, which only "
        "--anonymous-field runs: leave --attribution-lookback out, or give --anonymous-field"
    ]
    assert not (tmp_path / "out" / "sessions").exists()
    done = sessionize(*args, "--anonymous-field", "anonymous_id")
    assert done.returncode == 0, done.stderr[-2000:]
    sessions = read_output(tmp_path / "out", "sessions").to_pylist()
    got = [(f"{s['start_time']:%H:%M}", s["channel"], s["attributed_channel"],
            s["attributed_source"], s["attributed_campaign"]) for s in sessions]  # fmt: skip
    assert sorted(got) == [
        ("09:00", "Paid Search", "Paid Search", "google", "spring"),
        ("09:20", "Direct", "Paid Search", "google", "spring"),
        ("09:45", "Direct", "Direct", "(direct)", None),
    ]
    (ann,) = read_output(tmp_path / "out", "users").to_pylist()
    assert (ann["sessions"], ann["purchase_count"], ann["purchase_value"]) == (3, 3, 12.75)
