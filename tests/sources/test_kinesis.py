"""The Kinesis source against a real Kinesis API (services/kinesis.sh, kinesalite)."""

from __future__ import annotations

import json
import os
import time

import pytest

from sessionize import spark_version
from sessionize.errors import ConfigError
from sessionize.generate.publish import ensure_stream, publish_kinesis

if spark_version.has("python_stream_sources"):  # 3.5 refuses them: test_spark_lines.py
    from sessionize.sources.admission import ReadAllAvailable
    from sessionize.sources.kinesis import KinesisStreamReader, kinesis_stream

from .helpers import (
    assert_exactly_once,
    end_offset,
    read_sink,
    run_available_now,
    wait_stream_active,
)

pytestmark = [pytest.mark.services, pytest.mark.needs_spark("python_stream_sources")]


def event(i: int, tag: str = "e") -> str:
    return json.dumps(
        {
            "user_id": i % 41,
            "event_time": "2026-11-01T10:00:00+00:00",
            "page": {"current": f"{tag}{i}"},
        }
    )


# Spark's Python workers inherit the environment the JVM started with, which predates the
# fixture's dummy AWS variables: give the source its (dummy) credentials as options.
CREDENTIALS = {"aws_access_key_id": "sessionize-local", "aws_secret_access_key": "sessionize-local"}
OPTIONS = {f"kinesis.{k}": v for k, v in CREDENTIALS.items()}


def source(spark, uri: str, **options: str):
    return kinesis_stream(spark, uri, {**OPTIONS, **options})


@pytest.fixture
def stream(kinesis_endpoint, kinesis_names):
    """A new 2-shard stream, deleted after the test; returns its URI."""
    uri = f"kinesis://{kinesis_names('visits')}?endpoint={kinesis_endpoint}&region=us-east-1"
    assert ensure_stream(uri, 2, CREDENTIALS)
    return uri


def name_of(uri: str) -> str:
    return uri.split("://", 1)[1].split("?", 1)[0]


def test_batches_respect_max_records_and_restart_reads_only_new_records(spark, stream, tmp_path):
    """With admission control (Spark 4.2+) three capped batches; before, one batch of all."""
    first = [event(i) for i in range(120)]
    publish_kinesis(first, stream, options=CREDENTIALS)
    capped = spark_version.has("source_admission_control")
    options = {"maxRecordsPerTrigger": "50"} if capped else {}

    progress = run_available_now(source(spark, stream, **options), tmp_path)
    assert len(progress) == (3 if capped else 1)
    assert all(p["numInputRows"] <= (50 if capped else 120) for p in progress)
    rows = read_sink(spark, tmp_path)
    assert_exactly_once(rows, set(first))
    shards = {src.split("/")[1] for _, _, src in rows}
    assert shards == {"shardId-000000000000", "shardId-000000000001"}

    second = [event(i, "more") for i in range(30)]
    publish_kinesis(second, stream, options=CREDENTIALS)
    progress = run_available_now(source(spark, stream, **options), tmp_path)
    assert sum(p["numInputRows"] for p in progress) == 30
    assert_exactly_once(read_sink(spark, tmp_path), set(first) | set(second))


