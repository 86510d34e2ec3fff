"""Kafka topic -> streaming DataFrame (`value`, `error`, `source`), as a Python data source.

Spark's own Kafka connector is a JVM jar; this source speaks Kafka through confluent-kafka
(librdkafka) inside Spark's Python Data Source API, with the same guarantees.

Offsets. The source's offset is ``{"topic": T, "partitions": {"0": 12, "1": 40}}``: for each
partition, the Kafka offset of the next record to read. Spark writes it to the checkpoint's
offset log before a batch runs, so a micro-batch is exactly the records with
``start[p] <= offset < end[p]`` of every partition: planned on the driver, read by one Spark task
per partition on the executors (``assign`` at ``start``, no consumer group, nothing committed
to Kafka). A restarted query resumes at the last committed end; a replayed batch (same start
and end) reads the same records. A partition that appears later (``CreatePartitions``) first
enters the offset at its earliest available offset with an empty range, and is read from there
in the following batches, so its start is recorded before any of its records is read.
Records gone before they were read (retention) fail the query rather than being skipped.

End offsets. A batch ends at the broker's high watermark (``ListOffsets``, never a cached
value), capped by ``maxRecordsPerTrigger`` shared fairly among partitions. A broker that
under-reports the high watermark (tansu reports its last record batch's base offset + 1) only
delays records: the source never claims an offset it was not told exists, and reads the rest
once the reported end moves. Reading checks the range really was delivered: a task fails after
``readTimeout`` rather than end a range early. With ``Trigger.AvailableNow`` the high
watermarks at the start of the run are the target; later records wait for the next run.
Transactional producers are not expected: the end is the high watermark, not the last stable
offset.

Time. The broker's record timestamp is not exposed: it is when the producer sent or the broker
appended the record, set by their clocks and delays, not when the user acted. Event time and
watermarks come from the JSON ``event_time`` only.
"""

from __future__ import annotations

import bisect
import time
from collections.abc import Iterator, Mapping
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.datasource import InputPartition

from sessionize.errors import ConfigError, SourceError
from sessionize.sources.admission import ReadAllAvailable, ReadLimit, ReadMaxRows
from sessionize.sources.record_source import RecordReader, RecordSource
from sessionize.sources.uri import (
    SourceOptions,
    check_line_options,
    confluent_kafka,
    decode_records,
    parse_kafka_uri,
    parse_source_options,
    split_budget,
)

FORMAT = "sessionize_kafka"
# librdkafka settings the source owns: reading is by explicit offsets only.
_FIXED = {
    "enable.auto.commit": False,
    "enable.auto.offset.store": False,
    "auto.offset.reset": "error",
    "enable.partition.eof": True,
}
_API_TIMEOUT_S = 30.0
_ROWS_PER_ARROW_BATCH = 10_000


def _kafka():
    return confluent_kafka("reading Kafka")


def consumer_config(bootstrap: str, client: Mapping[str, str]) -> dict[str, Any]:
    """librdkafka settings of the source's consumers: the user's `kafka.*` plus ours."""
    fixed = sorted(set(client) & (set(_FIXED) | {"bootstrap.servers"}))
    if fixed:
        raise ConfigError(
            f"kafka.{fixed[0]} is set by the source (it reads by explicit offsets; brokers "
            "come from the URI) and cannot be an option"
        )
    config: dict[str, Any] = {"group.id": "sessionize-source", "client.id": "sessionize-source"}
    config.update(client)
    config.update(_FIXED)
    config["bootstrap.servers"] = bootstrap
    return config


class KafkaRange(InputPartition):
    """Records `start <= offset < end` of one partition: one Spark task."""

    def __init__(self, topic: str, partition: int, start: int, end: int) -> None:
        self.topic, self.partition, self.start, self.end = topic, partition, start, end

    def __repr__(self) -> str:
        return f"KafkaRange({self.topic}/{self.partition} [{self.start}, {self.end}))"


