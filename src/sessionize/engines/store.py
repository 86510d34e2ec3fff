"""The `store` engine: the session logic per partition, state in our versioned store.

Each micro-batch (or hour, in batch mode) is one state version and one Spark job: Spark
shuffles the parsed events by `user_id` into `partitions` partitions, together with the
batch marks from which every partition task derives the batch's watermark
(engines/batch_marks.py), and every partition task (the N tasks always run, also with no
events, so that sessions of idle users expire and every partition reaches the new version):

  0. adds up the marks: the batch's lines and latest event time, hence its watermark,
  1. opens its state at version V-1 (a worker-side cache usually makes this free),
  2. reads the rows of the users with new events and of the users due to expire,
  3. runs `logic.advance` over them, vectorized,
  4. stages its rows of the four outputs under `_staging` (deterministic file names),
  5. commits state version V for its partition (idempotent: a rerun overwrites V).

Then the batch runner (engines/runner.py) publishes the staged outputs, writes the job
record of version V (watermark, totals; the job's settings are one entry of their own) to
the store's job log, and returns to Spark, which writes its commit log entry for the batch.

A crash before that makes Spark re-execute batch V with the same input (its offsets log
fixed it); the rerun loads V-1 again, restages, republishes over the old batch directory
and overwrites version V, so the final output equals an uninterrupted run. Versions after
V-1 left by an interrupted attempt are never read: version V is only loaded once its
job record exists, and it is rewritten before that.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import types as T
from typing_extensions import override

from sessionize.config import SessionRules, format_duration
from sessionize.engines.batch_marks import mark_keys, parse_marked, split_marks
from sessionize.engines.placement import partition_users
from sessionize.engines.runner import RETAIN, RETAIN_CONF, BatchRequest, BatchResult, Engine, Parser
from sessionize.engines.session_report import SUMMED, session_line
from sessionize.errors import StateError
from sessionize.faults import pause_point
from sessionize.logic.processor import COUNTERS, DROPPED, GAUGES, SessionProcessor
from sessionize.mapping import EventMapping
from sessionize.parsing import event_columns, parse
from sessionize.schema import INVALID_EVENTS, STATE_EXPIRY, Layout, layout
from sessionize.sinks.registry import open_sink
from sessionize.sinks.replaced import OPEN_SESSIONS, stage_batch
from sessionize.state import EMPTY_VERSION, RowSpec, StateBackend, layout_rows, open_backend
from sessionize.state.lease import Lease
from sessionize.stateful.step import StepResult, step

# Counters every partition task reports back to the driver: the engine's, the session
# processor's (logic/processor.py) and the store's.
TASK_COUNTERS = (
    "partition", "invalid", "events_in", "late", DROPPED, *COUNTERS,
    "state_rows_loaded", "state_rows_written", "state_round_trips",
    "state_bytes_read", "state_bytes_written", "state_load_us", "state_commit_us",
)  # fmt: skip
# The sessions and users open: the processor counts their changes, the store's meta keeps
# their running sum per partition. Its other counters a task reports as they are.
STEP_COUNTERS = tuple(c for c in COUNTERS if c not in GAUGES)
# Besides its counters, every task reports what the batch marks told it (the same in all).
TASK_FIELDS = (*TASK_COUNTERS, "records", "latest")
# A type, not DDL text: Spark would parse the text in the JVM for every batch's job.
_TASK_SCHEMA = T.StructType([T.StructField(c, T.LongType()) for c in TASK_FIELDS])
ADAPTIVE_CONF = "spark.sql.adaptive.enabled"
EVERY_KEY_US = 253_402_300_799_999_999  # 9999-12-31: every state row expires before


@dataclass(frozen=True)
class EngineSettings:
    """Everything a partition task needs; pickled into every task."""

    rules: SessionRules
    partitions: int
    state_uri: str
    job: str
    output: str
    # Events more than this ahead of the batch's time are invalid (None: no limit). A rule
    # on input, not part of the state: not in settings_record.
    max_future_us: int | None = None
    retain: int = RETAIN  # versions kept restorable (and Spark's batches: query_confs)
    maintenance_every: int = 10  # versions between retention clean-ups
    output_format: str = "parquet"  # parquet | delta (sinks.base.open_sink)
    # The driver's lease epoch: the store rejects this run's commits once a newer driver
    # has fenced the job (state/lease.py). None: unfenced.
    epoch: int | None = None
    mapping: EventMapping = EventMapping()  # where the fields are; part of the state
    open_sessions: bool = False  # also the `open_sessions` output, replaced by user

    @property
    def layout(self) -> Layout:
        return layout(self.mapping)

    @property
    def processor(self) -> SessionProcessor:
        """The session logic as the keyed core runs it."""
        return SessionProcessor(self.rules, self.layout, self.open_sessions)

    def row_spec(self) -> RowSpec | None:
        """What the store's rows are (None: the default, schema.STATE)."""
        spec = layout_rows(self.layout)
        return None if spec.is_default else spec


