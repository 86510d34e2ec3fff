"""`--revise-within` with identity end to end (docs/design.md, "Revisions", "With
identity"): visits with logins, logouts, second and shared devices whose held-back files
bring events hours behind the watermark, streamed file by file; the current numbered
sessions (the docs' query over `sessions` and `session_revisions`), the `users` and the
`identities` (their latest rows) equal `sessionize batch` over every event, on local
Parquet, Delta, PostgreSQL and Kafka (the topics read as tables), and a kill -9 inside a
revising batch once the first step handed its changes on, then a restart, writes what the
uninterrupted run wrote. On PostgreSQL a rewind to the batch before the first revision
gives the tables of a run stopped there, and a restart the uninterrupted run's."""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import replace
from datetime import date, datetime

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from sessionize.commands.batch import BatchOptions, run_batch
from sessionize.commands.statetools.inspect import export_sessions, read_state, summarize
from sessionize.commands.statetools.job import locate
from sessionize.commands.stream import StreamOptions, run_stream
from sessionize.mapping import EventMapping
from tests.engines.revising import REVISING_BATCH, RULES, START, Postgres, as_table, read
from tests.helpers import cli_env, generate, run_until_killed, sessionize
from tests.sinks.kafka_consumer import kafka_uri, read_topic
from tests.sinks.test_kafka_stream import _iso
from tests.sources.conftest import _service_env

MAPPING = EventMapping(anonymous="anonymous_id", user_type="string", session_columns=2)
FLUSH = "anon-flush"  # its one event, an hour after the data, moves the watermark past all
OUTPUTS = (
    "sessions",
    "page_views",
    "session_revisions",
    "page_view_revisions",
    "users",
    "identities",
    "late_events",
)


@pytest.fixture(scope="module")
def data(spark, tmp_path_factory):
    """The input, its uninterrupted stream to Parquet and its batch run."""
    root = tmp_path_factory.mktemp("revisions-identity")
    inp = generate(
        root / "in",
        start=START,
        hours=2,
        users=80,
        events_per_hour=800,
        identity_data=True,
        late_rate=0.05,
        invalid_rate=0.0,
        files_per_hour=2,
    )
    newest = max(p.stat().st_mtime for p in inp.rglob("*.json*"))
    flush = inp / "event_date=2026-11-01" / "event_hour=03" / "part-00000.json"
    flush.parent.mkdir(parents=True)
    event = {"anonymous_id": FLUSH, "event_time": "2026-11-01T03:00:00+00:00"}
    flush.write_text(json.dumps({**event, "page": {"current": "home"}}) + "\n")
    os.utime(flush, (newest + 60, newest + 60))
    run_stream(stream(inp, root / "clean"), spark, on_batch=lambda _: None)
    run_batch(
        BatchOptions(
            input=str(inp),
            output=str(root / "batch"),
            start=START,
            end=START.replace(hour=4),
            partitions=3,
            mapping=MAPPING,
        ),
        spark,
        on_hour=lambda _: None,
    )
    return root, inp


def stream(inp, root, output_format: str = "parquet") -> StreamOptions:
    return StreamOptions(
        input=str(inp),
        output=str(root / "out"),
        checkpoint=str(root / "chk"),
        output_format=output_format,
        partitions=3,
        max_files_per_trigger=1,
        rules=RULES,
        mapping=MAPPING,
    )


def latest(rows: list[dict], key: str) -> dict[str, dict]:
    """Per `key`, its row of the greatest batch (then revision); a retraction removes it."""
    out: dict[str, tuple] = {}
    for row in rows:
        rank = (row["batch_id"], row.get("revision") or 0)
        if row[key] not in out or rank > out[row[key]][0]:
            out[row[key]] = (rank, row)
    current = {}
    for k, (_, row) in out.items():
        if not row.get("retracted") and row.get("sessions") != 0:  # 0: a user with none left
            if "session_date" in row:  # a partition column in `sessions`, a date elsewhere
                row["session_date"] = str(row["session_date"])
            current[k] = {
                n: v for n, v in row.items() if n not in ("batch_id", "revision", "retracted")
            }
    return current


