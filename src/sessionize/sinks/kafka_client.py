"""A Kafka output's URI (`KafkaOutput`) and the client calls the Kafka sink and its owner
records share: producing with delivery reports, reading the markers topic, closing
producers at exit (sinks/kafka.py, sinks/kafka_owner.py)."""

from __future__ import annotations

import atexit
import contextlib
import json
import re
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qsl, urlsplit

from sessionize.errors import ConfigError, EnvironmentProblem, SinkError
from sessionize.fs import without_options
from sessionize.schema import OPEN_SESSIONS, OUTPUTS

MARKERS = "_batches"  # PREFIX._batches: one marker per batch on Kafka
DELIVERIES = ("exactly-once", "at-least-once")
_OPTIONS = ("staging", "delivery", "duplicates")
_TIMEOUT_S = 30.0
URI_FORM = "kafka://HOST:PORT[,HOST:PORT]/PREFIX?staging=DIR"


def _kafka():
    try:
        import confluent_kafka
    except ImportError as e:  # pragma: no cover - depends on the installation
        raise EnvironmentProblem(
            "writing Kafka needs confluent-kafka: pip install 'sessionize[kafka]'"
        ) from e
    return confluent_kafka


# Kafka's rules for a topic name: these characters, at most 249 of them, not `.` or `..`.
_TOPIC_CHARS = re.compile(r"[a-zA-Z0-9._-]+")
_MAX_TOPIC = 249
# The topics PREFIX.NAME a session job writes: the outputs, `open_sessions`, the markers.
_TOPIC_NAMES = (*OUTPUTS, OPEN_SESSIONS, MARKERS)


def _check_prefix(prefix: str, uri: str, names: tuple[str, ...] = _TOPIC_NAMES) -> None:
    """Refuse a prefix whose topics `PREFIX.NAME` Kafka would refuse (before anything is
    recorded)."""
    longest = max(len(name) for name in (*names, MARKERS)) + 1
    shown = prefix if len(prefix) <= 40 else prefix[:40] + "..."
    if not _TOPIC_CHARS.fullmatch(prefix) or prefix in (".", ".."):
        raise ConfigError(
            f"--output {without_options(uri)}: topic prefix {shown!r}: Kafka topic names "
            "take only ASCII letters, digits, '.', '_' and '-'"
        )
    if len(prefix) + longest > _MAX_TOPIC:
        raise ConfigError(
            f"--output {without_options(uri)[:60]}...: a topic prefix of at most "
            f"{_MAX_TOPIC - longest} characters (Kafka topic names hold {_MAX_TOPIC})"
        )


def is_kafka(output: str) -> bool:
    return output.startswith("kafka://")


@dataclass(frozen=True)
class KafkaOutput:
    """A parsed `--output kafka://...`."""

    bootstrap: str
    prefix: str
    staging: str | None
    delivery: str = "exactly-once"
    accept_duplicates: bool = False

    @staticmethod
    def parse(uri: str) -> KafkaOutput:
        """Raises ConfigError (one line) for a malformed URI or an unknown option."""
        if "@" in uri.split("?", 1)[0]:
            raise ConfigError(
                f"--output {without_options(uri)}: a Kafka output takes no user or password "
                "(it reaches its brokers without SASL)"
            )
        parts = urlsplit(uri)
        prefix = parts.path.strip("/")
        if parts.scheme != "kafka" or not parts.netloc or not prefix or "/" in prefix:
            raise ConfigError(f"--output {without_options(uri)}: write {URI_FORM}")
        _check_prefix(prefix, uri)
        for host in parts.netloc.split(","):
            name, _, port = host.rpartition(":")
            if not name or not port.isdigit():
                raise ConfigError(
                    f"--output {without_options(uri)}: broker '{host}' must be HOST:PORT"
                )
        query = dict(parse_qsl(parts.query, keep_blank_values=True))
        unknown = sorted(set(query) - set(_OPTIONS))
        if unknown:
            raise ConfigError(
                f"--output {without_options(uri)}: unknown option(s) {unknown}; "
                f"accepted: {', '.join(_OPTIONS)}"
            )
        delivery = query.get("delivery", "exactly-once")
        if delivery not in DELIVERIES:
            raise ConfigError(
                f"--output {without_options(uri)}: delivery must be one of {', '.join(DELIVERIES)}"
            )
        duplicates = query.get("duplicates", "refuse")
        if duplicates not in ("refuse", "accept"):
            raise ConfigError(
                f"--output {without_options(uri)}: duplicates must be refuse or accept"
            )
        return KafkaOutput(
            parts.netloc, prefix, query.get("staging") or None, delivery, duplicates == "accept"
        )

    def topic(self, name: str) -> str:
        return f"{self.prefix}.{name}"


