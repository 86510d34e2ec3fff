"""`open_sessions` on Kafka: one record per touched user, a tombstone when none is left, in
the batch's transaction (what a read_committed consumer sees, through kill -9)."""

from __future__ import annotations

from tests.sinks.conftest import kill_when_paused
from tests.sinks.kafka_consumer import kafka_uri, read_topic
from tests.sinks.open_rows import OPEN_AFTER, open_sink_of, publish


def _latest_per_user(uri: str) -> dict[int, str]:
    """What a log-compacted topic keeps: each user's last record (a tombstone: nothing)."""
    last: dict[str, dict] = {}
    for record in read_topic(uri, "open_sessions"):
        last[record["key"]] = record
    out = {}
    for key, record in last.items():
        if "open_sessions" in record:
            (one,) = record["open_sessions"]
            assert one["user_id"] == int(key) and record["user_id"] == int(key)
            out[int(key)] = one["session_id"]
    return out


def test_a_record_per_touched_user_and_a_tombstone_when_none_is_left(tmp_path):
    uri = kafka_uri(tmp_path)
    sink = open_sink_of("kafka", uri)
    publish(sink, 0)
    publish(sink, 1)
    records = read_topic(uri, "open_sessions")
    assert [(r["key"], r.get("batch_id")) for r in records if r["key"] == "2"] == [
        ("2", 0),
        ("2", None),
    ]  # batch 0's record, then batch 1's tombstone
    assert _latest_per_user(uri) == OPEN_AFTER[1]
    assert [r["session_id"] for r in read_topic(uri, "sessions")] == ["b"]
    assert open_sink_of("kafka", uri).replaced_as_of("open_sessions") == 1


def test_killed_inside_the_transaction_then_rerun_shows_the_batch_once(tmp_path):
    uri = kafka_uri(tmp_path)
    publish(open_sink_of("kafka", uri), 0)
    kill_when_paused("tests.sinks.open_rows", "kafka", uri, "1", point="kafka-produced:1")
    assert _latest_per_user(uri) == OPEN_AFTER[0]  # the open transaction shows nothing
    publish(open_sink_of("kafka", uri), 1)
    assert _latest_per_user(uri) == OPEN_AFTER[1]
    assert len(read_topic(uri, "open_sessions")) == 4  # 2 records per batch, each once