def current(out) -> dict[str, dict]:
    """The current numbered sessions, users and identities of a Parquet output."""
    written = [*read(out, "sessions").to_pylist(), *read(out, "session_revisions").to_pylist()]
    sessions = latest(written, "session_id")
    users = latest(read(out, "users").to_pylist(), "stitched_user_id")
    identities = latest(read(out, "identities").to_pylist(), "anonymous_id")
    return {
        "sessions": {k: v for k, v in sessions.items() if v["anonymous_id"] != FLUSH},
        "users": {k: v for k, v in users.items() if k != FLUSH},
        "identities": {k: v for k, v in identities.items() if k != FLUSH},
    }


def test_current_sessions_users_and_identities_after_the_stream_equal_one_batch(data):
    root, _ = data
    out = root / "clean" / "out"
    revisions = read(out, "session_revisions").to_pylist()
    assert any(not r["retracted"] for r in revisions), "no session was revised"
    assert REVISING_BATCH in {r["batch_id"] for r in revisions}
    assert read(out, "late_events").num_rows == 0, "the window covers the input's lateness"
    got, want = current(out), current(root / "batch")
    for name in ("sessions", "users", "identities"):
        assert got[name] == want[name], name
    assert max(r["session_number"] for r in got["sessions"].values()) > 1
    # Page views follow the first step's writes: every current session has its own.
    views: dict[str, dict] = {}
    for name in ("page_views", "page_view_revisions"):
        for r in read(out, name).to_pylist():
            views.setdefault(r["session_id"], {}).setdefault(r["batch_id"], []).append(r)
    for sid, row in got["sessions"].items():
        last = views[sid][max(views[sid])]
        assert [v["page"] for v in sorted(last, key=lambda v: v["position"])] == row["pages"]


@pytest.mark.timeout(1800)  # JVMs started and killed, on a busy machine
def test_kill_9_after_the_first_step_handed_on_a_revising_batch_then_restart(data, tmp_path):
    root, inp = data
    args = [
        "stream",
        "--input", str(inp),
        "--output", str(tmp_path / "out"),
        "--checkpoint", str(tmp_path / "chk"),
        "--partitions", "3",
        "--max-files-per-trigger", "1",
        "--anonymous-field", "anonymous_id",
        "--user-type", "string",
        "--revise-within", "3h",
    ]  # fmt: skip
    point = f"before-follow-on:{REVISING_BATCH}"
    seen = run_until_killed(
        args, f"PAUSED {point.replace(':', ' ')}", cli_env(SESSIONIZE_PAUSE_AT=point)
    )
    assert "PAUSED" in seen
    done = sessionize(*args, env=cli_env())
    assert done.returncode == 0, done.stderr[-3000:]
    for name in OUTPUTS:
        assert read(tmp_path / "out", name).equals(read(root / "clean" / "out", name)), name


def delta_rows(root, name: str) -> list[dict]:
    from deltalake import DeltaTable

    return DeltaTable(str(root / name)).to_pyarrow_table().to_pylist()


def test_delta_keeps_the_sessions_users_and_identities_of_one_batch(spark, data, tmp_path):
    """Delta keeps `sessions`, `users` and `identities` current: after the stream they are
    one batch's of every event, and every session keeps the page views of its latest
    first-step write (the users step alone renumbers some, and writes none)."""
    root, inp = data
    run_stream(stream(inp, tmp_path, "delta"), spark, on_batch=lambda _: None)
    out = tmp_path / "out"
    bookkeeping = ("batch_id", "revision", "revised_batch")
    sessions = {
        r["session_id"]: {k: v for k, v in r.items() if k not in bookkeeping}
        for r in delta_rows(out, "sessions")
        if r["anonymous_id"] != FLUSH
    }
    want = current(root / "batch")
    for row in want["sessions"].values():
        row["session_date"] = datetime.fromisoformat(row["session_date"]).date()
    assert sessions == want["sessions"]
    assert any(r["revision"] > 0 for r in delta_rows(out, "sessions"))
    users = {r["stitched_user_id"]: r for r in delta_rows(out, "users")}
    assert {k: v for k, v in users.items() if k != FLUSH} == want["users"]
    identities = {r["anonymous_id"]: r for r in delta_rows(out, "identities")}
    assert {k: v for k, v in identities.items() if k != FLUSH} == want["identities"]
    views: dict[str, list] = {}
    for v in sorted(delta_rows(out, "page_views"), key=lambda v: v["position"]):
        views.setdefault(v["session_id"], []).append(v["page"])
    for sid, row in sessions.items():
        assert views[sid] == row["pages"], sid


