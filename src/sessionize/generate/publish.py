"""Publish JSON event lines to Kafka or Kinesis, keyed by `user_id` (by `anonymous_id` in
identity data), at a rate or flat out.

Both functions take any iterable of lines (the generator's output, a file) and return a
`PublishStats` once every record is acknowledged; a record the broker refuses for good, an
unreachable broker or a missing stream raise `SinkError`, one line (nothing is reported as
sent that was not stored).

- Kafka: one idempotent producer (`acks=all`, `enable.idempotence`), so librdkafka's retries
  neither duplicate nor reorder records of a partition; key = the line's `user_id`, so one
  user's events share a partition. Lines without a readable `user_id` (invalid lines) get no
  key and are spread over partitions.
- Kinesis: PutRecords in requests of at most 500 records / 5 MiB; records the service
  rejected (throttling, internal errors) are sent again with backoff, up to `max_attempts`
  rounds. A retried record can land after later records of the same user: session results do
  not depend on arrival order (docs/design.md, "Semantics"), only lateness does. Partition
  key = `user_id`.

`rate` is in events per second over the whole run (a burst after a pause is not caught up
faster than the rate allows); None sends as fast as the server takes them.
"""

from __future__ import annotations

import contextlib
import hashlib
import re
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from sessionize.errors import ConfigError, SinkError, translated
from sessionize.redaction import redact_uri
from sessionize.sources.uri import confluent_kafka, parse_kafka_uri, parse_kinesis_uri
from sessionize.sources.uri import kinesis_client as _kinesis_client

_USER_ID = re.compile(rb'"user_id"\s*:\s*"?(-?\d+)')
_ANONYMOUS_ID = re.compile(rb'"anonymous_id"\s*:\s*"(d\d+)"')
_KINESIS_MAX_RECORDS = 500
_KINESIS_MAX_REQUEST_BYTES = 5 * 1024 * 1024
_KINESIS_MAX_RECORD_BYTES = 1024 * 1024
# With a rate, a Kinesis batch is sent at least this often so records do not wait long.
_KINESIS_MAX_HOLD_S = 0.2
_KAFKA_CONNECT_TIMEOUT_S = 10


@dataclass(frozen=True)
class PublishStats:
    records: int
    seconds: float

    @property
    def per_second(self) -> float:
        return self.records / self.seconds if self.seconds > 0 else float("inf")


def user_key(line: bytes) -> bytes | None:
    """The `anonymous_id` of a JSON line with one (identity data), else its `user_id`, as
    bytes (b'342290'); None when it has neither."""
    m = _ANONYMOUS_ID.search(line) or _USER_ID.search(line)
    return m.group(1) if m else None


class _Pacer:
    """Sleeps so that record n is not sent before start + n / rate."""

    def __init__(self, rate: float | None) -> None:
        if rate is not None and rate <= 0:
            raise ConfigError(f"rate {rate} must be positive events per second")
        self.rate = rate
        self.start = time.monotonic()

    def wait(self, n: int) -> None:
        if self.rate is not None:
            delay = self.start + n / self.rate - time.monotonic()
            if delay > 0:
                time.sleep(delay)


def _client_errors(uri: str) -> contextlib.AbstractContextManager[None]:
    """The clients' own exceptions (server down, no such stream) as one SinkError line."""

    def translate(exc: Exception) -> SinkError | None:
        if not type(exc).__module__.startswith(("cimpl", "confluent_kafka", "botocore")):
            return None
        detail = exc.args[0].str() if exc.args and hasattr(exc.args[0], "str") else exc
        return SinkError(f"publishing to {redact_uri(uri)} failed: {detail}")

    return translated(translate)


def _lines(lines: Iterable[str | bytes]) -> Iterable[bytes]:
    for line in lines:
        data = line.encode("utf-8") if isinstance(line, str) else line
        data = data.rstrip(b"\r\n")
        if data:
            yield data


