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

With `--revise-within`, `PREFIX.sessions` and `PREFIX.page_views` are keyed by `session_id`:
a revision is the session's new record, a retraction a tombstone, in the batch's transaction
(kafka_revisions.py). With identity, `PREFIX.users` is keyed by `stitched_user_id`.

The same topic holds the prefix's owner, a record keyed `_owner` (kafka_owner.py), which the
markers' readers skip.

Where the broker has no transactions, `delivery=at-least-once` produces the rows, then the
marker, without a transaction: after a crash in between, the batch is produced again, and
each record carries `batch_id` and `position` so that consumers drop the repeats.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from sessionize import faults
from sessionize.base_schema import SESSION_REVISIONS, USERS_OUTPUT
from sessionize.errors import ConfigError, SinkError
from sessionize.fs import without_options
from sessionize.sinks import staging
from sessionize.sinks.base import Capabilities, StagedSink, sink_errors
from sessionize.sinks.kafka_client import (  # noqa: F401 - KafkaOutput, with_staging re-exported
    _OPEN,
    _TIMEOUT_S,
    MARKERS,
    URI_FORM,
    KafkaOutput,
    _check_prefix,
    _close,
    _flush,
    _kafka,
    _no_transactions,
    _reason,
    _send,
    is_kafka,
    read_markers,
    with_staging,
)
from sessionize.sinks.kafka_records import encode, per_key_records
from sessionize.sinks.kafka_revisions import REVISED, Record, revised_records
from sessionize.sinks.outputs import Outputs, OutputSpec, session_outputs


@dataclass(frozen=True)
class KafkaSink(StagedSink):
    """Pickles as its URI, job and outputs; producers and consumers open on the driver
    only. A topic per output, `PREFIX.NAME`; an output replaced by key (`open_sessions`)
    is one record per touched key, for a log-compacted topic."""

    uri: str
    job: str = "sessionize"
    outputs: Outputs = field(default_factory=session_outputs)
    root: str = field(init=False)  # the staging place (StagedSink stages under it)
    _live: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)
    capabilities = Capabilities(replaces_by_key=True, retracts=False, appends_revisions=True)

    @classmethod
    def check_place(cls, uri: str) -> None:
        KafkaOutput.parse(uri)

    def owner_records(self):  # -> kafka_owner.KafkaOwnerRecords
        from sessionize.sinks.kafka_owner import KafkaOwnerRecords

        return KafkaOwnerRecords(self.uri)

    def committed(self, name: str):
        raise ConfigError(
            f"{without_options(self.uri)}: Kafka outputs are read with a Kafka consumer "
            "(isolation.level=read_committed), not by this command"
        )

    def __post_init__(self) -> None:
        out = self.output
        _check_prefix(out.prefix, self.uri, self.outputs.names)
        if out.staging is None:
            raise ConfigError(
                f"--output {without_options(self.uri)}: name where Spark tasks stage rows "
                f"before the driver produces them: {URI_FORM} (a place every task and the "
                "driver reach: a local path on one machine, s3:// on a cluster)"
            )
        object.__setattr__(self, "root", out.staging)

    def __getstate__(self) -> dict:
        return {"uri": self.uri, "job": self.job, "outputs": self.outputs, "root": self.root}

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
            tables = {spec.name: self._staged(fs, base, spec, batch_id)
                      for spec in self.outputs.appended}  # fmt: skip
            per_user = {spec.name: self._replaced(fs, base, spec, batch_id)
                        for spec in self.outputs.replaced}  # fmt: skip
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

    def nothing_to_maintain(self) -> str | None:
        # A publish drops the batch's staged rows and a restart re-stages an open batch;
        # what is left is the topics' own upkeep, which their cleanup policy does.
        return (
            f"--output {without_options(self.uri)}: Kafka outputs leave nothing to clean (a "
            "publish drops its staged rows); retention and compaction are the topics' own "
            "(cleanup.policy, retention.ms)"
        )

    def accepting_duplicates(self) -> KafkaSink:
        """This sink with `duplicates=accept`."""
        if self.output.accept_duplicates:
            return self
        joined = f"{self.uri}{'&' if '?' in self.uri else '?'}duplicates=accept"
        return KafkaSink(joined, self.job, self.outputs)

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
    def _staged(self, fs, base: str, spec: OutputSpec, batch_id: int) -> pa.Table:
        return staging.read_staged(fs, base, spec.name, batch_id, spec.schema)

    def _replaced(self, fs, base: str, spec: OutputSpec, batch_id: int) -> list[tuple[bytes, Any]]:
        keys, rows = staging.read_replacement(fs, base, spec, batch_id)
        return per_key_records(keys, rows, batch_id, spec.name, spec.key)

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
                for user, record in records:
                    _send(producer, out.topic(name), user, record, failures)
            for name, keyed in self._records(batch_id, tables, exactly_once).items():
                for key, value in keyed:
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

    def _records(
        self, batch_id: int, tables: dict[str, pa.Table], exactly_once: bool
    ) -> dict[str, Iterable[Record]]:
        """The records of the appended outputs, per topic name: keyed by the job's key (or
        the output's own: `users` by `stitched_user_id`), except a revising job's sessions
        and page views, keyed by `session_id`."""
        keyed = {name: table for name, table in tables.items()
                 if not (self.revises and name in REVISED)}  # fmt: skip
        records: dict[str, Iterable[Record]] = {
            name: encode(table, positions=not exactly_once, key=self.outputs.record_key_of(name))
            for name, table in keyed.items()
        }
        if self.revises:
            # A users step (identity) revises sessions without new page views.
            renumbered = USERS_OUTPUT in self.outputs
            records |= revised_records(
                tables, batch_id, positions=not exactly_once, renumbered=renumbered
            )
        return records

    @property
    def revises(self) -> bool:
        """A `--revise-within` job's sink: its outputs hold the revisions."""
        return SESSION_REVISIONS in self.outputs

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
