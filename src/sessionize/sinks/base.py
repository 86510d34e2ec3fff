"""The sink interface the engines call (`registry.open_sink` finds a sink by its output's
scheme and format).

Tasks call `write_part` (stage their rows); the driver calls `clear_staging` before a batch
runs, `publish` after its tasks finished, and `invalidate_from` when reprocessing. A sink
pickles as its configuration (it is sent to Spark tasks), never as an open connection.
Every sink is made from the output's URI, the job's name and the job's declared outputs
(sinks/outputs.py), and declares what it can do (`Capabilities`): the layers above ask
those, never which sink it is.
"""

from __future__ import annotations

import sys
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import ClassVar, Protocol

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pyarrow.fs as pafs

from sessionize import faults
from sessionize.errors import SinkError, translated
from sessionize.fs import resolve_fs
from sessionize.redaction import redact_uri
from sessionize.sinks import staging
from sessionize.sinks.outputs import Outputs, OutputSpec, session_outputs
from sessionize.sinks.owner import FileOwnerRecords, OwnerRecords
from sessionize.sinks.replaced import keys_name
from sessionize.state.records import FileRecords, Records


@dataclass(frozen=True)
class Capabilities:
    """What a sink can do, declared once on its class.

    Args:
        keeps_records: it keeps the job's records (the output's lease and owner, a batch
            job's binding to its state) in its own storage, not in a directory
            (PostgreSQL's tables): a `files` state cannot live under it.
        replaces_by_key: it keeps outputs replaced by key (`open_sessions`, a
            processor's `Output(mode="replace")`).
        retracts: it removes published batches (rewind, reprocessing); Kafka cannot.
        compacts: `compact` merges its published batches (local Parquet).
        keeps_current: it holds an output replaced by key as a table of one row per key
            that readers query as it is (Delta, PostgreSQL, Iceberg), so `identities` is
            kept current there; elsewhere (Parquet, Kafka's compacted topics) it is the
            change log.
        appends_revisions: it writes the revisions of `--revise-within` as the appended
            outputs `session_revisions` and `page_view_revisions` beside an append-only
            `sessions` (Parquet, local or on `s3://`), or takes them staged so and produces them as
            records keyed by `session_id` (Kafka).
        upserts_revisions: it keeps `sessions` and `page_views` current by `session_id`
            under `--revise-within` (a revision replaces, a retraction deletes) in the
            batch's publish, and sets them back exactly when batches are removed
            (PostgreSQL, Delta, Iceberg).
    """

    keeps_records: bool = False
    replaces_by_key: bool = False
    retracts: bool = True
    compacts: bool = False
    keeps_current: bool = False
    appends_revisions: bool = False
    upserts_revisions: bool = False