# ---- Kafka ------------------------------------------------------------------------------


def _confluent():
    return confluent_kafka("publishing to Kafka")


def ensure_topic(uri: str, partitions: int, options: Mapping[str, str] | None = None) -> bool:
    """Create the topic of `uri` with `partitions` partitions unless it exists; True if created.

    An existing topic is left as it is, whatever its partition count.
    """
    kafka = _confluent()
    address = parse_kafka_uri(uri)
    admin = kafka.admin.AdminClient(
        {"log_level": 2, **(options or {}), "bootstrap.servers": address.bootstrap}
    )
    if address.topic in _topics(admin, address.bootstrap):
        return False
    future = admin.create_topics([kafka.admin.NewTopic(address.topic, partitions, 1)])[
        address.topic
    ]
    try:
        future.result(30)
    except kafka.KafkaException as e:
        if e.args[0].code() != kafka.KafkaError.TOPIC_ALREADY_EXISTS:
            raise SinkError(f"cannot create Kafka topic {address.topic}: {e.args[0].str()}") from e
        return False
    return True


def _topics(client, bootstrap: str) -> dict:
    """The broker's topics; an unreachable broker is one clear error, not a long hang."""
    kafka = _confluent()
    try:
        return client.list_topics(timeout=_KAFKA_CONNECT_TIMEOUT_S).topics
    except kafka.KafkaException as e:
        raise SinkError(
            f"cannot reach the Kafka broker at {bootstrap} within {_KAFKA_CONNECT_TIMEOUT_S}s "
            f"({e.args[0].str()}); is it running?"
        ) from e


def publish_kafka(
    lines: Iterable[str | bytes],
    uri: str,
    *,
    rate: float | None = None,
    options: Mapping[str, str] | None = None,
    create_partitions: int | None = None,
) -> PublishStats:
    """Send every line to the topic of `kafka://HOST:PORT/TOPIC`; return once all are stored.

    `options` are librdkafka producer settings (no prefix), e.g. {"compression.type": "lz4"};
    `create_partitions` creates a missing topic with that many partitions.
    """
    with _client_errors(uri):
        return _publish_kafka(lines, uri, rate, options, create_partitions)


def _publish_kafka(lines, uri, rate, options, create_partitions) -> PublishStats:
    kafka = _confluent()
    address = parse_kafka_uri(uri)
    if create_partitions:
        ensure_topic(uri, create_partitions, options)
    # Connection failures come back as errors; librdkafka's own log would repeat them.
    config = {"linger.ms": 10, "acks": "all", "log_level": 2}
    config.update(options or {})
    config.update({"bootstrap.servers": address.bootstrap, "enable.idempotence": True})
    try:
        producer = kafka.Producer(config)
    except kafka.KafkaException as e:
        raise ConfigError(f"Kafka producer settings: {e.args[0].str()}") from e
    _topics(producer, address.bootstrap)  # reachable, before anything is queued
    failures: list[str] = []

    def delivered(err, _msg) -> None:
        if err is not None:
            failures.append(err.str())

    pacer = _Pacer(rate)
    n = 0
    for data in _lines(lines):
        pacer.wait(n)
        while True:
            try:
                producer.produce(
                    address.topic, value=data, key=user_key(data), on_delivery=delivered
                )
                break
            except BufferError:  # the local queue is full: let deliveries drain it
                producer.poll(0.05)
        producer.poll(0)
        n += 1
        if failures:
            break
    remaining = producer.flush(120)
    seconds = time.monotonic() - pacer.start
    if failures or remaining:
        what = failures[0] if failures else f"{remaining} records not acknowledged in 120s"
        raise SinkError(f"publishing to Kafka topic {address.topic} failed: {what}")
    return PublishStats(n, seconds)


# ---- Kinesis ----------------------------------------------------------------------------


