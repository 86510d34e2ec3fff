"""One batch runner for both engines and both modes: plan, run, commit, report.

A batch is a micro-batch of the stream (version = Spark's batch id) or an hour of batch
mode (version = the hour as YYYYMMDDHH). Whatever the engine, a batch goes through the
same steps, in this order, which is what makes the outputs exactly once:

  1. plan: read the record of the batch it builds on (`Engine.previous_record`);
  2. run: drop what an earlier attempt of this batch staged, then the engine's tasks stage
     their rows of the four outputs and commit the batch's state (our store: version V per
     partition; Spark's state store: Spark commits it when the operator's tasks end);
  3. publish the staged outputs of the batch (sink); before the job's first publish its
     owner is recorded with the output (`claim`, sinks/claim.py);
  4. write the batch record (the engine's record log: our store's job log, or the
     checkpoint's `sessionize-batches/`);

  (before 3 and before 4 the driver checks that it still holds its lease, state/lease.py)
  5. return; in a stream Spark then writes its commit log entry for the batch.

A crash anywhere before 5 makes Spark (or the user, in batch mode) run the same batch again
on the same input and the same previous state: the rerun restages, republishes over the
batch's directories and rewrites its state version and record, so the outputs equal an
uninterrupted run. The engines document what "the same previous state" means for them.
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, MutableSequence
from dataclasses import dataclass, field
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.streaming import StreamingQuery

from sessionize.config import retained_batches
from sessionize.engines.progress import ProgressLog
from sessionize.engines.spark_logs import COMPACT_CONF, STREAM_CONFS
from sessionize.engines.warnings import LATE_SHARE, batch_warnings, mapping_warnings
from sessionize.errors import SessionizeError, raised_in_task
from sessionize.faults import pause_point
from sessionize.sinks.base import Sink
from sessionize.state.lease import Lease

# Raw records -> events and invalid rows (parsing.parse, columns.parse_columns): called
# with the batch's `now` (µs since the epoch, or a timestamp column) and `max_future_us` as
# keywords, `valid_sources=False` where only invalid rows' `source` is read, and `marks`
# (the batch marks' keys, engines/batch_marks.py) where the store engine wants them: a
# parser that makes them returns their columns, one that does not returns none.
Parser = Callable[..., DataFrame]

# What every engine counts of a batch and sums over the life of a job (every record's
# `totals`): the lines read, of which invalid, the valid events in, of which late. The
# processor's counters come on top, as its engine sums them (`Engine.totals`).
ENGINE_TOTALS = ("records", "invalid", "events_in", "late")

# Batches kept restorable, for rewinding: Spark's offset, commit and state logs
# (`spark.sql.streaming.minBatchesToRetain`) and our state store's versions and job records
# keep the same number, so every batch `history` lists can be restored.
RETAIN = retained_batches()  # SESSIONIZE_RETAIN_BATCHES, default 100
RETAIN_CONF = "spark.sql.streaming.minBatchesToRetain"


@dataclass(frozen=True)
class BatchRequest:
    """Which batch to run and what it builds on.

    `previous` is the version this one continues (stream: version - 1; batch mode: the hour
    before); `first` starts from the empty state instead. `end_watermark` (µs) fixes the
    watermark after the batch (batch mode: the end of the hour); None lets the events move it.
    """

    version: int
    previous: int
    first: bool = False
    end_watermark: int | None = None
    now_us: int | None = None  # the batch's time, the same on every attempt (--max-future)
    last: bool = False  # the run's last batch, known in advance (batch mode's last hour)


@dataclass
class BatchResult:
    """What an engine's run of one batch produced, before publishing."""

    counters: dict[str, int]
    watermark: int | None
    fields: dict[str, object] = field(default_factory=dict)  # engine-specific record fields
    seen: dict[str, int] = field(default_factory=dict)  # what the job counts of its input


