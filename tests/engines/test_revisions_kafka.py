"""`--revise-within` on Kafka (docs/concepts/revisions.md, "On Kafka"): `PREFIX.sessions`
and `PREFIX.page_views` keyed by `session_id`, a revision the session's new record, a
retraction a tombstone. The topics read as a table (the last record of each key, a
tombstone deleting it), as a log-compacted topic or a ksqlDB table keeps them, equal
`sessionize batch` over all the events; a kill -9 inside the revising batch's transaction,
then a restart, gives the same table."""

from __future__ import annotations

import pytest

from sessionize.commands.stream import StreamOptions, run_stream
from tests.engines.revising import (
    FLUSH_USER,
    MAPPING,
    REVISING_BATCH,
    RULES,
    WINDOW,
    as_table,
    batch_of_every_event,
    revising_input,
)
from tests.helpers import cli_env, read_output, run_until_killed, sessionize, stream_args
from tests.sinks.kafka_consumer import kafka_uri, read_topic
from tests.sinks.test_kafka_stream import _iso
from tests.sources.conftest import _service_env


@pytest.fixture(scope="module")
def data(spark, tmp_path_factory):
    """The Parquet test's input (two hours, files held back two hours, a flush event), its
    batch run, and its uninterrupted revising stream to Kafka (the URI)."""
    root = tmp_path_factory.mktemp("revisions-kafka")
    inp = revising_input(root / "in")
    env = _service_env("kafka")
    with pytest.MonkeyPatch.context() as patch:
        for k, v in env.items():
            patch.setenv(k, v)
        uri = kafka_uri(root / "clean")
        run_stream(
            StreamOptions(
                input=str(inp),
                output=uri,
                checkpoint=str(root / "clean" / "chk"),
                partitions=3,
                max_files_per_trigger=1,
                rules=RULES,
                mapping=MAPPING,
            ),
            spark,
            on_batch=lambda _: None,
        )
    batch_of_every_event(spark, inp, root / "batch")
    return root, inp, uri, env


def _json(row: dict) -> dict:
    return {k: _iso(v) for k, v in row.items() if k != "batch_id"}


def test_the_topics_read_as_tables_equal_one_batch_of_every_event(data):
    root, _, uri, _ = data
    records = read_topic(uri, "sessions")
    tombstones = [r for r in records if len(r) == 1]
    revisions = [r for r in records if r.get("revision", 0) > 0]
    assert tombstones and revisions, "no session was retracted and revised"
    assert {r["batch_id"] for r in revisions} >= {REVISING_BATCH}
    assert all(r["key"] == r["session_id"] for r in records if len(r) > 1)
    assert read_topic(uri, "late_events") == [], "the window covers the input's lateness"
    assert read_topic(uri, "session_revisions") == []

    sessions = {k: v for k, v in as_table(records).items() if v["user_id"] != FLUSH_USER}
    for v in sessions.values():
        del v["batch_id"], v["revision"]
    batch = read_output(root / "batch", "sessions", with_batch=False).to_pylist()
    want = {r["session_id"]: _json(r) for r in batch if r["user_id"] != FLUSH_USER}
    assert sessions == want

    views = as_table(read_topic(uri, "page_views"))
    got_views = {
        sid: [{k: v for k, v in pv.items() if k != "batch_id"} for pv in v["page_views"]]
        for sid, v in views.items()
        if sid in want
    }
    want_views: dict[str, list[dict]] = {}
    for pv in read_output(root / "batch", "page_views", with_batch=False).to_pylist():
        want_views.setdefault(pv["session_id"], []).append(_json(pv))
    want_views = {sid: sorted(v, key=lambda pv: pv["position"]) for sid, v in want_views.items()}
    assert {sid: sorted(v, key=lambda pv: pv["position"]) for sid, v in got_views.items()} == {
        sid: v for sid, v in want_views.items() if sid in want
    }
    assert set(views) <= set(as_table(records)), "page views of a retracted session"


def test_kill_9_inside_the_revising_transaction_then_restart_gives_the_same_tables(data, tmp_path):
    root, inp, clean_uri, env = data
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("SESSIONIZE_TEST_KAFKA", env["SESSIONIZE_TEST_KAFKA"])
        uri = kafka_uri(tmp_path)
    args = [*stream_args(inp, tmp_path, output=uri), "--revise-within", WINDOW]
    point = f"kafka-produced:{REVISING_BATCH}"
    seen = run_until_killed(
        args, f"PAUSED {point.replace(':', ' ')}", cli_env(**env, SESSIONIZE_PAUSE_AT=point)
    )
    assert "PAUSED" in seen
    done = sessionize(*args, env=cli_env(**env))
    assert done.returncode == 0, done.stderr[-3000:]
    for name in ("sessions", "page_views"):
        assert as_table(read_topic(uri, name)) == as_table(read_topic(clean_uri, name)), name
    # The killed transaction was aborted: a read_committed consumer sees each record once.
    assert len(read_topic(uri, "sessions")) == len(read_topic(clean_uri, "sessions"))
