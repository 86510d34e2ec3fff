"""`stateful.source` over a real Kafka topic (services/kafka.sh) and a real Kinesis stream
(services/kinesis.sh) into `stateful.stream`: the totals equal a plain loop over the good
records, every bad one is in `invalid` once with its reason, and a restart on the same
checkpoint reads on from where the last batch ended."""

from __future__ import annotations

import pytest
from confluent_kafka import Producer

from examples.running_totals import RunningTotals
from sessionize import stateful
from sessionize.generate.publish import ensure_stream, ensure_topic
from tests.stateful.test_source_stream import (
    FIRST,
    ORDERS,
    REASONS,
    SECOND,
    invalid_rows,
    latest_totals,
    reference,
)

from .helpers import unique

# Spark's Python workers inherit the environment the JVM started with, which predates the
# fixture's dummy AWS variables: the Kinesis source gets its (dummy) credentials as options.
KINESIS_CREDENTIALS = {
    "aws_access_key_id": "sessionize-local",
    "aws_secret_access_key": "sessionize-local",
}


@pytest.mark.services
def test_a_kafka_topic_with_bad_records(spark, tmp_path, kafka_bootstrap):
    uri = f"kafka://{kafka_bootstrap}/{unique('orders')}"
    assert ensure_topic(uri, 2)
    lines = [line for lines in FIRST for line in lines]
    producer = Producer({"bootstrap.servers": kafka_bootstrap})
    for n, line in enumerate(lines):
        producer.produce(uri.rsplit("/", 1)[1], value=line.encode(), partition=n % 2)
    producer.produce(uri.rsplit("/", 1)[1], value=b"\xff{}", partition=0)
    assert producer.flush(30) == 0

    orders = stateful.source(spark, uri, ORDERS)
    records = stateful.start(
        orders,
        RunningTotals(),
        output=str(tmp_path / "out"),
        checkpoint=str(tmp_path / "chk"),
        partitions=2,
    ).wait()
    assert sum(r["batch"]["invalid"] for r in records) == 6
    assert latest_totals(tmp_path / "out") == reference(FIRST)
    got = sorted((r["raw"], r["reason"]) for r in invalid_rows(tmp_path / "out"))
    want = sorted(
        [(line, REASONS[line]) for line in lines if line in REASONS]
        + [("\\xff{}", "not UTF-8 (byte 0)")]
    )
    assert got == want
    assert all(r["source"].startswith("kafka:") for r in invalid_rows(tmp_path / "out"))


@pytest.mark.services
def test_a_kinesis_stream_with_bad_records_through_a_restart(
    spark, tmp_path, kinesis_endpoint, kinesis_client
):
    name = unique("orders")
    uri = f"kinesis://{name}?endpoint={kinesis_endpoint}&region=us-east-1"
    assert ensure_stream(uri, 2, KINESIS_CREDENTIALS)
    options = {f"kinesis.{k}": v for k, v in KINESIS_CREDENTIALS.items()}

    def put(payloads: list[bytes]) -> None:
        response = kinesis_client.put_records(
            StreamName=name,
            Records=[{"Data": p, "PartitionKey": str(n)} for n, p in enumerate(payloads)],
        )
        assert response["FailedRecordCount"] == 0

    def run() -> list[dict]:
        orders = stateful.source(spark, uri, ORDERS, options=options)
        return stateful.start(
            orders,
            RunningTotals(),
            output=str(tmp_path / "out"),
            checkpoint=str(tmp_path / "chk"),
            state="files",
            partitions=2,
        ).wait()

    try:
        first = [line.encode() for lines in FIRST for line in lines] + [b"\xff{}"]
        put(first)
        records = run()
        assert [r["version"] for r in records] == [0]
        assert sum(r["batch"]["records"] for r in records) == len(first)
        assert sum(r["batch"]["invalid"] for r in records) == 6
        assert latest_totals(tmp_path / "out") == reference(FIRST)

        second = [line.encode() for lines in SECOND for line in lines]
        put(second)
        records = run()  # the restart: only the new records
        assert [r["version"] for r in records] == [1]
        assert records[0]["batch"]["records"] == len(second)
        assert records[0]["totals"]["invalid"] == 7
    finally:
        kinesis_client.delete_stream(StreamName=name)

    assert latest_totals(tmp_path / "out") == reference(FIRST + SECOND)
    invalid = invalid_rows(tmp_path / "out")
    lines = [line for lines in FIRST + SECOND for line in lines]
    want = sorted(
        [(line, REASONS[line]) for line in lines if line in REASONS]
        + [("\\xff{}", "not UTF-8 (byte 0)")]
    )
    assert sorted((r["raw"], r["reason"]) for r in invalid) == want
    sources = [r["source"] for r in invalid]
    assert all(s.startswith(f"kinesis:{name}/shardId-") for s in sources)
    assert len(set(sources)) == len(sources)  # each record once, at its own position