def test_maintain_compact_keeps_the_page_views_of_renumbered_sessions(data, tmp_path):
    """Compaction folds the revisions: `sessions` read alone is then the current numbered
    sessions, and `page_views` alone their page views, also of sessions the users step
    alone revised (renumbered, with no page views in their current row's batch)."""
    root, _ = data
    out = tmp_path / "out"
    shutil.copytree(root / "clean" / "out", out, symlinks=True)
    before = current(out)["sessions"]
    done = sessionize("maintain", "--output", str(out), "--compact", env=cli_env())
    assert done.returncode == 0, done.stderr[-3000:]
    alone = latest(read(out, "sessions").to_pylist(), "session_id")
    assert {k: v for k, v in alone.items() if v["anonymous_id"] != FLUSH} == before
    views: dict[str, list] = {}
    for v in sorted(read(out, "page_views").to_pylist(), key=lambda v: v["position"]):
        views.setdefault(v["session_id"], []).append(v["page"])
    for sid, row in before.items():
        assert views[sid] == row["pages"], sid


def test_bounded_sessions_with_a_window_are_numbered_as_one_batch(spark, data):
    """`Sessionizer.sessions` over a bounded input with `revise_within`: one pass, where no
    event is behind a watermark, numbers the sessions as one batch of every event does."""
    from sessionize import Sessionizer

    root, inp = data
    lines = []
    for path in sorted(inp.rglob("*.json*")):
        lines += [(line,) for line in path.read_text().splitlines() if line.strip()]
    s = Sessionizer(
        anonymous_field="anonymous_id", user_type="string", partitions=2, revise_within="3h"
    )
    sessions = s.sessions(spark.createDataFrame(lines, "value string")).sessions
    columns = ["session_id", "user_id", "stitched_user_id", "session_number", "is_new_user"]
    got = {r["session_id"]: r.asDict() for r in sessions.select(*columns).collect()}
    want = current(root / "batch")["sessions"]
    assert len(want) > 100
    assert {k: {c: v[c] for c in columns} for k, v in want.items()} == {
        k: v for k, v in got.items() if k in want
    }


def bare(row: dict, *names: str) -> dict:
    """`row` without the columns `names`."""
    return {k: v for k, v in row.items() if k not in names}


def json_rows(rows: dict[str, dict]) -> dict[str, dict]:
    """Rows of Parquet in the JSON form of the Kafka sink's records."""
    return {k: {n: _iso(v) for n, v in row.items()} for k, row in rows.items()}


@pytest.fixture(scope="module")
def kafka(spark, data, tmp_path_factory):
    """The stream to Kafka (a topic prefix of its own): its URI."""
    _, inp = data
    root = tmp_path_factory.mktemp("revisions-identity-kafka")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("SESSIONIZE_TEST_KAFKA", _service_env("kafka")["SESSIONIZE_TEST_KAFKA"])
        uri = kafka_uri(root)
    run_stream(replace(stream(inp, root), output=uri), spark, on_batch=lambda _: None)
    return uri


def test_kafka_sessions_and_page_views_read_as_tables_equal_one_batch(data, kafka):
    """On Kafka the topics read as tables (each key's last record, a tombstone deleting
    it) are one batch's of every event: `sessions` by session id, `page_views` a record
    per session, kept for a session the users step alone revised (renumbered, it has no
    page views in that batch)."""
    root, _ = data
    records = read_topic(kafka, "sessions")
    assert all(r["key"] == r["session_id"] for r in records if len(r) > 1)
    written = as_table(records)
    sessions = {
        k: bare(v, "batch_id", "revision") for k, v in written.items() if v["anonymous_id"] != FLUSH
    }
    assert sessions == json_rows(current(root / "batch")["sessions"])
    views_log = read_topic(kafka, "page_views")
    with_views = {(r["key"], r["batch_id"]) for r in views_log if len(r) > 1}
    alone = [
        r for r in records if r.get("revision") and (r["key"], r["batch_id"]) not in with_views
    ]
    assert alone, "no session was revised by the users step alone"
    views = as_table(views_log)
    assert set(views) <= set(written), "page views of a retracted session"
    for sid, row in sessions.items():
        listed = sorted(views.get(sid, {}).get("page_views", []), key=lambda v: v["position"])
        assert [v["page"] for v in listed] == row["pages"], sid


