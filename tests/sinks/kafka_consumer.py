"""What a `read_committed` consumer of the Kafka sink's topics reads (an independent reader:
confluent-kafka, not the sink)."""

from __future__ import annotations

import json
import os
import uuid

import confluent_kafka as ck


def kafka_uri(tmp_path, **options: str) -> str:
    """A fresh topic prefix on the test broker, staging under `tmp_path`."""
    broker = os.environ["SESSIONIZE_TEST_KAFKA"].removeprefix("kafka://").rstrip("/")
    query = "&".join(
        f"{k}={v}" for k, v in {"staging": str(tmp_path / "staging"), **options}.items()
    )
    return f"kafka://{broker}/t{uuid.uuid4().hex[:10]}?{query}"


def read_topic(uri: str, name: str, isolation: str = "read_committed") -> list[dict]:
    """Every record of topic PREFIX.NAME as {"key": text or None, **JSON value}."""
    broker, prefix = uri.removeprefix("kafka://").split("?")[0].split("/")
    topic = f"{prefix}.{name}"
    consumer = ck.Consumer(
        {
            "bootstrap.servers": broker,
            "group.id": f"test-{uuid.uuid4().hex}",
            "isolation.level": isolation,
            "enable.partition.eof": True,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    try:
        info = consumer.list_topics(topic, timeout=30).topics.get(topic)
        if info is None or info.error is not None or not info.partitions:
            return []
        consumer.assign([ck.TopicPartition(topic, p, ck.OFFSET_BEGINNING) for p in info.partitions])
        pending, out = set(info.partitions), []
        while pending:
            msg = consumer.poll(30)
            assert msg is not None, f"no answer reading {topic}"
            if msg.error() is not None:
                assert msg.error().code() == ck.KafkaError._PARTITION_EOF, msg.error().str()
                pending.discard(msg.partition())
                continue
            key = None if msg.key() is None else msg.key().decode()
            value = msg.value()  # None: a tombstone (an output replaced by key)
            out.append({"key": key, **(json.loads(value) if value is not None else {})})
        return out
    finally:
        consumer.close()
