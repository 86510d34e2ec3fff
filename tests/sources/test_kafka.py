"""The Kafka source against a real broker (services/kafka.sh): offsets, batches, restarts."""

from __future__ import annotations

import json
import time

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewPartitions

from sessionize import spark_version
from sessionize.errors import ConfigError, SourceError
from sessionize.generate.publish import ensure_topic, publish_kafka

if spark_version.has("python_stream_sources"):  # 3.5 refuses them: test_spark_lines.py
    from sessionize.sources.admission import ReadAllAvailable, ReadMaxRows
    from sessionize.sources.kafka import KafkaRange, KafkaStreamReader, kafka_stream, read_range
    from sessionize.sources.uri import parse_source_options

from .helpers import assert_exactly_once, end_offset, read_sink, run_available_now, unique

pytestmark = [pytest.mark.services, pytest.mark.needs_spark("python_stream_sources")]


def event(i: int, tag: str = "e") -> str:
    return json.dumps(
        {
            "user_id": i % 37,
            "event_time": "2026-11-01T10:00:00+00:00",
            "page": {"current": f"{tag}{i}"},
        }
    )


@pytest.fixture
def topic(kafka_bootstrap):
    """A new 3-partition topic; returns its URI."""
    uri = f"kafka://{kafka_bootstrap}/{unique('visits')}"
    assert ensure_topic(uri, 3)
    return uri


def produce_raw(bootstrap: str, topic: str, records: list[tuple[int, bytes | None]]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "message.max.bytes": 2_000_000})
    for partition, value in records:
        producer.produce(topic, value=value, partition=partition)
    assert producer.flush(30) == 0


def high_watermarks(bootstrap: str, topic: str, partitions: int) -> list[int]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "t"})
    try:
        return [
            c.get_watermark_offsets(TopicPartition(topic, p), timeout=10, cached=False)[1]
            for p in range(partitions)
        ]
    finally:
        c.close()


def test_batches_respect_max_records_and_restart_reads_only_new_records(spark, topic, tmp_path):
    """With admission control (Spark 4.2+) three capped batches; before, one batch of all."""
    first = [event(i) for i in range(150)]
    publish_kafka(first, topic)
    capped = spark_version.has("source_admission_control")
    options = {"maxRecordsPerTrigger": "60"} if capped else {}

    progress = run_available_now(kafka_stream(spark, topic, options), tmp_path)
    assert len(progress) == (3 if capped else 1)
    assert all(p["numInputRows"] <= (60 if capped else 150) for p in progress)
    rows = read_sink(spark, tmp_path)
    assert_exactly_once(rows, set(first))
    assert all(err is None for _, err, _ in rows)
    name = topic.rsplit("/", 1)[1]
    assert {src.rsplit("/", 2)[0] for _, _, src in rows} == {f"kafka:{name}"}
    offsets = end_offset(progress[-1])
    assert offsets == {
        "topic": name,
        "partitions": dict(
            zip(["0", "1", "2"], high_watermarks(topic.split("/")[2], name, 3), strict=True)
        ),
    }

    second = [event(i, "more") for i in range(50)]
    publish_kafka(second, topic)
    progress = run_available_now(kafka_stream(spark, topic, options), tmp_path)
    assert sum(p["numInputRows"] for p in progress) == 50
    assert_exactly_once(read_sink(spark, tmp_path), set(first) | set(second))


def test_bad_records_are_flagged_and_the_stream_goes_on(spark, topic, tmp_path, kafka_bootstrap):
    name = topic.rsplit("/", 1)[1]
    produce_raw(kafka_bootstrap, name, [
        (0, b"ok-1"), (0, b"\xff\xfe not utf-8"), (0, "caf\u00e9 \u2615".encode()),
        (1, b"x" * 5000), (1, None), (1, b"not json at all"), (2, b"ok-2"),
    ])  # fmt: skip
    df = kafka_stream(spark, topic, {"maxRecordBytes": "4096"})
    run_available_now(df, tmp_path)
    got = {src.split("/", 1)[1]: (value, err) for value, err, src in read_sink(spark, tmp_path)}
    assert got == {
        "0/0": ("ok-1", None),
        "0/1": ("\\xff\\xfe not utf-8", "not UTF-8 (byte 0)"),
        "0/2": ("caf\u00e9 \u2615", None),
        "1/0": (None, "record too large (5000 bytes)"),
        "1/1": (None, "no payload (null value)"),
        "1/2": ("not json at all", None),  # JSON is the parser's business
        "2/0": ("ok-2", None),
    }


