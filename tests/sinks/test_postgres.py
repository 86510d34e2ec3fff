"""The PostgreSQL sink beyond the contract the file sinks share (test_exactly_once.py,
test_crash_and_outage.py): all outputs in one transaction through kill -9 at each step, a
connection lost mid-publish, column types and indexes, and a stream into PostgreSQL that
equals the same stream into Parquet, rewound on this sink, without its password anywhere."""

from __future__ import annotations

import threading

import psycopg
import pytest

from sessionize.errors import SinkError
from sessionize.sinks.postgres import parse
from sessionize.state.backends.postgres_pool import pool_for
from tests.sinks.conftest import kill_when_paused, make_sink
from tests.sinks.rows import stage
from tests.sinks.test_exactly_once import _expected, _seen

KIND = "postgresql"


def _schema(uri: str) -> str:
    return uri.split("schema=", 1)[1]


@pytest.mark.parametrize("point", ["publishing:0", "published-invalid_events:0"])
def test_killed_before_or_inside_publish_then_rerun_gives_each_row_once(pg_output, point):
    """Killed after staging (before the publish began) or inside its transaction (every
    output moved, not committed): readers see the old batch in every output; the rerun
    shows the new one once."""
    sink = make_sink(KIND, pg_output)
    sink.clear_staging(0)
    stage(sink, 0, "old")
    sink.publish(0)
    kill_when_paused("tests.sinks.publish_proc", KIND, pg_output, "0", "new", point=point)
    for name in ("sessions", "invalid_events"):
        assert _seen(KIND, pg_output, name) == _expected(0, "old")
    sink.clear_staging(0)
    stage(sink, 0, "new")
    sink.publish(0)
    for name in ("sessions", "invalid_events"):
        assert _seen(KIND, pg_output, name) == _expected(0, "new")
    with psycopg.connect(pg_output.split("?")[0]) as conn:
        batches = conn.execute(
            f'SELECT batch_id, row_counts FROM "{_schema(pg_output)}"._sessionize_batches'
        ).fetchall()
        staged = conn.execute(
            f'SELECT count(*) FROM "{_schema(pg_output)}"._sessionize_staged_sessions'
        ).fetchone()[0]
    assert batches == [(0, {"sessions": 6, "page_views": 0, "late_events": 0, "invalid_events": 6})]
    assert staged == 0


def test_connection_lost_mid_publish_is_one_line_and_a_retry_completes(pg_output, monkeypatch):
    """The server ends the publishing session inside its transaction (as a server restart
    does): one SinkError line, nothing of the new attempt visible; the retry publishes it."""
    from sessionize import faults

    sink = make_sink(KIND, pg_output)
    sink.clear_staging(0)
    stage(sink, 0, "old")
    sink.publish(0)
    sink.clear_staging(0)
    stage(sink, 0, "new")
    pool_for(parse(pg_output).conninfo).clear()  # the publish opens a new connection
    real = faults.pause_point

    def terminate(name: str, version: int) -> None:
        if name == "published-sessions":
            with psycopg.connect(pg_output.split("?")[0], autocommit=True) as admin:
                admin.execute(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE pid <> "
                    "pg_backend_pid() AND query LIKE %s",
                    (f"%{_schema(pg_output)}%",),
                )
        real(name, version)

    monkeypatch.setattr(faults, "pause_point", terminate)
    with pytest.raises(SinkError) as err:
        sink.publish(0)
    message = str(err.value)
    assert "\n" not in message and message.startswith("publishing batch 0"), message
    assert "is the server reachable?" in message, message
    for name in ("sessions", "invalid_events"):
        assert _seen(KIND, pg_output, name) == _expected(0, "old")
    monkeypatch.setattr(faults, "pause_point", real)
    sink.publish(0)
    for name in ("sessions", "invalid_events"):
        assert _seen(KIND, pg_output, name) == _expected(0, "new")


def test_an_unreachable_server_is_one_line_without_the_password():
    sink = make_sink(KIND, "postgresql://me:hunter2pw@127.0.0.1:1/db?schema=x&connect_timeout=2")
    with pytest.raises(SinkError) as err:
        sink.clear_staging(0)
    message = str(err.value)
    assert "\n" not in message and "is the server reachable?" in message, message
    assert "hunter2pw" not in message, message
    assert "published again when the job is restarted" in message  # a batch's step


def test_a_report_of_an_unreachable_server_says_nothing_of_restarting_a_job(tmp_path):
    from sessionize.report import build_report

    uri = "postgresql://me:hunter2pw@127.0.0.1:1/db?schema=x&connect_timeout=2"
    with pytest.raises(SinkError) as err:
        build_report(uri, str(tmp_path / "r.html"))
    message = str(err.value)
    assert "is the server reachable?" in message and "restart" not in message, message
    assert "hunter2pw" not in message and not (tmp_path / "r.html").exists()