def test_kafka_users_and_identities_are_change_logs_keyed_by_their_ids(data, kafka):
    """`users` keyed by `stitched_user_id` and `identities` by `anonymous_id`: each key's
    latest record is one batch's row of every event (a user left with no session by a
    late login: a record with `sessions` 0, no longer a current user)."""
    root, _ = data
    want = current(root / "batch")
    log = read_topic(kafka, "users")
    assert log and all(r["key"] == r["stitched_user_id"] for r in log)
    assert any(r["sessions"] == 0 for r in log), "no user was left with no session"
    users = {
        k: bare(v, "batch_id")
        for k, v in as_table(log).items()
        if k != FLUSH and v["sessions"] != 0
    }
    assert users == json_rows(want["users"])
    log = read_topic(kafka, "identities")
    assert all(r["key"] == r["anonymous_id"] for r in log)
    identities = {k: bare(v, "batch_id") for k, v in as_table(log).items() if k != FLUSH}
    assert identities == json_rows(want["identities"])


def ordered(rows: list[dict]) -> list[str]:
    """A table's rows, each as text, sorted: to compare whole tables read the same way."""
    return sorted(repr(sorted(r.items())) for r in rows)


def by(key: tuple[str, ...], rows: list[dict]) -> dict[tuple, dict]:
    """`rows` by the values of their `key` columns (each key once)."""
    found = {tuple(r[k] for k in key): r for r in rows}
    assert len(found) == len(rows), f"{key} twice"
    return found


def as_read_back(row: dict) -> dict:
    """A Parquet row's values as psycopg reads them from PostgreSQL: a map (Arrow's pairs)
    a JSON object, `session_date` a date."""
    out = {}
    for k, v in row.items():
        if isinstance(v, list) and v and all(isinstance(x, tuple) for x in v):
            v = dict(v)
        out[k] = date.fromisoformat(v) if k == "session_date" and isinstance(v, str) else v
    return out


# The tables a revising identity job keeps on PostgreSQL.
TABLES = (
    "sessions",
    "page_views",
    "sessions_superseded",
    "page_views_superseded",
    "users",
    "identities",
    "late_events",
    "invalid_events",
)


@pytest.fixture(scope="module")
def postgres(spark, data, tmp_path_factory):
    """The stream to PostgreSQL: its options, a reader of its tables (`rows(NAME)`), and
    their rows after it."""
    _, inp = data
    db = Postgres()
    root = tmp_path_factory.mktemp("revisions-identity-pg")
    opts = replace(stream(inp, root), output=db.output(root))
    run_stream(opts, spark, on_batch=lambda _: None)

    def rows(name: str) -> list[dict]:
        return db.rows(opts.output, name)

    yield opts, rows, {name: rows(name) for name in TABLES}
    db.close()


def test_postgresql_keeps_the_sessions_users_and_identities_of_one_batch(data, postgres):
    """PostgreSQL keeps `sessions`, `users` and `identities` current: after the stream
    they are one batch's of every event, and every session has the page views of its
    latest first-step write (the users step alone renumbers some, and writes none)."""
    root, _ = data
    _, _, tables = postgres
    want = current(root / "batch")
    bookkeeping = ("batch_id", "revision", "revised_batch")
    sessions = {
        r["session_id"]: bare(r, *bookkeeping)
        for r in tables["sessions"]
        if r["anonymous_id"] != FLUSH
    }
    assert any(r["revision"] > 0 for r in tables["sessions"])
    assert sessions == {k: as_read_back(v) for k, v in want["sessions"].items()}
    users = {r["stitched_user_id"]: r for r in tables["users"] if r["stitched_user_id"] != FLUSH}
    assert users == {k: as_read_back(v) for k, v in want["users"].items()}
    identities = {r["anonymous_id"]: r for r in tables["identities"] if r["anonymous_id"] != FLUSH}
    assert identities == {k: as_read_back(v) for k, v in want["identities"].items()}
    views: dict[str, list] = {}
    for v in sorted(tables["page_views"], key=lambda v: v["position"]):
        views.setdefault(v["session_id"], []).append(v["page"])
    for sid, row in sessions.items():
        assert views.get(sid) == row["pages"], sid