def test_new_partition_is_read_from_its_first_record(spark, topic, tmp_path, kafka_bootstrap):
    name = topic.rsplit("/", 1)[1]
    before = [event(i, "before") for i in range(60)]
    publish_kafka(before, topic)
    run_available_now(kafka_stream(spark, topic, {}), tmp_path)

    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    admin.create_partitions([NewPartitions(name, 4)])[name].result(30)
    deadline = time.monotonic() + 30
    while len(admin.list_topics(name, timeout=10).topics[name].partitions) < 4:
        assert time.monotonic() < deadline
        time.sleep(0.2)
    after = [f"new-partition-{i}" for i in range(20)]
    produce_raw(kafka_bootstrap, name, [(3, v.encode()) for v in after])
    also = [event(i, "after") for i in range(30)]
    publish_kafka(also, topic)

    run_available_now(kafka_stream(spark, topic, {}), tmp_path)
    if not spark_version.has("source_admission_control"):
        # One batch per available-now run before 4.2: the partition found in it is read
        # from its first record by the next batch, here the next run.
        assert not any(v in after for v, _, _ in read_sink(spark, tmp_path))
        run_available_now(kafka_stream(spark, topic, {}), tmp_path)
    rows = read_sink(spark, tmp_path)
    assert_exactly_once(rows, set(before) | set(after) | set(also))
    assert sorted(src for v, _, src in rows if v in after) == sorted(
        f"kafka:{name}/3/{i}" for i in range(20)
    )


def test_latest_starts_after_what_is_already_there(spark, topic, tmp_path):
    publish_kafka([event(i, "old") for i in range(40)], topic)
    assert (
        run_available_now(kafka_stream(spark, topic, {"startingPosition": "latest"}), tmp_path)
        == []
    )
    new = [event(i, "new") for i in range(25)]
    publish_kafka(new, topic)
    run_available_now(kafka_stream(spark, topic, {"startingPosition": "latest"}), tmp_path)
    assert_exactly_once(read_sink(spark, tmp_path), set(new))


def test_planned_ranges_are_exact_and_replay_identically(topic, kafka_bootstrap):
    """Driver and executor halves of the reader, without Spark: a replayed range (same start
    and end) yields the same records, and the budget is shared over partitions."""
    publish_kafka([event(i) for i in range(90)], topic)
    reader = KafkaStreamReader({"uri": topic, "maxRecordsPerTrigger": "10"})
    try:
        start = reader.initialOffset()
        assert start["partitions"] == {"0": 0, "1": 0, "2": 0}
        end = reader.latestOffset(start, reader.getDefaultReadLimit())
        assert sum(end["partitions"].values()) == 10
        assert max(end["partitions"].values()) - min(end["partitions"].values()) <= 1
        everything = reader.latestOffset(start, ReadAllAvailable())
        assert everything["partitions"] == dict(
            zip(
                ["0", "1", "2"],
                high_watermarks(kafka_bootstrap, topic.rsplit("/", 1)[1], 3),
                strict=True,
            )
        )

        def rows(a, b):
            out = []
            for part in reader.partitions(a, b):
                for batch in reader.read(part):
                    out += list(zip(*batch.to_pydict().values(), strict=True))
            return out

        once, again = rows(start, everything), rows(start, everything)
        assert len(once) == 90 and once == again
        first, rest = rows(start, end), rows(end, everything)
        assert sorted(first + rest) == sorted(once)
        assert reader.latestOffset(everything, ReadMaxRows(5)) == everything  # nothing new
    finally:
        reader.stop()