def test_split_shard_children_are_read_after_their_parent(spark, stream, tmp_path, kinesis_client):
    name = name_of(stream)
    before = [event(i, "before") for i in range(80)]
    publish_kinesis(before, stream, options=CREDENTIALS)
    run_available_now(source(spark, stream), tmp_path)

    # Records that the parent holds when it closes, then records for the children.
    unread = [event(i, "unread") for i in range(40)]
    publish_kinesis(unread, stream, options=CREDENTIALS)
    kinesis_client.split_shard(
        StreamName=name, ShardToSplit="shardId-000000000000", NewStartingHashKey=str(2**126)
    )
    wait_stream_active(kinesis_client, name)
    after = [event(i, "after") for i in range(80)]
    publish_kinesis(after, stream, options=CREDENTIALS)
    # kinesalite stamps a new shard's first second of records one second ahead (its creation
    # time); an available-now run reads records stamped by its start, so let the stamps pass.
    time.sleep(1.2)

    progress = run_available_now(source(spark, stream), tmp_path)
    if not spark_version.has("source_admission_control"):
        # One batch per available-now run before 4.2: the children, read only once their
        # parent is read to its end, are read by the next batch, here the next run.
        progress += run_available_now(source(spark, stream), tmp_path)
    rows = read_sink(spark, tmp_path)
    assert_exactly_once(rows, set(before) | set(unread) | set(after))
    children = {"shardId-000000000002", "shardId-000000000003"}
    assert children & {src.split("/")[1] for _, _, src in rows}
    # The parent was read to its end in an earlier batch than any of its children.
    batch_of = {}
    for p in progress:
        end = end_offset(p)["shards"]
        for shard, pos in end.items():
            if pos["after"] is not None:
                batch_of.setdefault((shard, pos["after"]), p["batchId"])
    last = end_offset(progress[-1])["shards"]
    assert last["shardId-000000000000"].get("closed") is True
    parent_done = batch_of[("shardId-000000000000", last["shardId-000000000000"]["after"])]
    child_first = min(b for (shard, _), b in batch_of.items() if shard in children)
    assert parent_done < child_first


def test_bad_records_are_flagged_and_the_stream_goes_on(spark, stream, tmp_path, kinesis_client):
    name = name_of(stream)
    payloads = [b"ok-1", b"\xc3\x28 not utf-8", "caf\u00e9".encode(), b"y" * 3000, b"not json"]
    response = kinesis_client.put_records(
        StreamName=name, Records=[{"Data": p, "PartitionKey": "one-user"} for p in payloads]
    )
    assert response["FailedRecordCount"] == 0
    run_available_now(source(spark, stream, maxRecordBytes="1000"), tmp_path)
    rows = read_sink(spark, tmp_path)
    order = [r["SequenceNumber"] for r in response["Records"]]
    got = sorted(rows, key=lambda r: order.index(r[2].rsplit("/", 1)[1]))
    assert [(v, e) for v, e, _ in got] == [
        ("ok-1", None),
        ("\\xc3( not utf-8", "not UTF-8 (byte 0)"),
        ("caf\u00e9", None),
        (None, "record too large (3000 bytes)"),
        ("not json", None),
    ]


def test_latest_starts_after_what_is_already_there(spark, stream, tmp_path):
    publish_kinesis([event(i, "old") for i in range(30)], stream, options=CREDENTIALS)
    df = source(spark, stream, startingPosition="latest")
    assert run_available_now(df, tmp_path) == []
    new = [event(i, "new") for i in range(20)]
    publish_kinesis(new, stream, options=CREDENTIALS)
    run_available_now(source(spark, stream, startingPosition="latest"), tmp_path)
    assert_exactly_once(read_sink(spark, tmp_path), set(new))


def test_planned_ranges_are_exact_and_replay_identically(stream):
    publish_kinesis([event(i) for i in range(70)], stream, options=CREDENTIALS)
    reader = KinesisStreamReader({"uri": stream, "maxRecordsPerTrigger": "11", **OPTIONS})
    start = reader.initialOffset()
    assert start["shards"] == {
        "shardId-000000000000": {"after": None},
        "shardId-000000000001": {"after": None},
    }

    def rows(a, b):
        out = []
        for part in reader.partitions(a, b):
            for batch in reader.read(part):
                out += list(zip(*batch.to_pydict().values(), strict=True))
        return out

    step = reader.latestOffset(start, reader.getDefaultReadLimit())
    first = rows(start, step)
    assert len(first) == 11 and rows(start, step) == first
    everything = reader.latestOffset(start, ReadAllAvailable())
    once = rows(start, everything)
    assert len(once) == 70 and rows(start, everything) == once
    assert sorted(first + rows(step, everything)) == sorted(once)
    assert reader.latestOffset(everything, ReadAllAvailable()) == everything


