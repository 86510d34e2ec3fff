"""Batch mode to Kafka: each hour is one transaction; reprocessing an hour already on Kafka
is refused in one line unless duplicates are accepted."""

from __future__ import annotations

from collections import Counter
from datetime import UTC, datetime

import pytest

from sessionize.commands.batch import BatchOptions, run_batch
from sessionize.errors import SinkError
from tests.helpers import generate
from tests.sinks.kafka_consumer import kafka_uri, read_topic

H0 = datetime(2026, 11, 1, tzinfo=UTC)


def test_batch_to_kafka_and_a_refused_reprocess(spark, tmp_path):
    inp = generate(tmp_path / "in", hours=1, users=30, events_per_hour=300, files_per_hour=1)
    uri = kafka_uri(tmp_path)
    opts = BatchOptions(input=str(inp), output=uri, start=H0, end=H0, partitions=2)
    records = run_batch(opts, spark, on_hour=lambda _: None)
    sessions = read_topic(uri, "sessions")
    assert sessions and {r["batch_id"] for r in sessions} == {2026110100}
    assert len(sessions) == records[0]["batch"]["sessions_out"]
    assert (tmp_path / "staging" / "_state").is_dir()  # the files state, next to staging
    with pytest.raises(SinkError) as err:
        run_batch(opts, spark, on_hour=lambda _: None)
    assert "\n" not in str(err.value) and "duplicates=accept" in str(err.value)
    assert len(read_topic(uri, "sessions")) == len(sessions)  # nothing produced again
    again = BatchOptions(
        input=str(inp), output=uri + "&duplicates=accept", start=H0, end=H0, partitions=2
    )
    run_batch(again, spark, on_hour=lambda _: None)
    copies = Counter(r["session_id"] for r in read_topic(uri, "sessions"))
    assert set(copies.values()) == {2} and len(copies) == len(sessions)