@pytest.mark.timeout(1800)  # a rewind's CLI and a restart, on a busy machine
def test_postgresql_rewind_before_the_first_revision_then_restart(spark, data, postgres):
    """Rewound to the batch before the first revision, `sessions` and `page_views` are
    those of a run stopped there (the rows later batches revised or retracted put back,
    theirs gone), and `users` and `identities` are emptied, for the next batch to rebuild
    from the restored state of both steps; the restart gives the uninterrupted run's
    tables, the rebuilt ones included."""
    root, _ = data
    opts, rows, tables = postgres
    clean = root / "clean" / "out"
    to = min(read(clean, "session_revisions")["batch_id"].to_pylist()) - 1
    assert any(r["revised_batch"] <= to for r in tables["sessions_superseded"]), "nothing put back"
    done = sessionize("rewind", "--checkpoint", opts.checkpoint, "--to-batch", str(to))
    assert done.returncode == 0, done.stderr[-3000:]
    # A run stopped at `to` has written the Parquet run's batches up to it, none a revision.
    for name, key in (("sessions", ("session_id",)), ("page_views", ("session_id", "position"))):
        stopped = [as_read_back(r) for r in read(clean, name).to_pylist() if r["batch_id"] <= to]
        got = rows(name)
        assert all(r.get("revision", 0) == 0 for r in got), name
        assert by(key, [bare(r, "revision", "revised_batch") for r in got]) == by(key, stopped)
    for name in ("sessions_superseded", "page_views_superseded", "users", "identities"):
        assert rows(name) == [], name
    run_stream(opts, spark, on_batch=lambda _: None)
    for name in TABLES:
        assert ordered(rows(name)) == ordered(tables[name]), name


def test_state_inspect_shows_the_open_sessions_among_kept_and_identity_rows(data, tmp_path):
    """At the first revising batch the first step's state holds open events, the sessions
    kept for the window and identity rows: `state inspect` and `export` show the open
    sessions only (their users counted, their events every open event), each with the user
    its anonymous id's identity gives it so far (a plain fold: the latest user id by time,
    then by value, over the identity row and the id's open events up to the session's end);
    `state inspect` reads the users step's job, which keeps the window's numbered sessions."""
    root, _ = data
    chk = str(root / "clean" / "chk")
    job = locate(chk, None)
    _, _, parts = read_state(job, REVISING_BATCH)
    rows = pa.concat_tables([p.rows for p in parts]).to_pylist()
    identity = {r["user_id"]: r for r in rows if r["identity_first_seen"] is not None}
    open_rows = [
        r for r in rows if r["emitted_session"] is None and r["identity_first_seen"] is None
    ]
    assert open_rows and any(r["emitted_session"] for r in rows)
    _, summary = summarize(job, REVISING_BATCH)
    assert sum(p.users for p in summary) == len({r["user_id"] for r in open_rows})
    assert min(p.oldest_us for p in summary if p.oldest_us is not None) == min(
        int(r["event_time"].timestamp() * 1_000_000) for r in open_rows
    )
    export_sessions(job, str(tmp_path / "open.parquet"), REVISING_BATCH)
    sessions = pq.read_table(tmp_path / "open.parquet").to_pylist()
    assert sum(p.sessions for p in summary) == len(sessions)
    assert sum(s["event_count"] for s in sessions) == len(open_rows)
    for s in sessions:
        anon = s["anonymous_id"]
        seen = [(r["event_time"], r["sent_user_id"]) for r in open_rows
                if r["user_id"] == anon and r["event_time"] <= s["end_time"]]  # fmt: skip
        if anon in identity:
            seen.append((identity[anon]["identity_user_time"], identity[anon]["sent_user_id"]))
        users = [(t, u) for t, u in seen if u is not None]
        assert s["user_id"] == (max(users)[1] if users else None), s["session_id"]
    for args in ([], ["--job", "sessionize.users"]):
        done = sessionize(
            "state", "inspect", "--checkpoint", chk, "--version", str(REVISING_BATCH), *args
        )
        assert done.returncode == 0, done.stderr[-3000:]