def test_an_available_now_run_leaves_records_stamped_after_its_start_to_the_next(stream):
    early = [event(i, "early") for i in range(30)]
    publish_kinesis(early, stream, options=CREDENTIALS)
    time.sleep(0.05)
    cut = time.time()
    time.sleep(0.05)
    late = [event(i, "late") for i in range(30)]
    publish_kinesis(late, stream, options=CREDENTIALS)

    def values(reader, a, b):
        return [
            v
            for part in reader.partitions(a, b)
            for batch in reader.read(part)
            for v in batch.column("value").to_pylist()
        ]

    first_run = KinesisStreamReader({"uri": stream, **OPTIONS})
    start = first_run.initialOffset()
    first_run.prepareForTriggerAvailableNow()
    first_run._until_ms = int(cut * 1000)  # the run started at `cut`
    end = first_run.latestOffset(start, ReadAllAvailable())
    assert sorted(values(first_run, start, end)) == sorted(early)
    assert first_run.latestOffset(end, ReadAllAvailable()) == end  # the run ends there

    next_run = KinesisStreamReader({"uri": stream, **OPTIONS})
    next_run.prepareForTriggerAvailableNow()
    rest = next_run.latestOffset(end, ReadAllAvailable())
    assert sorted(values(next_run, end, rest)) == sorted(late)


def test_options_are_checked(spark, kinesis_endpoint):
    uri = f"kinesis://s?endpoint={kinesis_endpoint}"
    with pytest.raises(ConfigError, match="unknown source option"):
        kinesis_stream(spark, uri, {"shardIteratorType": "LATEST"})
    with pytest.raises(ConfigError, match="not a kinesis client setting"):
        kinesis_stream(spark, uri, {"kinesis.profile": "x"})
    for bad in ("kinesis://", "kinesis://s?endpoint=ftp://x", "kinesis://s?regoin=eu-west-1"):
        with pytest.raises(ConfigError):
            kinesis_stream(spark, bad, {})


def test_publish_at_a_rate_in_batches_keyed_by_user(stream, kinesis_client):
    lines = [event(i) for i in range(1200)]
    stats = publish_kinesis(lines[:50], stream, rate=250, options=CREDENTIALS)
    assert stats.records == 50 and stats.seconds >= 49 / 250
    assert publish_kinesis(lines[50:], stream, options=CREDENTIALS).records == 1150  # 3 requests
    reader = KinesisStreamReader({"uri": stream, **OPTIONS})
    start = reader.initialOffset()
    end = reader.latestOffset(start, ReadAllAvailable())
    values = []
    for part in reader.partitions(start, end):
        for batch in reader.read(part):
            values += [(part.shard, v) for v in batch.column("value").to_pylist()]
    assert sorted(v for _, v in values) == sorted(lines)
    shard_of = {}
    for shard, v in values:
        shard_of.setdefault(json.loads(v)["user_id"], set()).add(shard)
    assert all(len(s) == 1 for s in shard_of.values())


def test_a_tests_streams_are_deleted_when_it_ends_and_a_dead_sessions_at_the_next_start(
    kinesis_client,
):
    """What `kinesis_names` and the session fixture do, so that the shared server never
    fills up with the suite's streams (its account allows 200 shards)."""
    import subprocess
    import sys

    from botocore.exceptions import ClientError

    from .conftest import left_by_dead_sessions, made_streams

    def exists(name: str) -> bool:
        try:
            kinesis_client.describe_stream_summary(StreamName=name)
        except ClientError:
            return False
        return True

    with made_streams(kinesis_client) as new:
        name = new("gone")
        kinesis_client.create_stream(StreamName=name, ShardCount=1)
        assert exists(name)
    kinesis_client.get_waiter("stream_not_exists").wait(  # DELETING, then gone
        StreamName=name, WaiterConfig={"Delay": 1, "MaxAttempts": 20}
    )
    assert not exists(name)
    dead = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    orphan = f"orphan-{dead}-1-abcdef"
    kinesis_client.create_stream(StreamName=orphan, ShardCount=1)
    try:
        assert orphan in left_by_dead_sessions(kinesis_client)
        assert not any(str(os.getpid()) in n for n in left_by_dead_sessions(kinesis_client))
    finally:
        kinesis_client.delete_stream(StreamName=orphan)