class KafkaStreamReader(RecordReader):
    """Plans offset ranges on the driver; `read` runs on executors.

    The instance is pickled to the executors, so clients are created lazily and never
    pickled; `read` uses only the settings.
    """

    def __init__(self, options: Mapping[str, str]) -> None:
        if "uri" not in options:
            raise ConfigError(f"the {FORMAT} source needs option uri=kafka://HOST:PORT/TOPIC")
        address = parse_kafka_uri(options["uri"])
        self.topic = address.topic
        self.opts: SourceOptions = parse_source_options(options, "kafka", internal=("uri",))
        self.config = consumer_config(address.bootstrap, self.opts.client)
        self._target: dict[str, int] | None = None  # AvailableNow: end offsets of this run
        self._latest: dict[str, int] | None = None

    # ---- driver side -------------------------------------------------------------------

    def _make_client(self):
        return _kafka().Consumer(self.config)

    def _partitions(self) -> list[int]:
        meta = self._client().list_topics(self.topic, timeout=_API_TIMEOUT_S)
        topic = meta.topics.get(self.topic)
        if topic is None or topic.error is not None or not topic.partitions:
            why = topic.error if topic is not None and topic.error is not None else "not found"
            raise SourceError(
                f"Kafka topic '{self.topic}' on {self.config['bootstrap.servers']}: {why}"
            )
        return sorted(topic.partitions)

    def _watermarks(self) -> tuple[dict[str, int], dict[str, int]]:
        """(low, high) watermark of every partition, asked from the broker (not cached)."""
        TopicPartition = _kafka().TopicPartition
        low: dict[str, int] = {}
        high: dict[str, int] = {}
        for p in self._partitions():
            lo, hi = self._client().get_watermark_offsets(
                TopicPartition(self.topic, p), timeout=_API_TIMEOUT_S, cached=False
            )
            low[str(p)], high[str(p)] = lo, hi
        return low, high

    def _offset(self, partitions: Mapping[str, int]) -> dict:
        ordered = sorted(partitions.items(), key=lambda kv: int(kv[0]))
        return {"topic": self.topic, "partitions": {p: int(o) for p, o in ordered}}

    def _start(self, offset: dict) -> dict[str, int]:
        if offset.get("topic") != self.topic:
            raise SourceError(
                f"the checkpoint holds offsets of Kafka topic '{offset.get('topic')}', "
                f"not '{self.topic}': use a new checkpoint for another topic"
            )
        return {p: int(o) for p, o in offset["partitions"].items()}

    def first_offset(self) -> dict:
        low, high = self._watermarks()
        return self._offset(low if self.opts.starting_position == "earliest" else high)

    def getDefaultReadLimit(self) -> ReadLimit:
        n = self.opts.max_records_per_trigger
        return ReadMaxRows(n) if n else ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        self._target = self._watermarks()[1]

    def end_offset(self, start: dict, limit: ReadLimit) -> dict:
        begin = self._start(start)
        low, high = self._watermarks()
        self._latest = high
        if self._target is not None:
            high = {p: min(h, self._target[p]) for p, h in high.items() if p in self._target}
        backlog: dict[str, int] = {}
        for p, s in begin.items():
            if p not in low:
                raise SourceError(f"Kafka partition {self.topic}/{p} no longer exists")
            if s < low[p]:
                raise SourceError(
                    f"records {s}..{low[p] - 1} of Kafka partition {self.topic}/{p} were "
                    "deleted (retention) before this query read them"
                )
            # max(): a broker reporting less than was already read never moves us back.
            backlog[p] = max(0, high.get(p, s) - s)
        if isinstance(limit, ReadAllAvailable):
            grant = backlog
        elif isinstance(limit, ReadMaxRows):
            grant = split_budget(backlog, limit.max_rows)
        else:
            raise SourceError(f"unsupported read limit {limit!r}")
        end = {p: s + grant[p] for p, s in begin.items()}
        for p in low:
            if p not in end and (self._target is None or p in self._target):
                end[p] = low[p]  # a new partition: recorded first, read from the next batch
        return self._offset(end)

    def reportLatestOffset(self) -> dict | None:
        return None if self._latest is None else self._offset(self._latest)

    def ranges(self, start: dict, end: dict) -> list[KafkaRange]:
        begin = self._start(start)
        return [
            KafkaRange(self.topic, int(p), begin[p], int(e))
            for p, e in self._start(end).items()
            if p in begin and int(e) > begin[p]
        ]

    def commit(self, end: dict) -> None:
        """Nothing to do: progress lives in Spark's checkpoint, never in consumer groups."""

    def stop(self) -> None:
        if self._handle is not None:
            self._handle.close()
            self._handle = None

    # ---- executor side -----------------------------------------------------------------

    def read(self, partition: KafkaRange) -> Iterator:  # type: ignore[override]  # our plan's
        return read_range(self.config, partition, self.opts)


