"""Output format and URI -> sink."""

from __future__ import annotations

import importlib.util

import pyarrow as pa
import pyarrow.dataset as ds

from sessionize.errors import ConfigError
from sessionize.fs import is_local, location_key, resolve_fs, without_options
from sessionize.mapping import EventMapping
from sessionize.redaction import redact_uri
from sessionize.sinks import replaced, tree_move
from sessionize.sinks.base import Sink
from sessionize.sinks.compaction import committed_dataset as compacted_and_batches
from sessionize.sinks.delta import DeltaSink
from sessionize.sinks.kafka import KafkaOutput, KafkaSink, is_kafka
from sessionize.sinks.parquet import ParquetSink
from sessionize.sinks.parquet_s3 import ManifestParquetSink, committed_dataset
from sessionize.sinks.postgres_uri import is_postgres

FORMATS = ("parquet", "delta")
WRITTEN = "a local path, file://, s3://, postgresql:// or kafka://"  # where outputs are written


def check_output(output: str, fmt: str | None = "parquet") -> None:
    """Before a job starts: `--output` is a place we write, with what writing it needs
    installed (`fmt` None: the place only).

    Raises:
        ConfigError: another scheme (`foo://`, `kafka://`), or `s3://` without the `s3`
            extra, in one line naming what is written.
        StateError: a local output whose move was cut short (sinks/tree_move.py).

    >>> check_output("out/")
    """
    if is_local(output):
        tree_move.refuse_if_moving(location_key(output))
        return
    if is_kafka(output):
        KafkaOutput.parse(output)
        if fmt is not None:
            if fmt != "parquet":
                raise ConfigError("--output kafka://: records are JSON; leave --output-format out")
            KafkaSink(output).check()  # the broker answers, with transactions if needed
        return
    if is_postgres(output):
        _check_postgres(output, fmt)
        return
    if not output.startswith("s3://"):
        scheme = output.split("://", 1)[0]
        raise ConfigError(
            f"--output {without_options(output)}: outputs are not written to {scheme}:// "
            f"URIs; give {WRITTEN}"
        )
    if fmt is not None and importlib.util.find_spec("boto3") is None:
        raise ConfigError(
            "--output s3://: outputs on s3:// need the s3 extra (conditional writes: the "
            "owner record, the lease, Parquet's commit files): pip install 'sessionize[s3]'"
        )


def check_open_sessions(wanted: bool, output: str, fmt: str) -> None:
    """Before a job starts: `--open-sessions` needs an output that replaces rows by user
    (the engine must feed it too: engines.choice, `check_replaced_by_key`).

    Raises:
        ConfigError: a Parquet output, in one line naming what to use.
    """
    if wanted:
        open_sink(output, fmt, open_sessions=True)


def record_place(output: str) -> str:
    """Where a batch job keeps its records and lease for `output`: the output itself, or a
    Kafka output's staging place (`?staging=DIR`, required there).

    Raises:
        ConfigError: a Kafka output that names no staging place.

    >>> record_place("kafka://broker:9092/web?staging=/data/web-staging")
    '/data/web-staging'
    """
    if is_kafka(output):
        return KafkaSink(output).root
    return output


def check_retractable(sink: Sink | None, batch_id: int, accept_hint: str) -> None:
    """Before removing batches >= batch_id: refuse when the output cannot retract them
    (Kafka), naming `accept_hint` (how the user accepts duplicates)."""
    if isinstance(sink, KafkaSink):
        sink.check_retractable(batch_id, accept_hint)


def accepting_duplicates(sink: Sink | None) -> Sink | None:
    """`sink` told that repeated records are accepted (only a Kafka output is asked)."""
    return sink.accepting_duplicates() if isinstance(sink, KafkaSink) else sink


def open_sink(
    output: str, fmt: str = "parquet", *, job: str = "sessionize",
    mapping: EventMapping | None = None, open_sessions: bool = False,
) -> Sink:  # fmt: skip
    """The sink for `--output` and `--output-format`; `job` names the writer in Delta logs,
    `mapping` decides the outputs' columns (Delta tables are created with them);
    `open_sessions` adds that output, replaced by user each batch.

    Raises:
        ConfigError: an output that cannot hold it, in one line naming one that can.
    """
    if is_kafka(output):
        return KafkaSink(output, job, mapping, open_sessions)
    if is_postgres(output):
        _check_postgres(output, fmt)
        return _postgres_sink()(output, mapping, open_sessions)
    if fmt == "delta":
        if "://" in output and not output.startswith(("s3://", "file://")):
            raise ConfigError(
                f"Delta outputs go to a local path or an s3:// URI, not {without_options(output)}"
            )

        return DeltaSink(output, job, mapping, open_sessions)
    if fmt != "parquet":
        raise ConfigError(f"unknown output format {fmt!r}: use one of {', '.join(FORMATS)}")
    if open_sessions:
        raise replaced.refuse(
            "a Parquet output cannot replace rows by user",
            "use --output-format delta, a postgresql:// or a kafka:// output",
        )
    if output.startswith("s3://"):
        return ManifestParquetSink(output)
    return ParquetSink(output)


def committed_rows(output: str, name: str) -> ds.Dataset | None:
    """Output `name` under `output` as its readers should see it, whatever format wrote it:
    a Delta table's current version, the committed batches of Parquet on s3:// (its commit
    files), PostgreSQL tables, or local Parquet's batch directories. None when the output
    is not there.

    Raises:
        ConfigError: a Kafka output (its records are read with a Kafka consumer)."""
    if is_kafka(output):
        raise ConfigError(
            f"{without_options(output)}: Kafka outputs are read with a Kafka consumer "
            "(isolation.level=read_committed), not by this command"
        )
    if is_postgres(output):
        table = _postgres_sink()(output).read(name)
        return None if table is None else ds.dataset(table)
    delta = DeltaSink(output, "reader").table(name)
    if delta is not None:
        return delta.to_pyarrow_dataset()
    try:
        if output.startswith("s3://"):
            data = committed_dataset(output, name)
            return data if data.files else None
        return local_committed(output, name)
    except (FileNotFoundError, pa.ArrowInvalid):
        return None


def local_committed(output: str, name: str) -> ds.Dataset | None:
    """Local Parquet: the batch directories and the compacted files (sinks/compaction.py),
    each row once."""
    fs, base = resolve_fs(output)
    return compacted_and_batches(fs, base, name)


def _check_postgres(output: str, fmt: str | None) -> None:
    """A PostgreSQL output is tables of its own: the file formats do not apply to it."""
    if fmt == "delta":
        raise ConfigError(
            f"--output {without_options(redact_uri(output))}: a PostgreSQL output is written "
            "as tables; leave --output-format out (Delta is for paths and s3://)"
        )
    _postgres_sink()  # refused now, in one line, when the extra is missing
    from sessionize.sinks.postgres import parse

    parse(output)  # the URI and its schema name, before anything is recorded


def _postgres_sink() -> type[Sink]:
    """The PostgreSQL sink class, imported when an output needs it (the postgres extra)."""
    try:
        from sessionize.sinks.postgres import PostgresSink
    except ModuleNotFoundError as exc:
        if (exc.name or "").split(".")[0] != "psycopg":
            raise
        raise ConfigError(
            "a PostgreSQL output needs the postgres extra: pip install 'sessionize[postgres]'"
        ) from None
    return PostgresSink