def test_asked_without_a_start_a_reader_plans_from_the_end_spark_planned_last(
    topic, kafka_bootstrap
):
    """Spark 4.0 and 4.1 ask for an end without a start (no admission control): a new
    query asks before its initial offset, a restarted one after handing the reader the
    offset log's last end (`partitions(end, end)`). Each end is all that the broker holds,
    and never behind the start (a broker reporting less than was read)."""
    name = topic.rsplit("/", 1)[1]
    first = [event(i) for i in range(30)]
    publish_kafka(first, topic)
    fresh = KafkaStreamReader({"uri": topic})
    try:
        end = fresh.latestOffset()  # a new query: before its initial offset
        start = fresh.initialOffset()
        assert start == {"topic": name, "partitions": {"0": 0, "1": 0, "2": 0}}
        high = high_watermarks(kafka_bootstrap, name, 3)
        assert end["partitions"] == dict(zip(["0", "1", "2"], high, strict=True))
        assert sorted(_values(fresh, start, end)) == sorted(first)
    finally:
        fresh.stop()

    second = [event(i, "more") for i in range(20)]
    publish_kafka(second, topic)
    restarted = KafkaStreamReader({"uri": topic})
    try:
        restarted.partitions(end, end)  # Spark's setLatestSeenOffset on a restart
        later = restarted.latestOffset()
        assert sorted(_values(restarted, end, later)) == sorted(second)
        ahead = {"topic": name, "partitions": {p: o + 5 for p, o in later["partitions"].items()}}
        restarted.partitions(ahead, ahead)
        assert restarted.latestOffset() == ahead  # never behind what was planned
    finally:
        restarted.stop()


def _values(reader, start: dict, end: dict) -> list[str]:
    return [
        v
        for part in reader.partitions(start, end)
        for batch in reader.read(part)
        for v in batch.column("value").to_pylist()
    ]


def test_a_range_beyond_what_the_broker_has_fails_instead_of_ending_early(topic):
    publish_kafka([event(i) for i in range(3)], topic)
    name = topic.rsplit("/", 1)[1]
    reader = KafkaStreamReader({"uri": topic, "readTimeout": "2s"})
    part = KafkaRange(name, 0, 0, 1000)  # more than was ever written
    with pytest.raises(SourceError, match="stuck at offset"):
        for _ in read_range(reader.config, part, reader.opts):
            pass


def test_options_are_checked(spark, kafka_bootstrap):
    uri = f"kafka://{kafka_bootstrap}/t"
    with pytest.raises(ConfigError, match="unknown source option 'maxOffsetsPerTrigger'"):
        kafka_stream(spark, uri, {"maxOffsetsPerTrigger": "5"})
    with pytest.raises(ConfigError, match="No such configuration property"):
        kafka_stream(spark, uri, {"kafka.no.such.setting": "1"})
    with pytest.raises(ConfigError, match="set by the source"):
        kafka_stream(spark, uri, {"kafka.enable.auto.commit": "true"})
    with pytest.raises(ConfigError, match="earliest or latest"):
        kafka_stream(spark, uri, {"startingPosition": "beginning"})
    with pytest.raises(ConfigError, match="positive integer"):
        parse_source_options({"maxRecordsPerTrigger": "0"}, "kafka")
    for bad in ("kafka://host/t", "kafka://h:1", "kafka://h:1/a/b", "http://h:1/t"):
        with pytest.raises(ConfigError):
            kafka_stream(spark, bad, {})


def test_publish_at_a_rate_and_keyed_by_user(topic, kafka_bootstrap):
    lines = [event(i) for i in range(40)] + ["not json, no user"]
    stats = publish_kafka(lines, topic, rate=200)
    assert stats.records == 41 and stats.seconds >= 40 / 200
    name = topic.rsplit("/", 1)[1]
    c = Consumer({"bootstrap.servers": kafka_bootstrap, "group.id": "t"})
    c.assign([TopicPartition(name, p, 0) for p in range(3)])
    got = []
    while len(got) < 41:
        got += [m for m in c.consume(100, timeout=5) if m.error() is None]
    c.close()
    partitions_of = {}
    for m in got:
        if m.key() is not None:
            partitions_of.setdefault(m.key(), set()).add(m.partition())
    assert len(partitions_of) == 37 and all(len(p) == 1 for p in partitions_of.values())
    assert [m.key() for m in got if m.value() == b"not json, no user"] == [None]