def test_tables_have_real_column_types_and_indexes(pg_output):
    sink = make_sink(KIND, pg_output)
    sink.clear_staging(0)
    stage(sink, 0, "t")
    sink.publish(0)
    schema = _schema(pg_output)
    with psycopg.connect(pg_output.split("?")[0]) as conn:
        types = dict(
            conn.execute(
                "SELECT table_name || '.' || column_name, data_type"
                " FROM information_schema.columns WHERE table_schema = %s",
                (schema,),
            ).fetchall()
        )
        indexes = {
            r[0]
            for r in conn.execute(
                "SELECT indexdef FROM pg_indexes WHERE schemaname = %s AND tablename = 'sessions'",
                (schema,),
            )
        }
        plan = conn.execute(
            f'EXPLAIN SELECT * FROM "{schema}".sessions WHERE user_id = 7 ORDER BY start_time',
            prepare=False,
        ).fetchall()
    assert types["sessions.start_time"] == "timestamp with time zone"
    assert types["sessions.pages"] == "ARRAY"
    assert types["sessions.user_id"] == types["sessions.batch_id"] == "bigint"
    assert types["sessions.session_date"] == "date"
    assert types["page_views.position"] == "integer"
    assert types["invalid_events.raw"] == "text"
    assert any("(user_id, start_time)" in i for i in indexes), indexes
    assert any("(batch_id)" in i for i in indexes), indexes
    assert plan  # the query runs on the types as created


def test_delta_or_a_files_state_under_a_postgresql_output_are_refused_in_one_line():
    from datetime import UTC, datetime

    from sessionize.commands.batch import BatchOptions
    from sessionize.errors import ConfigError
    from sessionize.sinks.registry import check_output

    with pytest.raises(ConfigError) as err:
        check_output("postgresql://me:pw9secret@db/app?schema=a", "delta")
    assert "\n" not in str(err.value) and "pw9secret" not in str(err.value)
    check_output("postgresql://me@db/app?schema=a", "parquet")
    hour = datetime(2026, 11, 1, tzinfo=UTC)
    opts = BatchOptions(input="in", output="postgresql://me@db/app", start=hour, end=hour)
    with pytest.raises(ConfigError, match="--state files:PATH or --state postgresql://"):
        opts.state_uri()


def test_stream_into_postgresql_equals_parquet_and_rewinds_there(spark, pg_output, tmp_path):
    """`sessionize stream` (files state) into PostgreSQL, with a password in the URI, gives
    the rows the same run gives in Parquet; the checkpoint holds no password; a rewind to
    batch 0 retires exactly the later batches' rows of every table."""
    from sessionize.commands.rewind import rewind
    from sessionize.commands.stream import StreamOptions, run_stream
    from tests.helpers import OUTPUTS, generate
    from tests.sinks.conftest import read_rows
    from tests.sinks.test_batch_outputs import _canonical

    inp = generate(
        tmp_path / "in",
        hours=1,
        users=60,
        events_per_hour=400,
        files_per_hour=2,
        invalid_rate=0.01,
        late_rate=0.01,
    )
    secret = "pw7sEcret"
    user, rest = pg_output.split("://", 1)[1].split("@", 1)
    output = f"postgresql://{user}:{secret}@{rest}"  # the test server trusts any password
    for out, run in ((str(tmp_path / "ref"), "ref"), (output, "pg")):
        opts = StreamOptions(
            input=str(inp),
            output=out,
            checkpoint=str(tmp_path / run / "chk"),
            partitions=2,
            max_files_per_trigger=1,
        )
        run_stream(opts, spark, on_batch=lambda _: None)
    expected = {name: read_rows("parquet", str(tmp_path / "ref"), name) for name in OUTPUTS}
    for name in OUTPUTS:
        got, want = read_rows(KIND, pg_output, name), expected[name]
        assert got.num_rows == want.num_rows, name
        if want.num_rows:
            schema = want.schema
            assert _canonical(got, name, schema).equals(_canonical(want, name, schema)), name
    assert expected["sessions"].num_rows and expected["invalid_events"].num_rows
    for path in (tmp_path / "pg" / "chk").rglob("*"):
        if path.is_file():
            assert secret.encode() not in path.read_bytes(), path

    said: list[str] = []
    rewind(str(tmp_path / "pg" / "chk"), 0, say=said.append)
    for name in OUTPUTS:
        left = read_rows(KIND, pg_output, name)
        want = expected[name]
        kept = [b for b in want["batch_id"].to_pylist() if b == 0] if want.num_rows else []
        assert (left["batch_id"].to_pylist() if left.num_rows else []) == kept, name
    assert any(line.startswith("outputs: retire ") for line in said), said