def kinesis_client(uri: str, options: Mapping[str, str] | None = None):
    """A boto3 Kinesis client for `kinesis://STREAM?endpoint=...&region=...`; `options` are
    boto3 client arguments (aws_access_key_id, ...), as the source's kinesis.* options."""
    return _kinesis_client(parse_kinesis_uri(uri), options)


def ensure_stream(uri: str, shards: int, options: Mapping[str, str] | None = None) -> bool:
    """Create the stream of `uri` with `shards` shards unless it exists, and wait until it is
    ACTIVE; True if created."""
    client = kinesis_client(uri, options)
    stream = parse_kinesis_uri(uri).stream
    created = False
    try:
        client.create_stream(StreamName=stream, ShardCount=shards)
        created = True
    except client.exceptions.ResourceInUseException:
        pass
    deadline = time.monotonic() + 120
    while True:
        summary = client.describe_stream_summary(StreamName=stream)["StreamDescriptionSummary"]
        if summary["StreamStatus"] == "ACTIVE":
            return created
        if time.monotonic() > deadline:
            raise SinkError(f"Kinesis stream {stream} is still {summary['StreamStatus']}")
        time.sleep(0.1)


def publish_kinesis(
    lines: Iterable[str | bytes],
    uri: str,
    *,
    rate: float | None = None,
    options: Mapping[str, str] | None = None,
    create_shards: int | None = None,
    max_attempts: int = 10,
) -> PublishStats:
    """Send every line to the stream of `kinesis://STREAM?...`; return once all are stored.

    `create_shards` creates a missing stream with that many shards.
    """
    with _client_errors(uri):
        return _publish_kinesis(lines, uri, rate, options, create_shards, max_attempts)


def _publish_kinesis(lines, uri, rate, options, create_shards, max_attempts) -> PublishStats:
    stream = parse_kinesis_uri(uri).stream
    if create_shards:
        ensure_stream(uri, create_shards, options)
    client = kinesis_client(uri, options)
    pacer = _Pacer(rate)
    batch: list[dict] = []
    size = 0
    oldest = time.monotonic()
    n = 0
    for data in _lines(lines):
        pacer.wait(n)
        key = user_key(data)
        key_text = key.decode() if key else hashlib.md5(data).hexdigest()
        record_size = len(data) + len(key_text)
        if record_size > _KINESIS_MAX_RECORD_BYTES:
            raise SinkError(f"line {n + 1} is {len(data)} bytes: over Kinesis' 1 MiB record limit")
        if batch and (
            len(batch) == _KINESIS_MAX_RECORDS or size + record_size > _KINESIS_MAX_REQUEST_BYTES
        ):
            _put_records(client, stream, batch, max_attempts)
            batch, size = [], 0
        if not batch:
            oldest = time.monotonic()
        batch.append({"Data": data, "PartitionKey": key_text})
        size += record_size
        n += 1
        if rate is not None and time.monotonic() - oldest >= _KINESIS_MAX_HOLD_S:
            _put_records(client, stream, batch, max_attempts)
            batch, size = [], 0
    if batch:
        _put_records(client, stream, batch, max_attempts)
    return PublishStats(n, time.monotonic() - pacer.start)


def _put_records(client, stream: str, records: list[dict], max_attempts: int) -> None:
    """PutRecords, sending again only the records that failed, with exponential backoff."""
    pending = records
    for attempt in range(max_attempts):
        response = client.put_records(StreamName=stream, Records=pending)
        if not response.get("FailedRecordCount"):
            return
        failed = [
            (rec, res)
            for rec, res in zip(pending, response["Records"], strict=True)
            if res.get("ErrorCode")
        ]
        pending = [rec for rec, _ in failed]
        last_error = f"{failed[0][1]['ErrorCode']}: {failed[0][1].get('ErrorMessage', '')}"
        time.sleep(min(2.0, 0.05 * 2**attempt))
    raise SinkError(
        f"Kinesis stream {stream}: {len(pending)} records still failing after "
        f"{max_attempts} attempts ({last_error})"
    )