def open_state(settings: EngineSettings) -> StateBackend:
    return open_backend(settings.state_uri, settings.row_spec())


def fence_store(backend: StateBackend, settings: EngineSettings, lease: Lease) -> EngineSettings:
    """Raise the store's fence to this driver's lease epoch, before it opens any state, so
    that the store itself rejects every later commit of the drivers before it; the settings
    the tasks then carry (with the epoch)."""
    fence = backend.fence(settings.job)
    epoch = lease.epoch if fence < lease.epoch else lease.acquire_above(fence)
    backend.raise_fence(settings.job, epoch, settings.partitions)
    return replace(settings, epoch=epoch)


@dataclass(frozen=True)
class BatchPlan:
    version: int
    previous: int  # the version this one builds on (-1: the empty state)
    watermark_before: int | None
    watermark_after: int | None
    # Hand every user of the state to the logic, so that the batch republishes the whole
    # `open_sessions` output (it is behind the state: new, or emptied by a removal).
    refresh: bool = False


@dataclass(frozen=True)
class BatchBasis:
    """What the driver knows of a batch before its job: the plan, but for the batch's own
    latest event time, which the partition tasks learn from the batch marks."""

    version: int
    previous: int
    watermark_before: int | None
    max_event_before: int | None  # latest valid event time of the batches before
    end_watermark: int | None  # batch mode: the watermark is the end of the hour
    lateness_us: int
    refresh: bool = False  # BatchPlan.refresh

    def latest_event(self, latest: int | None) -> int | None:
        """The latest valid event time so far, given the batch's own."""
        return _max(self.max_event_before, latest)

    def plan(self, latest: int | None) -> BatchPlan:
        """Stream batches advance the watermark from the events (`max - lateness`), batch
        mode fixes it at the end of the hour; it never goes back."""
        max_event = self.latest_event(latest)
        if self.end_watermark is not None:
            after = self.end_watermark
        elif max_event is None:
            after = self.watermark_before
        else:
            after = max_event - self.lateness_us
        after = _max(self.watermark_before, after)
        return BatchPlan(self.version, self.previous, self.watermark_before, after, self.refresh)


def _task(settings: EngineSettings, basis: BatchBasis, batches: Iterator[pa.RecordBatch]):
    from pyspark import TaskContext

    partition = TaskContext.get().partitionId()
    received = list(batches)
    rows, records, latest = split_marks(pa.Table.from_batches(received) if received else None)
    counts = run_partition(settings, basis.plan(latest), partition, rows)
    yield _counts_batch({**counts, "records": records, "latest": latest})


def _counts_batch(counts: dict[str, int | None]) -> pa.RecordBatch:
    """A partition's counters as the one row its task returns (a task that had no marks
    saw no lines and no latest event time)."""
    return pa.RecordBatch.from_pydict(
        {k: [counts.get(k, None if k == "latest" else 0)] for k in TASK_FIELDS},
        schema=pa.schema([(k, pa.int64()) for k in TASK_FIELDS]),
    )


def _missing_task(settings: EngineSettings, plan: BatchPlan, batches: Iterator[pa.RecordBatch]):
    """Run the partitions named in `batches` (column `p`) with no events."""
    for batch in batches:
        for partition in batch.column("p").to_pylist():
            yield _counts_batch(run_partition(settings, plan, partition, None))


def _missing_task_at(settings: EngineSettings, basis: BatchBasis, latest: int | None):
    return functools.partial(_missing_task, settings, basis.plan(latest))


