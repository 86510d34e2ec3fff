"""The Kafka sink against the test broker: what read_committed consumers see, through
kill -9 at each step of a publish, a refused rewind, and at-least-once records."""

from __future__ import annotations

from collections import Counter

import pytest

from sessionize.engines.checkpoint import comparable
from sessionize.errors import ConfigError, SinkError
from sessionize.sinks import kafka
from sessionize.sinks.registry import open_sink
from tests.sinks.conftest import kill_when_paused
from tests.sinks.kafka_consumer import kafka_uri, read_topic
from tests.sinks.rows import stage


def _expected_sessions(batch: int, tag: str) -> list[tuple]:
    """What rows.stage writes to `sessions`, as a plain loop: (key, session_id, user, batch)."""
    rows = []
    for part in (0, 1):
        for i in range(3):
            user = 100 * part + i
            rows.append((str(user), f"{tag}-{batch}-{part}-{i}", user, batch))
    return sorted(rows)


def _seen_sessions(uri: str) -> list[tuple]:
    return sorted(
        (r["key"], r["session_id"], r["user_id"], r["batch_id"])
        for r in read_topic(uri, "sessions")
    )


def _publish(uri: str, batch: int, tag: str, job: str = "job-a") -> None:
    sink = open_sink(uri, job=job)
    sink.clear_staging(batch)
    stage(sink, batch, tag)
    sink.publish(batch)


def test_read_committed_consumer_reads_each_row_once_with_its_json(tmp_path):
    uri = kafka_uri(tmp_path)
    _publish(uri, 0, "a")
    _publish(uri, 1, "b")
    assert _seen_sessions(uri) == sorted(_expected_sessions(0, "a") + _expected_sessions(1, "b"))
    first = next(r for r in read_topic(uri, "sessions") if r["session_id"] == "a-0-0-0")
    assert first["start_time"] == "2026-11-01T23:58:00.000000Z"
    assert first["pages"] == ["home"] and first["session_date"] == "2026-11-01"
    assert "position" not in first
    invalid = read_topic(uri, "invalid_events")
    assert sorted(r["raw"] for r in invalid) == sorted(
        f"{t}-{b}-{p}-{i}" for t, b in (("a", 0), ("b", 1)) for p in (0, 1) for i in range(3)
    )
    assert all(r["key"] is None for r in invalid)
    sink = open_sink(uri, job="job-a")  # a new process's view, read back from the markers
    assert sink.published("sessions") == [0, 1]
    assert sink.rows_from("sessions", 1) == 6


@pytest.mark.parametrize(
    ("point", "visible"),
    [("kafka-before-produce", "rerun"), ("kafka-produced", "rerun"), ("published-kafka", "dead")],
)
def test_kill_during_publish_then_restart_shows_one_copy(tmp_path, point, visible):
    """Killed before or inside the transaction, the rerun's rows are the batch; killed after
    the Kafka commit (before the job's record), the rerun knows and produces nothing."""
    uri = kafka_uri(tmp_path)
    kill_when_paused("tests.sinks.publish_proc", "kafka", uri, "0", "dead", point=f"{point}:0")
    committed = point == "published-kafka"  # an open transaction shows nothing
    assert _seen_sessions(uri) == (_expected_sessions(0, "dead") if committed else [])
    _publish(uri, 0, "rerun")
    assert _seen_sessions(uri) == _expected_sessions(0, visible)
    markers = read_topic(uri, "_batches")
    assert [m["batch_id"] for m in markers] == [0]


def test_rewind_over_batches_on_kafka_is_refused_in_one_line(tmp_path):
    uri = kafka_uri(tmp_path)
    _publish(uri, 0, "a")
    _publish(uri, 1, "b")
    with pytest.raises(SinkError) as err:
        open_sink(uri, job="job-a").invalidate_from(1)
    assert "\n" not in str(err.value) and "duplicates=accept" in str(err.value)
    assert open_sink(uri, job="job-a").published("sessions") == [0, 1]
    accepting = open_sink(uri + "&duplicates=accept", job="job-a")
    assert accepting.invalidate_from(1) == [1]
    _publish(uri, 1, "c")  # the batch runs again: its rows are produced a second time
    assert _seen_sessions(uri) == sorted(
        _expected_sessions(0, "a") + _expected_sessions(1, "b") + _expected_sessions(1, "c")
    )