def test_the_report_reads_the_published_tables(pg_output, tmp_path):
    from sessionize.report import build_report

    sink = make_sink(KIND, pg_output)
    for b in (0, 1):
        sink.clear_staging(b)
        stage(sink, b, "r")
    sink.publish(0)  # batch 1 staged, not published: readers do not see it
    result = build_report(pg_output, str(tmp_path / "report.html"))
    assert result.sessions == len(_expected(0, "r"))


def test_a_retried_task_replaces_its_staged_rows(pg_output):
    sink = make_sink(KIND, pg_output)
    sink.clear_staging(0)
    stage(sink, 0, "first")
    stage(sink, 0, "retry")  # every task of the batch runs again, same partitions
    assert sink.staged_counts("invalid_events", 0, "reason") == {"x": 6}
    sink.publish(0)
    assert _seen(KIND, pg_output, "invalid_events") == _expected(0, "retry")


def test_pooled_connections_the_server_ended_are_replaced(pg_output):
    """Idle connections a server restart ended: the next call opens new ones."""
    name = f"t_{_schema(pg_output)}"
    sink = make_sink(KIND, f"{pg_output}&application_name={name}")
    sink.clear_staging(0)
    stage(sink, 0, "a")
    sink.publish(0)
    with psycopg.connect(pg_output.split("?")[0], autocommit=True) as admin:
        ended = admin.execute(
            "SELECT count(*) FILTER (WHERE pg_terminate_backend(pid)) FROM pg_stat_activity "
            "WHERE application_name = %s",
            (name,),
        ).fetchone()[0]
    assert ended >= 1
    assert sink.published("sessions") == [0]


def test_a_transaction_the_server_rolls_back_for_a_deadlock_runs_again(pg_output):
    """Two workers that lock the same two tables in opposite orders (one creating the
    output's indexes, one staging rows): the server rolls one back, and the pool runs it
    again rather than failing the batch."""
    schema, admin_uri = _schema(pg_output), pg_output.split("?")[0]
    a, b = f'"{schema}".a', f'"{schema}".b'
    with psycopg.connect(admin_uri, autocommit=True) as admin:
        admin.execute(f'CREATE SCHEMA IF NOT EXISTS "{schema}"')
        admin.execute(f"CREATE TABLE {a} (x int)")
        admin.execute(f"CREATE TABLE {b} (x int)")
    first, second = threading.Event(), threading.Event()
    attempts = []

    def pooled(conn: psycopg.Connection) -> str:
        attempts.append(1)
        with conn.transaction():
            conn.execute("SET LOCAL deadlock_timeout = '100ms'")  # the victim: checks first
            conn.execute(f"LOCK TABLE {a} IN EXCLUSIVE MODE")
            first.set()
            second.wait(10)
            conn.execute(f"LOCK TABLE {b} IN EXCLUSIVE MODE")
        return "done"

    def other() -> None:
        with psycopg.connect(admin_uri, autocommit=True) as conn, conn.transaction():
            conn.execute("SET LOCAL deadlock_timeout = '10s'")
            conn.execute(f"LOCK TABLE {b} IN EXCLUSIVE MODE")
            second.set()
            first.wait(10)
            conn.execute(f"LOCK TABLE {a} IN EXCLUSIVE MODE")

    thread = threading.Thread(target=other)
    thread.start()
    try:
        assert pool_for(admin_uri).run(pooled) == "done"
    finally:
        thread.join(30)
    assert len(attempts) == 2  # rolled back once for the deadlock, then committed


def test_removing_batches_with_a_table_dropped_by_hand_fails_in_one_line_and_removes_nothing(
    pg_output,
):
    """`invalidate_from` (rewind, `batch --from`) over an output one of whose tables was
    dropped: one line naming the table, and the other tables keep their batches (had it
    said "nothing to remove", a restart would append them again). An output never written
    has nothing to remove."""
    assert make_sink(KIND, pg_output).invalidate_from(0) == []
    sink = make_sink(KIND, pg_output)
    for batch in (0, 1):
        sink.clear_staging(batch)
        stage(sink, batch, f"b{batch}")
        sink.publish(batch)
    with psycopg.connect(pg_output.split("?")[0], autocommit=True) as conn:
        conn.execute(f'DROP TABLE "{_schema(pg_output)}".late_events')
    with pytest.raises(SinkError) as err:
        make_sink(KIND, pg_output).invalidate_from(1)
    assert "late_events" in str(err.value) and "\n" not in str(err.value)
    assert _seen(KIND, pg_output, "sessions") == _expected(0, "b0") + _expected(1, "b1")
