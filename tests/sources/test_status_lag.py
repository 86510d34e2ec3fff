"""`sessionize status` asks the broker how far a Kafka topic or Kinesis stream is ahead."""

from __future__ import annotations

import json

from sessionize.commands.status import stream_status
from sessionize.commands.stream import StreamOptions, run_stream
from sessionize.generate.publish import publish_kafka, publish_kinesis
from tests.sources.helpers import unique


def _lines(n: int, first: int = 0) -> list[str]:
    return [
        json.dumps(
            {
                "user_id": i % 3,
                "event_time": f"2026-11-01T00:{i:02d}:00Z",
                "page": {"current": f"p{i}"},
            }
        )
        for i in range(first, first + n)
    ]


def _run(spark, tmp_path, uri) -> str:
    chk = str(tmp_path / "chk")
    opts = StreamOptions(input=uri, output=str(tmp_path / "out"), checkpoint=chk, partitions=2)
    run_stream(opts, spark, on_batch=lambda _: None)
    return chk


def test_kafka_records_not_read_yet_per_partition(spark, tmp_path, kafka_bootstrap):
    uri = f"kafka://{kafka_bootstrap}/{unique('status')}"
    publish_kafka(_lines(10), uri, create_partitions=2)
    chk = _run(spark, tmp_path, uri)
    assert stream_status(chk)["input_ahead"] == {"lag": {"0": 0, "1": 0}}
    publish_kafka(_lines(7, first=10), uri)
    lag = stream_status(chk)["input_ahead"]["lag"]
    assert set(lag) == {"0", "1"} and sum(lag.values()) == 7


def test_kinesis_shards_behind(spark, tmp_path, kinesis_endpoint, kinesis_names):
    uri = f"kinesis://{kinesis_names('status')}?endpoint={kinesis_endpoint}&region=us-east-1"
    publish_kinesis(_lines(5), uri, create_shards=1)
    chk = _run(spark, tmp_path, uri)
    (shard,) = stream_status(chk)["input_ahead"]["lag"].values()
    assert shard["waiting"] is False
    publish_kinesis(_lines(3, first=5), uri)
    (shard,) = stream_status(chk)["input_ahead"]["lag"].values()
    assert shard["waiting"] is True