def run_partition(
    settings: EngineSettings, plan: BatchPlan, partition: int, rows: pa.Table | None = None
) -> dict[str, int]:
    """Steps 1-5 of the module doc for one partition; returns the task counters."""
    lay = settings.layout
    valid, invalid = _split_parsed(rows, settings.mapping)
    backend = open_state(settings)
    store = backend.open(settings.job, partition, plan.previous, epoch=settings.epoch)
    try:
        keys = pc.unique(valid[lay.state_key])
        upto = EVERY_KEY_US if plan.refresh else plan.watermark_after
        if upto is not None:
            keys = pc.unique(pa.concat_arrays([keys, store.expiring(upto)]))
        result = step(
            settings.processor, store.get_many(keys), valid, batch_id=plan.version,
            partition=partition, watermark_before=plan.watermark_before,
            watermark_after=plan.watermark_after, every_key=plan.refresh,
        )  # fmt: skip
        sink = open_sink(
            settings.output, settings.output_format, job=settings.job, mapping=settings.mapping,
            open_sessions=settings.open_sessions,
        )
        if settings.open_sessions:
            stage_batch(sink, OPEN_SESSIONS, plan.version, partition, _touched(result, lay),
                        result.outputs[OPEN_SESSIONS])  # fmt: skip
        for name in ("sessions", "page_views", "late_events"):
            sink.write_part(name, plan.version, partition, result.outputs[name])
        sink.write_part("invalid_events", plan.version, partition, invalid)
        counters = result.counters
        meta = dict(store.meta)
        for gauge in GAUGES:
            meta[gauge] = meta.get(gauge, 0) + counters.get(gauge, 0)
        store.remove_many(result.removes)
        store.put_many(result.puts)
        if partition == 0:
            pause_point("before-state-commit", plan.version)
        store.commit(plan.version, meta)
        if partition == 0:
            pause_point("after-state-commit", plan.version)
    except BaseException:
        store.abort()
        raise
    if plan.version % settings.maintenance_every == 0:
        backend.maintenance(settings.job, partition, settings.retain)
    m = store.metrics()
    counts = result.counts
    return {
        "partition": partition,
        "invalid": invalid.num_rows,
        "events_in": counts["rows"],
        "late": counts["late"],
        DROPPED: counts["dropped"],
        **{k: counters.get(k, 0) for k in STEP_COUNTERS},
        **{gauge: meta[gauge] for gauge in GAUGES},
        "state_rows_loaded": m.rows_loaded,
        "state_rows_written": m.rows_written,
        "state_round_trips": m.round_trips,
        "state_bytes_read": m.bytes_read,
        "state_bytes_written": m.bytes_written,
        "state_load_us": int(m.load_ms * 1000),
        "state_commit_us": int(m.commit_ms * 1000),
    }


def _touched(result: StepResult, lay: Layout) -> pa.Array:
    """The users whose `open_sessions` rows the batch replaces: every user handed in."""
    keys = result.deletes.get(OPEN_SESSIONS)
    if keys is None:
        return pa.array([], lay.user_type)
    return keys["user_id"].combine_chunks().cast(lay.user_type)


def _split_parsed(rows: pa.Table | None, mapping: EventMapping) -> tuple[pa.Table, pa.Table]:
    """Parsed rows from Spark -> (valid events as the layout's event schema, plus
    `user_key` with string ids; invalid lines)."""
    lay = layout(mapping)
    names = event_columns(mapping)
    target = lay.stored.remove(lay.stored.get_field_index(STATE_EXPIRY))
    if rows is None or rows.num_rows == 0:
        return target.empty_table(), INVALID_EVENTS.empty_table()
    bad = pc.is_valid(rows["reason"])
    valid = rows.filter(pc.invert(bad)).select(names)
    invalid = rows.filter(bad).select([f.name for f in INVALID_EVENTS])
    return valid.cast(target), invalid.cast(INVALID_EVENTS)