class Sink(Protocol):
    root: str
    job: str
    outputs: Outputs
    capabilities: ClassVar[Capabilities]

    def records(self) -> Records:
        """Where a batch job writing this output keeps its records and lease."""
        ...

    def owner_records(self) -> OwnerRecords:
        """Where the output keeps its owner record (sinks/owner.py)."""
        ...

    def check(self) -> None:
        """At a job's start, before anything is recorded: the output answers and can be
        written (a broker's transactions, a catalog). Raises SinkError in one line."""
        ...

    def check_retractable(self, batch_id: int, accept_hint: str = "") -> None:
        """Before removing batches >= batch_id: refuse (one line naming `accept_hint`)
        when they cannot be retracted."""
        ...

    def accepting_duplicates(self) -> Sink:
        """This sink told that repeated records are accepted (where it cannot retract)."""
        ...

    def committed(self, name: str) -> ds.Dataset | None:
        """Output `name` as its readers see it (None when it is not there).

        Raises:
            ConfigError: an output read with its own clients (Kafka's consumers)."""
        ...

    def write_part(self, name: str, batch_id: int, partition: int, table: pa.Table) -> int:
        """Stage one task's rows of output `name` (idempotent per partition); rows written."""
        ...

    def write_replaced(
        self, name: str, batch_id: int, partition: int, keys: pa.Table, table: pa.Table
    ) -> int:
        """Stage one task's rows of an output replaced by key (`open_sessions`) and the
        keys it touched (a table of the key's columns, each key once): publishing replaces
        every touched key's rows by its new ones."""
        ...

    def replaced_as_of(self, name: str) -> int | None:
        """The batch whose publish last brought output `name` (replaced by key) up to
        date; None: never, or a removal of batches left it to be rebuilt."""
        ...

    def clear_staging(self, batch_id: int) -> None:
        """Drop what an earlier, failed attempt of this batch staged."""
        ...

    def publish(self, batch_id: int) -> None:
        """Make the staged batch the visible content of `batch_id` in every output, atomically
        per output; a batch published before is replaced, never added to."""
        ...

    def invalidate_from(self, batch_id: int) -> list[int]:
        """Remove every published batch >= batch_id, newest first, each batch whole, so that
        readers see batches 0..K at every moment; returns their ids."""
        ...

    def rows_from(self, name: str, batch_id: int) -> int:
        """Rows of output `name` in published batches >= batch_id (what invalidating from
        there would remove)."""
        ...

    def published(self, name: str) -> list[int]:
        """The batch ids visible in output `name`."""
        ...

    def nothing_to_maintain(self) -> str | None:
        """Why `sessionize maintain` has nothing to do on this output (None: it cleans,
        compacts or vacuums it)."""
        ...

    def no_outputs(self) -> str:
        """The line of a reader (`report`) that finds no output here: what to check."""
        ...

    def staged_counts(self, name: str, batch_id: int, column: str) -> dict[str, int]:
        """How many staged rows of output `name` in `batch_id` hold each value of `column`
        (before `publish`)."""
        ...

    def close(self) -> None:
        """At the job's end: close what the driver holds open for the sink (a producer);
        a later publish opens it again."""
        ...


def sink_errors(what: str) -> AbstractContextManager[None]:
    """Object-store and table failures as one SinkError line; staged rows stay for a retry."""

    def translate(exc: Exception) -> SinkError | None:
        if not _is_storage_error(exc):
            return None
        detail = " ".join(str(exc).split())[:300]
        return SinkError(
            f"{what} failed: {detail}; is the store reachable? The batch is published again "
            "when the job is restarted"
        )

    return translated(translate)


def _is_storage_error(exc: Exception) -> bool:
    if isinstance(exc, OSError | pa.ArrowException):
        return True
    kinds = [
        ("deltalake.exceptions", "DeltaError"),
        ("botocore.exceptions", "BotoCoreError"),
        ("botocore.exceptions", "ClientError"),
    ]
    for module, name in kinds:
        mod = sys.modules.get(module)
        if mod is not None and isinstance(exc, getattr(mod, name)):
            return True
    return False