def test_at_least_once_records_carry_batch_and_position_to_drop_repeats(tmp_path):
    uri = kafka_uri(tmp_path, delivery="at-least-once")
    kill_when_paused(
        "tests.sinks.publish_proc", "kafka", uri, "0", "a", point="kafka-produced:0"
    )  # rows out, marker not yet
    _publish(uri, 0, "a")
    records = read_topic(uri, "sessions")
    assert len(records) == 12  # the batch twice
    copies = Counter((r["batch_id"], r["position"]) for r in records)
    assert set(copies.values()) == {2} and len(copies) == 6
    kept = {(r["batch_id"], r["position"]): r for r in records}  # the documented de-dup
    assert sorted(
        (r["key"], r["session_id"], r["user_id"], r["batch_id"]) for r in kept.values()
    ) == _expected_sessions(0, "a")


@pytest.mark.parametrize(
    ("uri", "says"),
    [
        ("kafka://broker/web?staging=x", "must be HOST:PORT"),
        ("kafka://b:9092/?staging=x", "write kafka://HOST:PORT"),
        ("kafka://b:9092/web?staging=x&acks=1", "unknown option(s) ['acks']"),
        ("kafka://b:9092/web?staging=x&delivery=maybe", "delivery must be one of"),
        ("kafka://b:9092/web", "name where Spark tasks stage rows"),
    ],
)
def test_a_wrong_kafka_output_is_one_line(uri, says):
    with pytest.raises(ConfigError) as err:
        open_sink(uri)
    assert says in str(err.value) and "\n" not in str(err.value)


def test_a_kafka_output_is_its_prefix_through_any_broker():
    one = comparable("output", "kafka://a:9092,b:9092/web?staging=/s")
    assert one == comparable("output", "kafka://c:19092/web/")
    assert one != comparable("output", "kafka://a:9092/shop?staging=/s")


def test_records_are_json_with_iso_utc_microseconds_arrays_and_objects():
    import datetime as dt
    import json

    import pyarrow as pa

    from sessionize.sinks.kafka_records import encode

    paris = dt.timezone(dt.timedelta(hours=1))
    table = pa.table(
        {
            "user_id": pa.array(["u1", None]),
            "at": pa.array(
                [dt.datetime(2026, 11, 1, 0, 30, 0, 5, tzinfo=paris), None],
                pa.timestamp("ms", tz="Europe/Paris"),
            ),
            "tags": pa.array([{"a": 1}, None], pa.map_(pa.string(), pa.int64())),
            "seen": pa.array(
                [[dt.datetime(2026, 1, 2, tzinfo=dt.UTC)], []],
                pa.list_(pa.timestamp("us", tz="UTC")),
            ),
            "day": pa.array([dt.date(2026, 11, 1), None]),
            "batch_id": pa.array([4, 4], pa.int64()),
        }
    )
    records = [(k, json.loads(v)) for k, v in encode(table, positions=True)]
    assert records == [
        (
            b"u1",
            {
                "user_id": "u1",
                "at": "2026-10-31T23:30:00.000000Z",
                "tags": {"a": 1},
                "seen": ["2026-01-02T00:00:00.000000Z"],
                "day": "2026-11-01",
                "batch_id": 4,
                "position": 0,
            },
        ),
        (
            None,
            {
                "user_id": None,
                "at": None,
                "tags": None,
                "seen": [],
                "day": None,
                "batch_id": 4,
                "position": 1,
            },
        ),
    ]


def test_two_jobs_on_one_prefix_have_their_own_batches(tmp_path):
    uri = kafka_uri(tmp_path)
    _publish(uri, 0, "a", job="job-a")
    _publish(uri, 0, "b", job="job-b")  # job-a's batch 0 says nothing about job-b's
    assert _seen_sessions(uri) == sorted(_expected_sessions(0, "a") + _expected_sessions(0, "b"))
    assert open_sink(uri, job="job-b").published("sessions") == [0]


def test_a_closed_sink_leaves_no_producer_open_and_publishes_again(tmp_path):
    """A job's end closes its producer (a producer left to the interpreter's exit, its
    broker gone, can crash the process); the next publish opens another."""
    uri = kafka_uri(tmp_path)
    others = set(kafka._OPEN)  # the sinks of earlier tests in this process
    sink = open_sink(uri, job="job-a")
    sink.check()  # the probe's producer is closed at once
    assert others == kafka._OPEN
    for batch, tag in ((0, "a"), (1, "b")):
        sink.clear_staging(batch)
        stage(sink, batch, tag)
        sink.publish(batch)
        assert len(kafka._OPEN - others) == 1
        sink.close()
        assert others == kafka._OPEN
    assert _seen_sessions(uri) == sorted(_expected_sessions(0, "a") + _expected_sessions(1, "b"))