def collect_partitions(
    partitioned: DataFrame,
    task: Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]],
    missing_task: Callable[[int | None], Callable[[Iterator[pa.RecordBatch]], Iterator]],
    schema: T.StructType,
    partitions: int,
) -> tuple[list[dict], int, int | None]:
    """Run `task` on every partition of `partitioned` (each returns one row of counters);
    returns the rows, the batch's lines and its latest event time (from the marks every
    task adds up). `missing_task(latest)` runs the partitions no row came to."""
    counts = [r.asDict() for r in partitioned.mapInArrow(task, schema).collect()]
    seen = {(c["records"], c["latest"]) for c in counts}
    if len(seen) > 1:  # every task adds up the same marks
        raise RuntimeError(f"partition tasks disagree on the batch's size: {sorted(seen)}")
    records, latest = seen.pop() if seen else (0, None)
    # Spark skips the tasks of an empty input (e.g. an hour with no files); those
    # partitions still have state to expire and a version to commit. DataFrames only (no
    # SparkContext), so that it runs over Spark Connect too.
    missing = sorted(set(range(partitions)) - {c["partition"] for c in counts})
    if missing:
        ids = partitioned.sparkSession.createDataFrame(pa.table({"p": pa.array(missing)}))
        rows = ids.repartition(len(missing)).mapInArrow(missing_task(latest), schema).collect()
        counts += [r.asDict() for r in rows]
    return counts, records, latest


class StoreJobEngine(Engine):
    """The driver side every job on our state store shares: the fence, the job log of
    versions in the store, the query's settings. Subclasses set `spark`, `settings` (with
    `job`, `partitions`, `retain`, `maintenance_every`, `epoch`), `backend` and `lease`,
    and say how a backend is opened from the settings."""

    settings: EngineSettings
    backend: StateBackend
    lease: Lease | None
    _marks: pa.Array | None = None
    _settings_stored = False  # this driver has stored the job's settings entry

    def _open_backend(self) -> StateBackend:
        raise NotImplementedError

    def settings_entry(self) -> dict:
        """The job's settings as the store keeps them, once per job: what a restart compares."""
        return settings_record(self.settings)

    def _key_type(self) -> pa.DataType:
        """The Arrow type of the job's key (the batch marks carry keys of it)."""
        raise NotImplementedError

    def _mark_keys(self, spark: SparkSession) -> pa.Array:
        """The batch marks' keys, found once per engine (a small Spark job)."""
        if self._marks is None:
            self._marks = mark_keys(spark, self.settings.partitions, self._key_type())
        return self._marks

    def _fence_once(self) -> None:
        """Fence the store before this driver's first batch opens any state. Not earlier:
        on a new query Spark checks that its state directory, where a `files` store may
        live (CHECKPOINT/state), is empty when batch 0 starts."""
        if self.lease is not None and self.settings.epoch is None:
            self.settings = fence_store(self.backend, self.settings, self.lease)

    @override
    def query_confs(self) -> dict[str, str]:
        # Adaptive execution runs the shuffle of the partition job as a job of its own and
        # re-plans between them, a fixed cost per micro-batch; it has nothing to adapt in an
        # explicit `repartition(N, key)`, whose N tasks must all run anyway.
        return {RETAIN_CONF: str(self.settings.retain), ADAPTIVE_CONF: "false"}

    @override
    def previous_record(self, request: BatchRequest) -> dict:
        if request.first:
            return {}
        record = self.backend.read_job_record(self.settings.job, request.previous)
        if record is None:
            raise StateError(
                f"state {self.backend} has no commit for version {request.previous} of job "
                f"'{self.settings.job}', but version {request.version} is being run: the "
                "checkpoint and the state store disagree (was the state moved or deleted?)"
            )
        return record

    def __getstate__(self) -> dict:
        # Over Spark Connect the engine runs inside foreachBatch on the server: the client's
        # session stays behind and the backend's connections are opened there anew.
        return {**self.__dict__, "spark": None, "backend": None}

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self.backend = self._open_backend()

    @override
    def write_record(self, version: int, record: dict) -> None:
        job, epoch = self.settings.job, self.settings.epoch
        if not self._settings_stored:  # before the first record: none is without them
            if self.backend.read_job_settings(job) != (entry := self.settings_entry()):
                self.backend.write_job_settings(job, entry, epoch=epoch)
            self._settings_stored = True
        self.backend.write_job_record(job, version, record, epoch=epoch)

    @override
    def after_commit(self, version: int) -> None:
        if version % self.settings.maintenance_every == 0:
            self.backend.trim_job_records(self.settings.job, self.settings.retain)


