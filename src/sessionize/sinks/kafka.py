"""Outputs as Kafka topics, exactly once for `read_committed` consumers.

`kafka://HOST:PORT[,HOST:PORT]/PREFIX?staging=DIR` writes output NAME to the topic
`PREFIX.NAME` (records: kafka_records.py). A Kafka transaction belongs to one producer, and a
batch's rows come from many Spark tasks, so tasks stage their rows as Parquet files under DIR
(staging.py, as the file sinks do) and the driver's `publish` produces every staged row, plus
one marker record to `PREFIX._batches`, in ONE transaction: a `read_committed` consumer sees
the whole batch or nothing of it. The transactional id is derived from the job and the prefix,
so a restarted job's producer fences its predecessor and aborts the transaction it left open.

A crash after the Kafka commit but before the job's batch record makes the job run the batch
again. The markers say which batches are on Kafka already: the sink reads them back
(read_committed) when it first publishes in a process, and a batch with a marker is not
produced again. With `--open-sessions`, the same transaction holds one record per touched
user on `PREFIX.open_sessions` (all their open sessions, or a tombstone). Kafka cannot
retract records, so `invalidate_from` over batches on Kafka
(rewind, batch reprocessing) is refused unless the URI says `duplicates=accept`; then those
batches' markers are retired and the rerun produces them again, next to the first copies.

The same topic holds the prefix's owner, a record keyed `_owner` (kafka_owner.py), which the
markers' readers skip.

Where the broker has no transactions, `delivery=at-least-once` produces the rows, then the
marker, without a transaction: after a crash in between, the batch is produced again, and
each record carries `batch_id` and `position` so that consumers drop the repeats.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import re
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qsl, urlsplit

import pyarrow as pa

from sessionize import faults
from sessionize.errors import ConfigError, EnvironmentProblem, SinkError
from sessionize.fs import without_options
from sessionize.mapping import EventMapping
from sessionize.schema import OUTPUTS, layout
from sessionize.sinks import staging
from sessionize.sinks.base import StagedSink, sink_errors
from sessionize.sinks.kafka_records import encode, per_key_records
from sessionize.sinks.replaced import REPLACED, key_schema, keys_name

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
# The topics PREFIX.NAME the sink writes: the outputs, `open_sessions`, the batch markers.
_TOPIC_NAMES = (*OUTPUTS, *REPLACED, MARKERS)


def _check_prefix(prefix: str, uri: str) -> None:
    """Refuse a prefix whose topics Kafka would refuse (before anything is recorded)."""
    longest = max(len(name) for name in _TOPIC_NAMES) + 1
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
                raise ConfigError(f"--output {without_options(uri)}: broker '{host}' must be "
                                  "HOST:PORT")  # fmt: skip
        query = dict(parse_qsl(parts.query, keep_blank_values=True))
        unknown = sorted(set(query) - set(_OPTIONS))
        if unknown:
            raise ConfigError(f"--output {without_options(uri)}: unknown option(s) {unknown}; "
                              f"accepted: {', '.join(_OPTIONS)}")  # fmt: skip
        delivery = query.get("delivery", "exactly-once")
        if delivery not in DELIVERIES:
            raise ConfigError(f"--output {without_options(uri)}: delivery must be one of "
                              f"{', '.join(DELIVERIES)}")  # fmt: skip
        duplicates = query.get("duplicates", "refuse")
        if duplicates not in ("refuse", "accept"):
            raise ConfigError(f"--output {without_options(uri)}: duplicates must be refuse or "
                              "accept")  # fmt: skip
        return KafkaOutput(parts.netloc, prefix, query.get("staging") or None, delivery,
                           duplicates == "accept")  # fmt: skip

    def topic(self, name: str) -> str:
        return f"{self.prefix}.{name}"


def with_staging(output: str, staging_dir: str) -> str:
    """`output` with `staging=staging_dir` added when it names no staging place."""
    if not is_kafka(output) or KafkaOutput.parse(output).staging:
        return output
    return f"{output}{'&' if '?' in output else '?'}staging={staging_dir}"


@dataclass(frozen=True)
class KafkaSink(StagedSink):
    """Pickles as its URI and settings; producers and consumers open on the driver only."""

    uri: str
    job: str = "sessionize"
    mapping: EventMapping | None = None
    open_sessions: bool = False  # also PREFIX.open_sessions: per user, compacted
    root: str = field(init=False)  # the staging place (StagedSink stages under it)
    _live: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)

    def __post_init__(self) -> None:
        out = self.output
        if out.staging is None:
            raise ConfigError(
                f"--output {without_options(self.uri)}: name where Spark tasks stage rows "
                f"before the driver produces them: {URI_FORM} (a place every task and the "
                "driver reach: a local path on one machine, s3:// on a cluster)"
            )
        object.__setattr__(self, "root", out.staging)

    def __getstate__(self) -> dict:
        return {"uri": self.uri, "job": self.job, "mapping": self.mapping, "root": self.root,
                "open_sessions": self.open_sessions}  # fmt: skip

    def __setstate__(self, state: dict) -> None:
        for k, v in {**state, "_live": {}}.items():
            object.__setattr__(self, k, v)

    @property
    def output(self) -> KafkaOutput:
        return KafkaOutput.parse(self.uri)

    @property
    def transactional_id(self) -> str:
        return f"sessionize.{self.output.prefix}.{self.job}"

    # -- driver side ------------------------------------------------------------------------
    def check(self) -> None:
        """At start: the broker answers, and runs transactions unless at-least-once was asked.

        Raises:
            SinkError: the broker does not answer, or has no transactions (one line each).
        """
        if self.output.delivery == "exactly-once":
            _close(self._producer(probe=True))
        else:
            self._markers()

    def publish(self, batch_id: int) -> None:
        fs, base = self._fs()
        where = f"{self.output.bootstrap}/{self.output.prefix}"
        with sink_errors(f"reading staged batch {batch_id} for Kafka"):
            if batch_id in self._markers():
                staging.close_attempt(fs, base, batch_id)  # on Kafka already: nothing twice
                return
            tables = {name: self._staged(fs, base, name, batch_id)
                      for name in layout(self.mapping).outputs}  # fmt: skip
            per_user = {name: self._replaced(fs, base, name, batch_id) for name in self._names}
        try:
            self._produce(batch_id, tables, per_user)
        except _kafka().KafkaException as e:
            self.close()
            self._live.clear()  # the outcome is known again only from the markers
            raise SinkError(
                f"producing batch {batch_id} to Kafka {where} failed: {_reason(e)}; nothing "
                "of it is visible to read_committed consumers, and the batch is produced "
                "again when the job is restarted"
            ) from e
        with sink_errors(f"clearing staged batch {batch_id}"):
            staging.close_attempt(fs, base, batch_id)

    def check_retractable(self, batch_id: int, accept_hint: str = "") -> None:
        """Refuse to remove batches >= batch_id that hold rows on Kafka (records cannot be
        retracted: running them again repeats them), unless the URI accepts duplicates.

        Raises:
            SinkError: one line naming the batches and how to accept duplicates.
        """
        markers = self._markers()
        later = sorted(b for b in markers if b >= batch_id)
        rows = sum(n for b in later for n in markers[b].values())
        if rows and not self.output.accept_duplicates:
            raise SinkError(
                f"batches {later[0]}..{later[-1]} ({rows} rows) are on Kafka "
                f"{self.output.prefix}.* and Kafka cannot retract records: running them again "
                f"repeats them; {accept_hint or 'add duplicates=accept to the Kafka URI'} "
                "to accept that"
            )

    def accepting_duplicates(self) -> KafkaSink:
        """This sink with `duplicates=accept`."""
        if self.output.accept_duplicates:
            return self
        joined = f"{self.uri}{'&' if '?' in self.uri else '?'}duplicates=accept"
        return KafkaSink(joined, self.job, self.mapping, self.open_sessions)

    def invalidate_from(self, batch_id: int) -> list[int]:
        self.check_retractable(batch_id)
        markers = self._markers()
        later = sorted(b for b in markers if b >= batch_id)
        if later:
            self._send_markers({b: None for b in later})
        return later

    def replaced_as_of(self, name: str) -> int | None:
        """The latest batch on Kafka that wrote `name`'s records (the markers say)."""
        on_kafka = [b for b, rows in self._markers().items() if name in rows]
        return max(on_kafka, default=None)

    def rows_from(self, name: str, batch_id: int) -> int:
        return sum(rows.get(name, 0) for b, rows in self._markers().items() if b >= batch_id)

    def published(self, name: str) -> list[int]:
        return sorted(b for b, rows in self._markers().items() if rows.get(name, 0))

    # -- producing --------------------------------------------------------------------------
    def _staged(self, fs, base: str, name: str, batch_id: int) -> pa.Table:
        schema = layout(self.mapping).outputs[name]
        return staging.read_staged(fs, base, name, batch_id, schema)

    @property
    def _names(self) -> tuple[str, ...]:
        return REPLACED if self.open_sessions else ()

    def _replaced(self, fs, base: str, name: str, batch_id: int) -> list[tuple[bytes, Any]]:
        lay = layout(self.mapping)
        rows = staging.read_staged(fs, base, name, batch_id, lay.open_sessions)
        keys = staging.read_staged(fs, base, keys_name(name), batch_id, key_schema(lay))
        return per_key_records(keys.drop_columns(["batch_id"]), rows.drop_columns(["batch_id"]),
                               batch_id)  # fmt: skip

    def _produce(self, batch_id: int, tables: dict[str, pa.Table],
                 per_user: dict[str, list[tuple[bytes, bytes | None]]]) -> None:  # fmt: skip
        out = self.output
        exactly_once = out.delivery == "exactly-once"
        producer = self._producer()
        faults.pause_point("kafka-before-produce", batch_id)
        if exactly_once:
            producer.begin_transaction()
        try:
            failures: list[str] = []
            for name, records in per_user.items():  # a user's record, or a tombstone
                for key, value in records:
                    _send(producer, out.topic(name), key, value, failures)
            for name, table in tables.items():
                for key, value in encode(table, positions=not exactly_once):
                    _send(producer, out.topic(name), key, value, failures)
            if not exactly_once:  # the rows first, then the marker that says they are there
                _flush(producer, failures)
                faults.pause_point("kafka-produced", batch_id)
            counts = {name: t.num_rows for name, t in tables.items()}
            counts |= {name: len(records) for name, records in per_user.items()}
            marker = {"job": self.job, "batch_id": batch_id, "rows": counts}
            _send(producer, out.topic(MARKERS), f"{self.job}:{batch_id}".encode(),
                  json.dumps(marker).encode(), failures,
                  partition=0)  # fmt: skip
            _flush(producer, failures)
            if exactly_once:
                faults.pause_point("kafka-produced", batch_id)
                producer.commit_transaction(_TIMEOUT_S)
        except BaseException:
            if exactly_once:
                # If this fails too, the next producer of the job aborts it.
                with contextlib.suppress(Exception):
                    producer.abort_transaction(_TIMEOUT_S)
            raise
        self._markers()[batch_id] = counts
        faults.pause_point("published-kafka", batch_id)

    def _send_markers(self, batches: dict[int, dict[str, int] | None]) -> None:
        """Markers for `batches` (None: retired, to be produced again) in one transaction."""
        out = self.output
        producer = self._producer()
        failures: list[str] = []
        try:
            if out.delivery == "exactly-once":
                producer.begin_transaction()
            for b, rows in batches.items():
                body = json.dumps({"job": self.job, "batch_id": b, "rows": rows,
                                   "retired": rows is None})  # fmt: skip
                _send(producer, out.topic(MARKERS), f"{self.job}:{b}".encode(), body.encode(),
                      failures, partition=0)  # fmt: skip
            _flush(producer, failures)
            if out.delivery == "exactly-once":
                producer.commit_transaction(_TIMEOUT_S)
        except _kafka().KafkaException as e:
            self.close()
            self._live.clear()
            raise SinkError(f"retiring batches on Kafka {out.bootstrap}: {_reason(e)}; run "
                            "the command again") from e  # fmt: skip
        markers = self._markers()
        for b in batches:
            markers.pop(b, None)

    def _producer(self, probe: bool = False):
        if "producer" in self._live and not probe:
            return self._live["producer"]
        kafka = _kafka()
        out = self.output
        config: dict[str, Any] = {"bootstrap.servers": out.bootstrap, "linger.ms": 20,
                                  "client.id": f"sessionize-{self.job}"}  # fmt: skip
        if out.delivery == "exactly-once":
            # A probe has an id of its own: it must not fence the job's running producer.
            config["transactional.id"] = self.transactional_id + (".probe" if probe else "")
        else:
            config["enable.idempotence"] = True
        producer = kafka.Producer(config)
        if out.delivery == "exactly-once":
            try:
                producer.init_transactions(_TIMEOUT_S)
            except kafka.KafkaException as e:
                raise SinkError(_no_transactions(out, e)) from e
        _OPEN.add(producer)
        if not probe:
            self._live["producer"] = producer
        return producer

    def close(self) -> None:
        """Close this process's producer, if open (between batches nothing is pending: each
        batch was flushed and committed, or aborted); the next publish opens another."""
        producer = self._live.pop("producer", None)
        if producer is not None:
            _close(producer)

    # -- markers ----------------------------------------------------------------------------
    def _markers(self) -> dict[int, dict[str, int]]:
        """{batch on Kafka: its rows per output}, read (read_committed) once per process,
        after this process's producer aborted what a predecessor left open."""
        if "markers" not in self._live:
            if self.output.delivery == "exactly-once":
                self._producer()
            self._live["markers"] = read_markers(self.output, self.job)
        return self._live["markers"]


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
    consumer = kafka.Consumer({
        "bootstrap.servers": out.bootstrap, "group.id": "sessionize-markers",
        "isolation.level": "read_committed", "enable.auto.commit": False,
        "enable.partition.eof": True, "auto.offset.reset": "earliest",
    })  # fmt: skip
    records: list[tuple[bytes | None, dict]] = []
    try:
        meta = consumer.list_topics(topic, timeout=_TIMEOUT_S)
        info = meta.topics.get(topic)
        if info is None or info.error is not None or not info.partitions:
            return records  # no batch written yet
        consumer.assign([kafka.TopicPartition(topic, p, kafka.OFFSET_BEGINNING)
                         for p in info.partitions])  # fmt: skip
        pending = set(info.partitions)
        while pending:
            msg = consumer.poll(_TIMEOUT_S)
            if msg is None:
                raise SinkError(f"reading {topic} on {out.bootstrap}: no answer in "
                                f"{_TIMEOUT_S:g}s; is the broker up?")  # fmt: skip
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


def _send(producer, topic: str, key: bytes | None, value: bytes | None, failures: list[str],
          partition: int | None = None) -> None:  # fmt: skip
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