class StagedSink:
    """What the sinks that stage task files under `ROOT/_staging` share (`staging.py`),
    and the defaults of a sink whose records are files at its root."""

    root: str
    job: str
    outputs: Outputs
    capabilities: ClassVar[Capabilities] = Capabilities()

    @classmethod
    def check_place(cls, uri: str) -> None:
        """Before anything else: the URI names a place this sink writes (no I/O).

        Raises:
            ConfigError: one line naming what is wrong.
        """

    @property
    def record_place(self) -> str:
        """The directory of a batch job's records and lease."""
        return self.root

    def records(self) -> Records:
        return FileRecords(self.record_place)

    def owner_records(self) -> OwnerRecords:
        return FileOwnerRecords(self.root)

    def check(self) -> None:
        """A file output needs no probe: its writes say what is wrong."""

    def check_retractable(self, batch_id: int, accept_hint: str = "") -> None:
        """Batches of files and tables can be removed."""

    def accepting_duplicates(self) -> StagedSink:
        return self

    def published(self, name: str) -> list[int]:
        """The batch ids visible in output `name` (each sink's own)."""
        raise NotImplementedError

    def nothing_to_maintain(self) -> str | None:
        """Why `sessionize maintain` has nothing to do on this output (None: it cleans,
        compacts or vacuums it)."""
        return None

    def no_outputs(self) -> str:
        """The line of a reader (`report`) that finds no output here: what to check."""
        return (
            f"--output {redact_uri(self.root)} holds no sessionize output (no "
            f"{', '.join(self.outputs.names[:-1])} or {self.outputs.names[-1]} yet): give "
            "the --output of a job that has published a batch"
        )

    def _fs(self) -> tuple[pafs.FileSystem, str]:
        return resolve_fs(self.root)

    def _publish_tables(self, batch_id: int) -> None:
        """Commit the staged batch to each table, one commit per table, then drop staging.
        The outputs replaced by key go first: a session leaves `open_sessions` before it
        enters `sessions`, so a reader may miss it for a moment but never sees it twice.
        `replay` tells a table's commit that the batch may already be in it."""
        fs, base = self._fs()
        opened = staging.attempt_open(fs, base, batch_id)
        for spec in self.outputs.replaced:
            keys, rows = staging.read_replacement(fs, base, spec, batch_id)
            self._replace_table(spec, batch_id, keys, rows, replay=opened)
            faults.pause_point(f"published-{spec.name}", batch_id)
        for spec in self.outputs.appended:
            rows = staging.read_staged(fs, base, spec.name, batch_id, spec.schema)
            self._append_table(spec, batch_id, rows, replay=opened or rows.num_rows > 0)
            faults.pause_point(f"published-{spec.name}", batch_id)
        staging.close_attempt(fs, base, batch_id)

    def _replace_table(
        self, spec: OutputSpec, batch_id: int, keys: pa.Table, rows: pa.Table, *, replay: bool
    ) -> None:
        """A table format's commit of the rows of `keys` replaced by `rows`."""
        raise NotImplementedError

    def _append_table(
        self, spec: OutputSpec, batch_id: int, rows: pa.Table, *, replay: bool
    ) -> None:
        """A table format's commit of `rows` appended as batch `batch_id`."""
        raise NotImplementedError

    def write_part(self, name: str, batch_id: int, partition: int, table: pa.Table) -> int:
        fs, base = self._fs()
        with sink_errors(f"staging batch {batch_id} of {name}"):
            return staging.stage(fs, base, name, batch_id, partition, table)

    def write_replaced(
        self, name: str, batch_id: int, partition: int, keys: pa.Table, table: pa.Table
    ) -> int:
        fs, base = self._fs()
        with sink_errors(f"staging batch {batch_id} of {name}"):
            staging.stage(fs, base, keys_name(name), batch_id, partition, keys)
            return staging.stage(fs, base, name, batch_id, partition, table)

    def staged_counts(self, name: str, batch_id: int, column: str) -> dict[str, int]:
        fs, base = self._fs()
        with sink_errors(f"reading staged batch {batch_id} of {name}"):
            files = staging.staged_files(fs, base, name, batch_id)
            if not files:
                return {}
            values = ds.dataset(files, filesystem=fs, format="parquet").to_table(columns=[column])
        counts = pc.value_counts(values[column].combine_chunks()).to_pylist()
        return {c["values"]: c["counts"] for c in counts}

    def close(self) -> None:
        """Nothing held open between batches (the Kafka sink holds a producer)."""

    def clear_staging(self, batch_id: int) -> None:
        fs, base = self._fs()
        with sink_errors(f"clearing staged batch {batch_id}"):
            staging.open_attempt(fs, base, batch_id)


@dataclass(frozen=True)
class RootedSink(StagedSink):
    """A sink whose files or tables live under its root, a path or an s3:// URI. Pickles
    as its root, job and outputs (the job's outputs, by default the session outputs):
    executors open their own filesystem handle."""

    root: str
    job: str = "sessionize"
    outputs: Outputs = field(default_factory=session_outputs)