def read_range(config: Mapping[str, Any], part: KafkaRange, opts: SourceOptions) -> Iterator:
    """Yield Arrow batches of exactly the records `part.start <= offset < part.end`.

    Offsets may have gaps (compaction, transaction markers): the range is complete when a
    record at or past `end - 1` arrives or the broker signals the partition's end at or past
    `end`. If neither happens within `readTimeout` of the last progress, the task fails.
    """
    kafka = _kafka()
    eof = kafka.KafkaError._PARTITION_EOF
    consumer = kafka.Consumer(dict(config))
    prefix = f"kafka:{part.topic}/{part.partition}/"
    try:
        consumer.assign([kafka.TopicPartition(part.topic, part.partition, part.start)])
        position = part.start
        last_progress = time.monotonic()
        done = False
        while not done:
            messages = consumer.consume(
                num_messages=min(_ROWS_PER_ARROW_BATCH, max(1, part.end - position)),
                timeout=0.5,
            )
            records = []
            for m in messages:  # one partition: records come in offset order
                err = m.error()
                if err is None:
                    records.append(m)
                elif err.code() != eof:
                    raise SourceError(
                        f"reading {part!r}: {err.str()}"
                        + (" (records deleted by retention?)" if "range" in err.str() else "")
                    )
                elif m.offset() >= part.end:
                    done = True  # the partition ends at or past our end: nothing is missing
                # else: the broker's end is below ours (under-reported): wait for the rest
            offsets = [m.offset() for m in records]
            lo = bisect.bisect_left(offsets, position)
            hi = bisect.bisect_left(offsets, part.end)
            if hi < len(offsets):
                done = True  # a record at or past the end arrived: the range is complete
            if hi > lo:
                chunk = records[lo:hi]
                position = offsets[hi - 1] + 1
                done = done or position >= part.end
                last_progress = time.monotonic()
                yield decode_records(
                    [m.value() for m in chunk],
                    [prefix + str(o) for o in offsets[lo:hi]],
                    opts.max_record_bytes,
                )
            if not done and time.monotonic() - last_progress > opts.read_timeout_s:
                raise SourceError(
                    f"reading {part!r}: stuck at offset {position} for "
                    f"{opts.read_timeout_s:g}s; the broker does not deliver records it "
                    "reported (raise readTimeout if it is only slow)"
                )
    finally:
        consumer.close()


def check_client_config(config: Mapping[str, Any]) -> None:
    """Let librdkafka reject unknown or invalid `kafka.*` settings now, with its message."""
    kafka = _kafka()
    try:
        kafka.Consumer(dict(config)).close()
    except kafka.KafkaException as e:
        raise ConfigError(f"Kafka consumer settings: {e.args[0].str()}") from e


class KafkaSource(RecordSource):
    """`spark.readStream.format("sessionize_kafka").option("uri", "kafka://H:P/T")`."""

    format = FORMAT
    stream_reader = KafkaStreamReader


def kafka_stream(spark: SparkSession, uri: str, options: Mapping[str, str]) -> DataFrame:
    """A streaming DataFrame (value, error, source) of the topic in `uri`; see the module doc."""
    address = parse_kafka_uri(uri)
    opts = parse_source_options(options, "kafka")
    check_line_options(options)
    check_client_config(consumer_config(address.bootstrap, opts.client))
    spark.dataSource.register(KafkaSource)
    return spark.readStream.format(FORMAT).options(**dict(options)).option("uri", uri).load()


def kafka_lag(uri: str, options: Mapping[str, str], offset: Mapping | None) -> dict[str, int]:
    """Records per partition that the broker holds beyond `offset` (the query's last end
    offset; None: nothing read yet), asked from the broker now."""
    reader = KafkaStreamReader({**options, "uri": uri})
    try:
        low, high = reader._watermarks()
    finally:
        reader.stop()
    read = (offset or {}).get("partitions", {})
    return {p: high[p] - int(read.get(p, low[p])) for p in sorted(high, key=int)}