class Engine(ABC):
    """What the runner needs from an engine: its sink, its record log and step 2."""

    sink: Sink

    @property
    def invalid_output(self) -> str:
        """The output of the input's invalid records."""
        return "invalid_events"

    @abstractmethod
    def previous_record(self, request: BatchRequest) -> dict:
        """The record of the batch `request` builds on ({} for none); raises when the batch
        cannot be run on what is committed."""

    @abstractmethod
    def run(self, raw: DataFrame, request: BatchRequest, previous: dict) -> BatchResult:
        """Stage the batch's outputs and commit its state (step 2)."""

    @abstractmethod
    def write_record(self, version: int, record: dict) -> None:
        """Store the batch record (step 4)."""

    def after_commit(self, version: int) -> None:  # noqa: B027 - optional hook
        """Housekeeping once the batch is committed (record retention)."""

    def stream_input(self, raw: DataFrame) -> DataFrame:
        """What the stream's foreachBatch receives, from the source's raw records."""
        return raw

    def query_confs(self) -> dict[str, str]:
        """Spark settings for the life of the streaming query."""
        return {}

    def totals(self, before: dict, counters: dict[str, int]) -> dict[str, int]:
        """The job's totals after a batch with `counters`, from those `before` it: the
        engine's own and the processor's counters it `summed`."""
        return {k: before.get(k, 0) + counters.get(k, 0) for k in (*ENGINE_TOTALS, *self.summed)}

    # The processor's counters the job sums (`totals`), after ENGINE_TOTALS.
    summed: tuple[str, ...] = ()

    @abstractmethod
    def progress_line(self, label: str, record: dict) -> str:
        """The one line printed per batch."""


@dataclass
class BatchRunner:
    """Runs batches of one engine in the documented order and reports each one.

    Also the `foreachBatch` function of a stream: `runner(df, batch_id)`. Spark wraps what
    the function raises in its own error; the runner keeps the SessionizeError so that the
    command can raise it as itself.
    """

    engine: Engine
    on_batch: Callable[[str], None] = print
    label: Callable[[int], str] = lambda version: f"batch {version}"
    progress: ProgressLog | None = None
    describe_input: Callable[[int], dict] = lambda version: {}
    batch_time: Callable[[int], int | None] = lambda version: None
    lease: Lease | None = None
    on_record: Callable[[dict], None] | None = None  # each committed record (metrics)
    # Records the job as the output's owner before its first publish (sinks/claim.py).
    claim: Callable[[], None] | None = None
    # Why a batch's events are mostly late (engines/late_cause.py), from the batch's
    # version and the record it builds on; asked only for such a batch.
    explain_late: Callable[[int, dict], dict] | None = None
    # A continuous stream keeps only its last records (a deque): the progress log has all.
    records: MutableSequence[dict] = field(default_factory=list)
    failure: SessionizeError | None = None
    _invalid_reasons: dict[str, int] = field(default_factory=dict, repr=False)

    def __call__(self, df: DataFrame, batch_id: int) -> None:
        now = self.batch_time(batch_id)
        self.run(df, BatchRequest(batch_id, batch_id - 1, first=batch_id == 0, now_us=now))

    def run(self, raw: DataFrame, request: BatchRequest) -> dict:
        try:
            record = self._run(raw, request)
        except SessionizeError as exc:
            self.failure = exc
            raise
        except Exception as exc:
            # Our error raised inside a task (a store refusing a fenced-out commit, a store
            # out of reach) reaches the driver as the text of a Spark failure: raise it as
            # what it was, already written for people (no trace).
            self.failure = raised_in_task(exc)
            if self.failure is None:
                raise
            raise self.failure from exc
        self.records.append(record)
        if self.progress is not None:
            self.progress.append(record)
        if self.on_record is not None:
            self.on_record(record)
        label = self.label(request.version)
        self.on_batch(self.engine.progress_line(label, record))
        for warning in batch_warnings(
            label, record, self._invalid_reasons, self.engine.invalid_output
        ):
            self.on_batch(warning)
        mapping_warnings(record, self.on_batch)
        return record

    def _run(self, raw: DataFrame, request: BatchRequest) -> dict:
        clock = _PhaseClock()
        engine, version = self.engine, request.version
        previous = engine.previous_record(request)  # step 1
        clock.lap("plan")
        engine.sink.clear_staging(version)
        result = engine.run(raw, request, previous)  # step 2
        clock.lap("run")
        self._invalid_reasons = self._reasons_if_all_invalid(result.counters, version)
        late_cause = self._late_cause(result.counters, version, previous)
        pause_point("before-publish", version)
        self._check_lease()
        if self.claim is not None:
            self.claim()  # the output's owner, recorded with its first commit
        engine.sink.publish(version)  # step 3
        pause_point("after-publish", version)
        clock.lap("publish")
        before = previous.get("totals", {})
        record = {
            "version": version,
            **result.fields,
            "watermark": result.watermark,
            "batch": result.counters,
            "totals": engine.totals(before, result.counters),
            "input": self.describe_input(version),
            **({"late_cause": late_cause} if late_cause else {}),
        }
        record["phases_s"] = clock.phases
        record["duration_s"] = clock.total()
        self._check_lease()
        engine.write_record(version, record)  # step 4
        engine.after_commit(version)
        pause_point("after-record", version)
        return record

    def _reasons_if_all_invalid(self, counters: dict, version: int) -> dict[str, int]:
        """Lines per reason of a batch whose lines are all invalid, read from its staged
        invalid_events before they are published ({} otherwise: no cost)."""
        if not counters["records"] or counters["invalid"] != counters["records"]:
            return {}
        return self.engine.sink.staged_counts(self.engine.invalid_output, version, "reason")

    def _late_cause(self, counters: dict, version: int, previous: dict) -> dict:
        """Why most of the batch's events are late, while they are still staged ({} for a
        batch that is not such, or when the cause cannot be read: the warning then says
        the causes it knows)."""
        if self.explain_late is None or counters["late"] <= LATE_SHARE * counters["events_in"]:
            return {}
        try:
            return self.explain_late(version, previous)
        except (OSError, ValueError, KeyError, SessionizeError):
            return {}

    def _check_lease(self) -> None:
        """A driver whose lease was taken over publishes and records nothing more."""
        if self.lease is not None:
            self.lease.check()


