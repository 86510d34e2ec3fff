"""The `store` engine running any `stateful.Processor`: the keyed core's `step` per
partition, state in our versioned store.

A batch is one state version and one Spark job, as for sessions (engines/store.py): Spark
shuffles the input rows by the processor's key into `partitions` partitions, with the batch
marks from which every task derives the batch's watermark (engines/batch_marks.py); every
partition task (all N run, also without rows, so that timers fire everywhere and every
partition reaches the new version) opens its state at version V-1, reads the store keys of
its rows and of the keys whose timer is below the watermark, calls `step`
(stateful/step.py), stages its rows of every output and commits version V. The batch runner
(engines/runner.py) then publishes the outputs and writes the batch record to the store's
job log: the same order, lease, fence and exactly-once argument as the session engine's.
"""

from __future__ import annotations

import base64
import functools
import json
from collections.abc import Iterator
from dataclasses import dataclass

import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import types as T
from typing_extensions import override

from sessionize.config import format_duration, format_instant
from sessionize.engines.batch_marks import split_marks, with_marks
from sessionize.engines.placement import partition_users
from sessionize.engines.runner import RETAIN, BatchRequest, BatchResult
from sessionize.engines.store import BatchBasis, BatchPlan, StoreJobEngine, collect_partitions
from sessionize.errors import ConfigError
from sessionize.faults import pause_point
from sessionize.sinks.base import StagedSink
from sessionize.sinks.delta_keyed import KeyedDeltaSink
from sessionize.sinks.parquet import ParquetSink
from sessionize.sinks.parquet_s3 import ManifestParquetSink
from sessionize.state import EMPTY_VERSION, RowSpec, StateBackend, open_backend
from sessionize.state.lease import Lease
from sessionize.stateful.declared import declared
from sessionize.stateful.invalid import INVALID_OUTPUT, INVALID_SCHEMA, split_invalid
from sessionize.stateful.keys import store_keys
from sessionize.stateful.processor import Processor
from sessionize.stateful.step import step

# What every partition task reports: the core's counts, the store's, the batch marks'.
CORE_COUNTS = ("rows", "invalid", "late", "keys", "due", "state_rows_read",
               "state_rows_written", "state_keys_removed")  # fmt: skip
# Summed over the life of a job besides the processor's own counters.
KEYED_TOTALS = ("records", "invalid", "events_in", "late")
_TASK_FIELDS = ("partition", *CORE_COUNTS, "records", "latest")
# What a task returns: its counts, and the processor's counters as one JSON text. A Spark
# type, not DDL text: Spark would parse the text in the JVM for every batch's job.
_TASK_ARROW = pa.schema([*((k, pa.int64()) for k in _TASK_FIELDS), ("counters", pa.string())])
_TASK_SCHEMA = T.StructType(
    [*(T.StructField(k, T.LongType()) for k in _TASK_FIELDS),
     T.StructField("counters", T.StringType())]
)  # fmt: skip


@dataclass(frozen=True)
class KeyedSettings:
    """Everything a partition task needs; pickled into every task."""

    processor: Processor
    input_schema: pa.Schema  # the input's Arrow columns without the invalid marks
    partitions: int
    state_uri: str
    job: str
    output: str
    lateness_us: int = 0
    retain: int = RETAIN
    maintenance_every: int = 10
    epoch: int | None = None  # the driver's lease epoch (state/lease.py); None: unfenced
    output_format: str = "parquet"

    @property
    def processor_outputs(self) -> tuple[str, ...]:
        """The processor's outputs: the declared ones and the late output (what its
        checkpoint records: `invalid` is every job's)."""
        d = declared(self.processor)
        late = (d.late_output,) if d.late_output and d.late_output not in d.outputs else ()
        return (*d.outputs, *late)

    @property
    def output_names(self) -> tuple[str, ...]:
        """Every output a batch publishes: the processor's and the invalid rows
        (stateful/invalid.py)."""
        return with_invalid(self.processor_outputs)


def with_invalid(outputs: tuple[str, ...]) -> tuple[str, ...]:
    """A processor job's outputs as published: `outputs` and the invalid rows."""
    return outputs if INVALID_OUTPUT in outputs else (*outputs, INVALID_OUTPUT)


def keyed_sink(
    output: str, names: tuple[str, ...], output_format: str = "parquet", job: str = ""
) -> StagedSink:
    """The sink of a processor's outputs: Parquet at a local path (one directory per output
    and batch) or on `s3://` (commit files per batch), or Delta tables at either (see
    `settings_sink` for the Delta sink of a job). Raises ConfigError for another format or
    place, in one line."""
    local = "://" not in output or output.startswith("file://")
    if output_format not in ("parquet", "delta") or not (local or output.startswith("s3://")):
        raise ConfigError(
            f"stateful jobs write parquet or delta to a local path or s3://, not {output_format} "
            f"at {output}"
        )
    if output_format == "delta":
        return KeyedDeltaSink(output, job, schemas=tuple((name, None) for name in names))
    return ParquetSink(output, names) if local else ManifestParquetSink(output, names)