def with_staging(output: str, staging_dir: str) -> str:
    """`output` with `staging=staging_dir` added when it names no staging place."""
    if not is_kafka(output) or KafkaOutput.parse(output).staging:
        return output
    return f"{output}{'&' if '?' in output else '?'}staging={staging_dir}"


# Producers still open, closed at exit: a librdkafka producer left to the interpreter's
# shutdown, its broker gone, can corrupt the heap while its threads still reconnect.
_OPEN: set[Any] = set()


def _close(producer) -> None:
    _OPEN.discard(producer)
    producer.purge()
    producer.close()


@atexit.register
def _close_open() -> None:
    for producer in list(_OPEN):
        with contextlib.suppress(Exception):
            _close(producer)


def read_markers(out: KafkaOutput, job: str) -> dict[int, dict[str, int]]:
    """The committed markers of job `job` in `PREFIX._batches`: {batch: rows per output},
    retired ones left out (jobs writing one prefix each have their own batches).

    Raises:
        SinkError: the broker does not answer (one line).
    """
    markers: dict[int, dict[str, int]] = {}
    for _, body in read_batches_topic(out):
        if body.get("job") != job:
            continue  # another job's marker, or the owner record (kafka_owner.py)
        if body.get("retired"):
            markers.pop(int(body["batch_id"]), None)
        else:
            markers[int(body["batch_id"])] = dict(body["rows"])
    return markers


def read_batches_topic(out: KafkaOutput) -> list[tuple[bytes | None, dict]]:
    """Every committed record of `PREFIX._batches` (read_committed), in order: (key, body).

    Raises:
        SinkError: the broker does not answer (one line).
    """
    kafka = _kafka()
    topic = out.topic(MARKERS)
    consumer = kafka.Consumer(
        {
            "bootstrap.servers": out.bootstrap,
            "group.id": "sessionize-markers",
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            "auto.offset.reset": "earliest",
        }
    )
    records: list[tuple[bytes | None, dict]] = []
    try:
        meta = consumer.list_topics(topic, timeout=_TIMEOUT_S)
        info = meta.topics.get(topic)
        if info is None or info.error is not None or not info.partitions:
            return records  # no batch written yet
        consumer.assign(
            [kafka.TopicPartition(topic, p, kafka.OFFSET_BEGINNING) for p in info.partitions]
        )
        pending = set(info.partitions)
        while pending:
            msg = consumer.poll(_TIMEOUT_S)
            if msg is None:
                raise SinkError(
                    f"reading {topic} on {out.bootstrap}: no answer in "
                    f"{_TIMEOUT_S:g}s; is the broker up?"
                )
            if msg.error() is not None:
                if msg.error().code() == kafka.KafkaError._PARTITION_EOF:
                    pending.discard(msg.partition())
                    continue
                raise SinkError(f"reading {topic} on {out.bootstrap}: {msg.error().str()}")
            records.append((msg.key(), json.loads(msg.value())))
    except kafka.KafkaException as e:
        raise SinkError(f"reading {topic} on {out.bootstrap}: {_reason(e)}") from e
    finally:
        consumer.close()
    return records


def _send(
    producer,
    topic: str,
    key: bytes | None,
    value: bytes | None,
    failures: list[str],
    partition: int | None = None,
) -> None:
    def delivered(err, _msg) -> None:
        if err is not None:
            failures.append(err.str())

    kwargs = {} if partition is None else {"partition": partition}
    while True:
        try:
            producer.produce(topic, value=value, key=key, on_delivery=delivered, **kwargs)
            break
        except BufferError:  # the local queue is full: let it drain
            producer.poll(0.1)
    producer.poll(0)


def _flush(producer, failures: list[str]) -> None:
    left = producer.flush(_TIMEOUT_S)
    if left or failures:
        kafka = _kafka()
        why = failures[0] if failures else f"{left} records not delivered in {_TIMEOUT_S:g}s"
        raise kafka.KafkaException(kafka.KafkaError(kafka.KafkaError._FAIL, why))


def _reason(e: Exception) -> str:
    err = e.args[0] if e.args else e
    text = err.str() if hasattr(err, "str") else str(err)
    return " ".join(text.split())[:300]


def _no_transactions(out: KafkaOutput, e: Exception) -> str:
    return (
        f"Kafka {out.bootstrap} did not start a transaction ({_reason(e)}): without "
        "transactions outputs are not exactly once; if the broker does not support them, "
        "add delivery=at-least-once to the URI (records then carry batch_id and position "
        "to drop repeats)"
    )