class _PhaseClock:
    """Seconds per named phase of a batch, rounded to ms."""

    def __init__(self) -> None:
        self.start = self.last = time.perf_counter()
        self.phases: dict[str, float] = {}

    def lap(self, name: str) -> None:
        now = time.perf_counter()
        self.phases[name] = round(now - self.last, 3)
        self.last = now

    def total(self) -> float:
        return round(time.perf_counter() - self.start, 3)


def start_query(
    spark: SparkSession,
    runner: BatchRunner,
    raw: DataFrame,
    *,
    name: str,
    checkpoint: str,
    trigger: Mapping[str, Any],
) -> tuple[StreamingQuery, Callable[[], None]]:
    """Start `runner` over the stream `raw`; returns the query and the function that
    restores the session's settings once it has ended.

    The engine's query settings hold for the life of the query, so that one session can run
    queries of both engines. A SessionizeError raised in a batch stays in `runner.failure`
    (Spark raises its own wrapper of it from `awaitTermination`).
    """
    confs = {**STREAM_CONFS, **runner.engine.query_confs()}
    if spark.conf.get(COMPACT_CONF, None) is None:
        # Spark keeps the compacted files of the retained batches, each listing every file
        # ever read: compacting once per retention keeps two of them instead of eleven. A
        # checkpoint that has compacted files keeps its own interval; one the session sets
        # is left alone.
        confs[COMPACT_CONF] = confs.get(RETAIN_CONF, str(RETAIN))
    saved = {k: spark.conf.get(k, None) for k in confs}

    def restore() -> None:
        for k, v in saved.items():
            if v is None:
                spark.conf.unset(k)
            else:
                spark.conf.set(k, v)

    for k, v in confs.items():
        spark.conf.set(k, v)
    try:
        query = (
            runner.engine.stream_input(raw)
            .writeStream.queryName(name)
            .foreachBatch(runner)
            .option("checkpointLocation", checkpoint)
            .trigger(**trigger)
            .start()
        )
    except BaseException:
        restore()
        raise
    return query, restore


def await_query(query: StreamingQuery, runner: BatchRunner) -> list[dict]:
    """Wait for the query's end; returns the records of its batches. A SessionizeError
    raised in a batch is raised as itself, not as Spark's wrapper of it."""
    try:
        query.awaitTermination()
    except Exception:
        if runner.failure is not None:
            raise runner.failure from None
        raise
    finally:
        if query.isActive:
            query.stop()
    return list(runner.records)