class StoreEngine(StoreJobEngine):
    """Driver side of the `store` engine: the watermark, the partition tasks, the job log."""

    summed = SUMMED

    def __init__(
        self,
        spark: SparkSession,
        settings: EngineSettings,
        backend: StateBackend | None = None,
        parser: Parser = parse,
        lease: Lease | None = None,
    ):
        self.spark = spark
        self.settings = settings
        self.parser = parser  # raw records -> events and invalid rows (JSON lines by default)
        self.backend = backend or open_state(settings)
        self.sink = open_sink(
            settings.output, settings.output_format, job=settings.job, mapping=settings.mapping,
            open_sessions=settings.open_sessions,
        )
        self.lease = lease  # None: unfenced

    @override
    def _open_backend(self) -> StateBackend:
        return open_state(self.settings)

    @override
    def run(self, raw: DataFrame, request: BatchRequest, previous: dict) -> BatchResult:
        """Steps 0-5 of the module doc on every partition, in one Spark job.

        Events further than `max_future_us` ahead of the batch's time (`request.now_us`)
        are invalid.
        """
        self._fence_once()
        # An int `now`: the reading tasks judge `max_future_us` themselves. A valid event's
        # `source` (its file and line) is never read: it stays behind rather than crossing
        # back from the reading task and then the shuffle, a file path on every line.
        parsed = parse_marked(self.parser, raw, self._mark_keys(raw.sparkSession),
                              now=request.now_us, max_future_us=self.settings.max_future_us,
                              valid_sources=False)  # fmt: skip
        basis = BatchBasis(
            request.version,
            EMPTY_VERSION if request.first else request.previous,
            previous.get("watermark"),
            previous.get("max_event_time"),
            request.end_watermark,
            self.settings.rules.lateness_us,
            self._refresh(request),
        )
        counts, records, latest = self._run_partitions(parsed, basis)
        batch = {k: sum(c[k] for c in counts) for k in TASK_COUNTERS if k != "partition"}
        batch["records"] = records
        fields = {"previous": basis.previous, "max_event_time": basis.latest_event(latest)}
        return BatchResult(batch, basis.plan(latest).watermark_after, fields)

    def _refresh(self, request: BatchRequest) -> bool:
        """Whether `open_sessions` is behind the state this batch builds on (turned on
        for a running job, emptied by a removal of batches, or a batch of it published
        before a crash): then the batch hands every user to the logic, once."""
        if not self.settings.open_sessions or request.first:
            return False
        return self.sink.replaced_as_of(OPEN_SESSIONS) not in (request.previous,
                                                               request.version)  # fmt: skip

    def _run_partitions(
        self, parsed: DataFrame, basis: BatchBasis
    ) -> tuple[list[dict], int, int | None]:
        """The partition job; returns the tasks' counters, the batch's lines and its latest
        valid event time."""
        task = functools.partial(_task, self.settings, basis)
        missing = functools.partial(_missing_task_at, self.settings, basis)
        return collect_partitions(
            partition_users(parsed, self.settings.partitions),
            task, missing, _TASK_SCHEMA, self.settings.partitions,
        )  # fmt: skip

    @override
    def progress_line(self, label: str, record: dict) -> str:
        return session_line(label, record)

    @override
    def _key_type(self) -> pa.DataType:
        return self.settings.layout.user_type


def settings_record(settings: EngineSettings) -> dict:
    """The settings that are part of the state, as flags spell them: the job's settings."""
    return state_settings(settings.rules, settings.partitions, settings.mapping)


def state_settings(rules: SessionRules, partitions: int, mapping: EventMapping) -> dict:
    """The session settings that are part of the state, as flags spell them: the one
    definition the store's settings entry and the checkpoint's record (api/recorded.py)
    share."""
    return {
        "gap": format_duration(rules.gap_us),
        "lateness": format_duration(rules.lateness_us),
        "close_actions": ",".join(rules.close_actions),
        **rules.record(),
        "partitions": partitions,
        **mapping.record(),
    }


def _max(a: int | None, b: int | None) -> int | None:
    return b if a is None else a if b is None else max(a, b)