def settings_sink(settings: KeyedSettings) -> StagedSink:
    """The sink of the job's outputs; a Delta sink knows every output's schema (its table is
    created from it) and the key of the outputs replaced by key."""
    if settings.output_format != "delta":
        return keyed_sink(settings.output, settings.output_names, settings.output_format,
                          settings.job)  # fmt: skip
    d = declared(settings.processor)
    schemas = {name: out.schema for name, out in d.outputs.items()}
    if d.late_output and d.late_output not in schemas:
        schemas[d.late_output] = d.late_schema(settings.input_schema)
    schemas[INVALID_OUTPUT] = INVALID_SCHEMA
    keys = tuple((name, out.key) for name, out in d.outputs.items() if out.mode == "replace")
    return KeyedDeltaSink(settings.output, settings.job, schemas=tuple(schemas.items()),
                          keys=keys)  # fmt: skip


def open_keyed_state(settings: KeyedSettings) -> StateBackend:
    return open_backend(settings.state_uri, declared(settings.processor).rows)


def settings_record(settings: KeyedSettings) -> dict[str, object]:
    """What a checkpoint of this job is bound to: a restart with other values is refused."""
    d = declared(settings.processor)
    return {
        "processor": d.name,
        "key": d.key,
        "event_time": d.event_time,
        "state_schema": ", ".join(f"{f.name} {f.type}" for f in d.state_schema),
        "params": settings.processor.params(),
        "partitions": settings.partitions,
        "lateness": format_duration(settings.lateness_us),
        "output_format": settings.output_format,
        # The store's rows, for the state tools, which have the settings but not the class.
        "stored_rows": {
            "schema": base64.b64encode(d.rows.schema.serialize().to_pybytes()).decode(),
            "key": d.rows.key, "expiry": d.rows.expiry,
        },  # fmt: skip
    }


def recorded_rows(settings: dict) -> RowSpec:
    """The store's rows of a stateful job, from its recorded settings (`settings_record`)."""
    rows = settings["stored_rows"]
    schema = pa.ipc.read_schema(pa.py_buffer(base64.b64decode(rows["schema"])))
    return RowSpec(schema, key=rows["key"], expiry=rows["expiry"])


def _task(settings: KeyedSettings, basis: BatchBasis, batches: Iterator[pa.RecordBatch]):
    from pyspark import TaskContext

    partition = TaskContext.get().partitionId()
    received = list(batches)
    rows, records, latest = split_marks(pa.Table.from_batches(received) if received else None)
    counts = run_partition(settings, basis.plan(latest), partition, rows)
    yield _counts_batch(settings, {**counts, "records": records, "latest": latest})


def _missing_task(settings: KeyedSettings, plan: BatchPlan, batches: Iterator[pa.RecordBatch]):
    """Run the partitions named in `batches` (column `p`) with no rows."""
    for batch in batches:
        for partition in batch.column("p").to_pylist():
            yield _counts_batch(settings, run_partition(settings, plan, partition, None))


def _counts_batch(settings: KeyedSettings, counts: dict) -> pa.RecordBatch:
    """A partition's counts as the one row its task returns; the processor's counters go
    as one JSON text (their names are the processor's)."""
    columns = {k: [counts.get(k, None if k == "latest" else 0)] for k in _TASK_FIELDS}
    columns["counters"] = [json.dumps(counts.get("counters", {}))]
    return pa.RecordBatch.from_pydict(columns, schema=_TASK_ARROW)


def _missing_task_at(settings: KeyedSettings, basis: BatchBasis, latest: int | None):
    return functools.partial(_missing_task, settings, basis.plan(latest))


