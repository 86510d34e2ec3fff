"""`stateful.source` over a real Kafka topic (services/kafka.sh) into `stateful.stream`: the
totals equal a plain loop over the good records, every bad one is in `invalid` once with its
reason."""

from __future__ import annotations

import pytest
from confluent_kafka import Producer

from examples.running_totals import RunningTotals
from sessionize import stateful
from sessionize.generate.publish import ensure_topic
from tests.stateful.test_source_stream import (
    FIRST,
    ORDERS,
    REASONS,
    invalid_rows,
    latest_totals,
    reference,
)

from .helpers import unique


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
    records = stateful.start(orders, RunningTotals(), output=str(tmp_path / "out"),
                             checkpoint=str(tmp_path / "chk"), partitions=2).wait()  # fmt: skip
    assert sum(r["batch"]["invalid"] for r in records) == 6
    assert latest_totals(tmp_path / "out") == reference(FIRST)
    got = sorted((r["raw"], r["reason"]) for r in invalid_rows(tmp_path / "out"))
    want = sorted([(line, REASONS[line]) for line in lines if line in REASONS]
                  + [("\\xff{}", "not UTF-8 (byte 0)")])  # fmt: skip
    assert got == want
    assert all(r["source"].startswith("kafka:") for r in invalid_rows(tmp_path / "out"))