def run_partition(
    settings: KeyedSettings, plan: BatchPlan, partition: int, rows: pa.Table | None
) -> dict:
    """One partition's batch: set the invalid rows aside, read, `step`, stage the outputs,
    commit version V."""
    d = declared(settings.processor)
    if rows is None:
        rows = settings.input_schema.empty_table()
    rows, invalid = split_invalid(rows, d.key, d.event_time)
    backend = open_keyed_state(settings)
    store = backend.open(settings.job, partition, plan.previous, epoch=settings.epoch)
    try:
        keys = store_keys(rows.column(d.key)).unique()
        if d.event_time is not None and plan.watermark_after is not None:
            due = pa.array(store.expiring(plan.watermark_after), pa.int64())
            keys = pa.concat_arrays([keys, due]).unique()
        state = store.get_many(keys)
        result = step(
            settings.processor, state, rows, batch_id=plan.version, partition=partition,
            watermark_before=plan.watermark_before, watermark_after=plan.watermark_after,
        )  # fmt: skip
        sink = settings_sink(settings)
        for name, table in {**result.outputs, INVALID_OUTPUT: invalid}.items():
            sink.write_part(name, plan.version, partition, table)
            if d.outputs.get(name) is not None and d.outputs[name].mode == "replace":
                _stage_keys(sink, name, d.outputs[name].key, plan.version, partition, table,
                            result.deletes.get(name))  # fmt: skip
        store.remove_many(result.removes)
        store.put_many(result.puts)
        if partition == 0:
            pause_point("before-state-commit", plan.version)
        store.commit(plan.version, dict(store.meta))
        if partition == 0:
            pause_point("after-state-commit", plan.version)
    except BaseException:
        store.abort()
        raise
    if plan.version % settings.maintenance_every == 0:
        backend.maintenance(settings.job, partition, settings.retain)
    counts = {**result.counts, "invalid": invalid.num_rows}
    return {"partition": partition, **counts, "counters": result.counters}


def _stage_keys(sink, name: str, key: tuple[str, ...], version: int, partition: int,
                rows: pa.Table, deletes: pa.Table | None) -> None:  # fmt: skip
    """The keys a task wrote or deleted in an output replaced by key: publishing replaces
    their rows by the batch's."""
    keys = rows.select(list(key))
    if deletes is not None:
        keys = pa.concat_tables([keys, deletes.select(list(key)).cast(keys.schema)])
    sink.write_keys(name, version, partition, keys)


class KeyedEngine(StoreJobEngine):
    """Driver side: the watermark, the partition tasks, the job log."""

    invalid_output = INVALID_OUTPUT

    def __init__(
        self,
        spark: SparkSession,
        settings: KeyedSettings,
        backend: StateBackend | None = None,
        lease: Lease | None = None,
    ):
        self.spark = spark
        self.settings = settings
        self.backend = backend or open_keyed_state(settings)
        self.sink = settings_sink(settings)
        self.lease = lease

    @override
    def _open_backend(self) -> StateBackend:
        return open_keyed_state(self.settings)

    @override
    def run(self, raw: DataFrame, request: BatchRequest, previous: dict) -> BatchResult:
        self._fence_once()
        basis = BatchBasis(
            request.version,
            EMPTY_VERSION if request.first else request.previous,
            previous.get("watermark"),
            previous.get("max_event_time"),
            request.end_watermark,
            self.settings.lateness_us,
        )
        counts, records, latest = self._run_partitions(raw, basis)
        batch = {k: sum(c[k] for c in counts) for k in CORE_COUNTS}
        batch |= {"records": records, "events_in": batch["rows"]}
        mine: dict[str, int] = {}
        for c in counts:
            for name, value in c["counters"].items():
                mine[name] = mine.get(name, 0) + value
        batch["counters"] = mine
        fields = {"previous": basis.previous, "max_event_time": basis.latest_event(latest)}
        return BatchResult(batch, basis.plan(latest).watermark_after, fields)

    @override
    def settings_entry(self) -> dict:
        return settings_record(self.settings)

    def _run_partitions(
        self, raw: DataFrame, basis: BatchBasis
    ) -> tuple[list[dict], int, int | None]:
        d = declared(self.settings.processor)
        task = functools.partial(_task, self.settings, basis)
        marked = with_marks(raw, self._mark_keys(raw.sparkSession), d.key, d.event_time)
        counts, records, latest = collect_partitions(
            partition_users(marked, self.settings.partitions, d.key),
            task, functools.partial(_missing_task_at, self.settings, basis), _TASK_SCHEMA,
            self.settings.partitions,
        )  # fmt: skip
        for c in counts:
            c["counters"] = json.loads(c["counters"])
        return counts, records, latest

    @override
    def _key_type(self) -> pa.DataType:
        return declared(self.settings.processor).key_type

    @override
    def totals(self, before: dict, counters: dict) -> dict:
        totals = {k: before.get(k, 0) + counters[k] for k in KEYED_TOTALS}
        mine = dict(before.get("counters", {}))
        for name, value in counters["counters"].items():
            mine[name] = mine.get(name, 0) + value
        return {**totals, "counters": mine}

    @override
    def progress_line(self, label: str, record: dict) -> str:
        b = record["batch"]
        mine = "".join(f", {name} {value:,}" for name, value in sorted(b["counters"].items()))
        return (
            f"{label}: {b['rows']:,} rows in, {b['invalid']:,} invalid, {b['late']:,} late, "
            f"{b['keys']:,} keys, "
            f"{b['due']:,} timers fired{mine}, "
            f"watermark {format_instant(record['watermark']) or 'none'}, "
            f"{record['duration_s']:.1f}s"
        )
