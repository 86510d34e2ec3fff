"""The `store` engine: any `stateful.Processor` (sessions too) on our versioned store.

A batch is one state version and one Spark job (engines/partition.py: what each partition
task does). The driver's side, here: the fence before the first batch, the input rows with
the batch marks of the processor's key and event time (engines/batch_marks.py), shuffled by
the key (engines/placement.py), the partition job, the batch's counts and the job log of
versions in the store; the batch runner (engines/runner.py) publishes the outputs and
writes the batch record in between, under the lease. A job's settings (`KeyedSettings`)
say what varies between jobs: the processor, how the input marks its invalid rows, where
the outputs go, what is recorded. Sessions are one such job (engines/sessions.py).
"""

from __future__ import annotations

import base64
import functools
from dataclasses import dataclass, replace
from typing import cast

import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession
from typing_extensions import override

from sessionize.config import format_duration, format_instant
from sessionize.core.declared import Declared, declared, late_names_of, published
from sessionize.core.invalid import INVALID_OUTPUT, INVALID_SCHEMA, split_invalid
from sessionize.core.processor import Processor
from sessionize.engines import handoff
from sessionize.engines.batch_marks import mark_keys, with_marks
from sessionize.engines.handoff import run_follow_on
from sessionize.engines.partition import (
    CORE_COUNTS,
    BatchBasis,
    collect_partitions,
    missing_task,
    partition_task,
)
from sessionize.engines.placement import partition_users
from sessionize.engines.runner import RETAIN, RETAIN_CONF, BatchRequest, BatchResult, Engine
from sessionize.errors import ProcessorError, StateError
from sessionize.faults import pause_point
from sessionize.sinks.base import Sink
from sessionize.sinks.outputs import Outputs, OutputSpec
from sessionize.sinks.registry import open_sink
from sessionize.state import EMPTY_VERSION, RowSpec, StateBackend, open_backend
from sessionize.state.lease import Lease

# Summed over the life of a job besides the processor's own counters.
KEYED_TOTALS = ("records", "invalid", "events_in", "late")
ADAPTIVE_CONF = "spark.sql.adaptive.enabled"


@dataclass(frozen=True)
class KeyedSettings:
    """A job's settings: everything a partition task needs (pickled into every task). What
    varies between kinds of job are the methods below: the session job's settings
    (engines/sessions.py) override how its input marks invalid rows, the store's rows, the
    sink and the record."""

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
    # Where the first step hands a follow-on its rows (engines/handoff.py): a folder of the
    # checkpoint; "" for a processor without follow-on.
    handoff: str = ""

    @property
    def stages_invalid(self) -> bool:
        """Whether the partition tasks stage the input's invalid rows (the first step's)."""
        return True

    def follow_on(self) -> FollowOnSettings | None:
        """The settings of the processor's follow-on (None: it has none): its own store
        job, the same store, partitions, output and epoch."""
        d = declared(self.processor)
        f = d.follow_on
        if f is None:
            return None
        return FollowOnSettings(
            processor=f.processor,
            input_schema=d.outputs[f.output].schema,
            partitions=self.partitions,
            state_uri=self.state_uri,
            job=f.job_name(self.job),
            output=self.output,
            lateness_us=self.lateness_us,
            retain=self.retain,
            maintenance_every=self.maintenance_every,
            epoch=self.epoch,
            output_format=self.output_format,
            handoff=self.handoff,
            first=self,
        )

    def input_counts(self, rows: pa.Table) -> dict[str, int]:
        """What the job counts of a partition's valid input rows, added up over the batch
        (`BatchResult.seen`): nothing for a processor's job."""
        return {}

    @property
    def processor_outputs(self) -> tuple[str, ...]:
        """The processor's outputs: the declared ones and the late output, with a
        follow-on's instead of the one it takes (what its checkpoint records: `invalid` is
        every job's)."""
        return published(declared(self.processor))

    @property
    def output_names(self) -> tuple[str, ...]:
        """Every output a batch publishes: the processor's and the invalid rows
        (stateful/invalid.py)."""
        return with_invalid(self.processor_outputs)

    @property
    def invalid_output(self) -> str:
        """The output of the input's invalid rows."""
        return INVALID_OUTPUT

    def split_input(self, rows: pa.Table | None) -> tuple[pa.Table, pa.Table]:
        """A partition's input rows -> (the rows `step` gets, the invalid rows as the
        invalid output's): rows marked by `stateful.source` or without key or time."""
        d = declared(self.processor)
        if rows is None:
            rows = self.input_schema.empty_table()
        return split_invalid(rows, d.key, d.event_time)

    def row_spec(self) -> RowSpec | None:
        """What the store's rows are."""
        return declared(self.processor).rows

    def open_state(self) -> StateBackend:
        return open_backend(self.state_uri, self.row_spec())

    def outputs(self) -> Outputs:
        """What the job writes, as every sink takes it: the processor's declared outputs
        (replaced by key first), its late output and the invalid rows."""
        d = declared(self.processor)
        specs = _specs(d, self.input_schema, skip=d.follow_on.output if d.follow_on else None)
        if d.follow_on is not None:
            then = d.follow_on.declared
            specs += _specs(then, d.outputs[d.follow_on.output].schema)
        specs.append(OutputSpec(INVALID_OUTPUT, INVALID_SCHEMA))
        ordered = [s for s in specs if s.replaced] + [s for s in specs if not s.replaced]
        return Outputs(tuple(ordered), record_key=d.key)

    def sink(self) -> Sink:
        """Where the outputs go."""
        return open_sink(self.output, self.output_format, job=self.job, outputs=self.outputs())

    def record(self) -> dict[str, object]:
        """The job's settings as the store keeps them once: what a restart compares."""
        return settings_record(self)


@dataclass(frozen=True)
class FollowOnSettings(KeyedSettings):
    """A follow-on's settings (`stateful.FollowOn`): its rows are the first step's, already
    judged, so it stages no invalid rows, and it writes to the first step's sink."""

    first: KeyedSettings | None = None

    @property
    @override
    def stages_invalid(self) -> bool:
        return False

    @override
    def follow_on(self) -> FollowOnSettings | None:
        return None

    @override
    def split_input(self, rows: pa.Table | None) -> tuple[pa.Table, pa.Table]:
        """The handed rows as they are; a row without key is the first processor's mistake."""
        d = declared(self.processor)
        if rows is None:
            rows = self.input_schema.empty_table()
        if rows.column(d.key).null_count:
            assert self.first is not None
            first = declared(self.first.processor)
            assert first.follow_on is not None
            raise ProcessorError(
                f"processor {first.name}: output '{first.follow_on.output}' hands rows "
                f"without '{d.key}' to its follow_on {d.name}; every row it hands on needs one"
            )
        return rows, INVALID_SCHEMA.empty_table()

    @override
    def sink(self) -> Sink:
        assert self.first is not None
        return self.first.sink()


def _specs(d: Declared, input_schema: pa.Schema, skip: str | None = None) -> list[OutputSpec]:
    """The output specs of `d`'s declared outputs (but `skip`) and of its late output."""
    # An Output holds its key and partition columns as tuples (`Output.__post_init__`).
    specs = [
        OutputSpec(
            name,
            out.schema,
            key=cast(tuple[str, ...], out.key) if out.mode == "replace" else (),
            partition_by=cast(tuple[str, ...], out.partition_by),
        )
        for name, out in d.outputs.items()
        if name != skip
    ]
    specs += [OutputSpec(n, d.late_schema(input_schema)) for n in late_names_of(d)]
    return specs


def with_invalid(outputs: tuple[str, ...]) -> tuple[str, ...]:
    """A processor job's outputs as published: `outputs` and the invalid rows."""
    return outputs if INVALID_OUTPUT in outputs else (*outputs, INVALID_OUTPUT)


def fence_store(backend: StateBackend, settings: KeyedSettings, lease: Lease) -> KeyedSettings:
    """Raise the store's fence to this driver's lease epoch, before it opens any state, so
    that the store itself rejects every later commit of the drivers before it; the settings
    the tasks then carry (with the epoch)."""
    jobs = job_names(settings)  # a follow-on's job too: its commits are the batch's as well
    fence = max(backend.fence(job) for job in jobs)
    epoch = lease.epoch if fence < lease.epoch else lease.acquire_above(fence)
    for job in jobs:
        backend.raise_fence(job, epoch, settings.partitions)
    return replace(settings, epoch=epoch)


def job_names(settings: KeyedSettings) -> list[str]:
    """The store jobs a batch of this job commits: its own, then its follow-on's."""
    then = settings.follow_on()
    return [settings.job] + ([then.job] if then is not None else [])


def settings_record(settings: KeyedSettings) -> dict[str, object]:
    """What a checkpoint of this job is bound to: a restart with other values is refused.
    A follow-on's settings are recorded with it, under `follow_on` with its job's name."""
    then = settings.follow_on()
    follow = None
    if then is not None:  # its job, processor and state (the rest is the job's; the
        # store's entry of its job has all of it, its rows for the state tools)
        own = _own_record(then)
        follow = {"job": then.job, **{k: own[k] for k in _FOLLOW_ON_RECORD}}
    return {**_own_record(settings), "follow_on": follow}


_FOLLOW_ON_RECORD = ("processor", "key", "event_time", "state_schema", "params", "gauges")


def _own_record(settings: KeyedSettings) -> dict[str, object]:
    d = declared(settings.processor)
    return {
        "processor": d.name,
        "key": d.key,
        "event_time": d.event_time,
        "state_schema": ", ".join(f"{f.name} {f.type}" for f in d.state_schema),
        "params": settings.processor.params(),
        "gauges": list(settings.processor.gauges),
        "partitions": settings.partitions,
        "lateness": format_duration(settings.lateness_us),
        "output_format": settings.output_format,
        # The store's rows, for the state tools, which have the settings but not the class.
        "stored_rows": {
            "schema": base64.b64encode(d.rows.schema.serialize().to_pybytes()).decode(),
            "key": d.rows.key,
            "expiry": d.rows.expiry,
        },
    }


def recorded_rows(settings: dict) -> RowSpec:
    """The store's rows of a stateful job, from its recorded settings (`settings_record`)."""
    rows = settings["stored_rows"]
    schema = pa.ipc.read_schema(pa.py_buffer(base64.b64decode(rows["schema"])))
    return RowSpec(schema, key=rows["key"], expiry=rows["expiry"])


def keyed_batch(counts: list[dict], records: int) -> dict:
    """A processor's batch counts from its tasks': the core's, its counters nested."""
    batch = {k: sum(c[k] for c in counts) for k in CORE_COUNTS}
    batch |= {"records": records, "events_in": batch["rows"]}
    mine: dict[str, int] = {}
    for c in counts:
        for name, value in c["counters"].items():
            mine[name] = mine.get(name, 0) + value
    batch["counters"] = mine
    return batch


def keyed_totals(before: dict, counters: dict, gauges: tuple[str, ...]) -> dict:
    """A processor's totals after a batch: sums, but its gauges' value after the batch."""
    totals = {k: before.get(k, 0) + counters[k] for k in KEYED_TOTALS}
    mine = dict(before.get("counters", {}))
    for name, value in counters["counters"].items():
        mine[name] = value if name in gauges else mine.get(name, 0) + value
    return {**totals, "counters": mine}


class KeyedEngine(Engine):
    """Driver side: the fence, the watermark, the partition job, the job log of versions in
    the store. A subclass says how a batch's input becomes the processor's rows with their
    marks (`_marked`), and may rebuild an output replaced by key (`_refresh`)."""

    settings: KeyedSettings
    _marks: pa.Array | None = None
    _settings_stored = False  # this driver has stored the job's settings entry

    def __init__(
        self,
        spark: SparkSession,
        settings: KeyedSettings,
        backend: StateBackend | None = None,
        lease: Lease | None = None,
    ):
        self.spark = spark
        self.settings = settings
        self.backend = backend or settings.open_state()
        self.sink = settings.sink()
        self.lease = lease  # None: unfenced

    @property
    def invalid_output(self) -> str:
        """The output of the input's invalid rows, as the job's settings name it."""
        return self.settings.invalid_output

    @override
    def run(self, raw: DataFrame, request: BatchRequest, previous: dict) -> BatchResult:
        """One batch on every partition, in one Spark job (engines/partition.py)."""
        self._fence_once()
        handoff.clear(self.settings.handoff)  # what an earlier attempt handed on
        marked = self._marked(raw, request, self._mark_keys())
        basis = BatchBasis(
            request.version,
            EMPTY_VERSION if request.first else request.previous,
            previous.get("watermark"),
            previous.get("max_event_time"),
            request.end_watermark,
            self.settings.lateness_us,
            self._refresh(request),
        )
        d = declared(self.settings.processor)
        counts, records, latest = collect_partitions(
            partition_users(marked, self.settings.partitions, d.key),
            functools.partial(partition_task, self.settings, basis),
            lambda latest: functools.partial(missing_task, self.settings, basis.plan(latest)),
            self.settings.partitions,
        )
        fields: dict[str, object] = {
            "previous": basis.previous,
            "max_event_time": basis.latest_event(latest),
        }
        then = self.settings.follow_on()
        if then is not None:
            pause_point("before-follow-on", request.version)
            later = run_follow_on(marked, then, basis.plan(latest))
            batch = keyed_batch(later, 0)
            before = previous.get("follow_on", {}).get("totals", {})
            fields["follow_on"] = {
                "job": then.job,
                "batch": batch,
                "totals": keyed_totals(before, batch, then.processor.gauges),
            }
        seen: dict[str, int] = {}
        for c in counts:
            for k, v in c["seen"].items():
                seen[k] = seen.get(k, 0) + v
        return BatchResult(
            self._batch(counts, records), basis.plan(latest).watermark_after, fields, seen
        )

    def _marked(self, raw: DataFrame, request: BatchRequest, marks: pa.Array) -> DataFrame:
        """The batch's input rows with the batch marks of `marks`."""
        d = declared(self.settings.processor)
        return with_marks(raw, marks, d.key, d.event_time)

    def _refresh(self, request: BatchRequest) -> bool:
        """Whether the batch hands every key to the processor (see BatchPlan.refresh):
        a processor's outputs replaced by key are never behind (setting them back is
        refused)."""
        return False

    def _batch(self, counts: list[dict], records: int) -> dict:
        """The batch record's counts: the core's, and the processor's counters nested."""
        return keyed_batch(counts, records)

    def settings_entry(self) -> dict:
        """The job's settings as the store keeps them, once per job: what a restart compares."""
        return self.settings.record()

    def _mark_keys(self) -> pa.Array:
        """The batch marks' keys, found once per engine."""
        if self._marks is None:
            key_type = declared(self.settings.processor).key_type
            self._marks = mark_keys(self.settings.partitions, key_type)
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
        record: dict = {}
        for job in reversed(job_names(self.settings)):  # the follow-on's is written first
            record = self.backend.read_job_record(job, request.previous) or {}
            if not record:
                raise StateError(
                    f"state {self.backend} has no commit for version {request.previous} of "
                    f"job '{job}', but version {request.version} is being run: the "
                    "checkpoint and the state store disagree (was the state moved or deleted?)"
                )
        return record

    def __getstate__(self) -> dict:
        # Over Spark Connect the engine runs inside foreachBatch on the server: the client's
        # session stays behind and the backend's connections are opened there anew.
        return {**self.__dict__, "spark": None, "backend": None}

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self.backend = self.settings.open_state()

    @override
    def write_record(self, version: int, record: dict) -> None:
        job, epoch = self.settings.job, self.settings.epoch
        then = self.settings.follow_on()
        if not self._settings_stored:  # before the first record: none is without them
            entries = [(job, self.settings_entry())]
            if then is not None:
                entries.append((then.job, then.record()))
            for name, entry in entries:
                if self.backend.read_job_settings(name) != entry:
                    self.backend.write_job_settings(name, entry, epoch=epoch)
            self._settings_stored = True
        if then is not None:
            # The follow-on's record first: a job record is the last write of a version, and
            # the first step's is the one a restart reads (`previous_record`).
            follow = record["follow_on"]
            own = {"version": version, "watermark": record["watermark"], **follow}
            self.backend.write_job_record(then.job, version, own, epoch=epoch)
        self.backend.write_job_record(job, version, record, epoch=epoch)

    @override
    def after_commit(self, version: int) -> None:
        handoff.clear(self.settings.handoff)
        if version % self.settings.maintenance_every == 0:
            for job in job_names(self.settings):
                self.backend.trim_job_records(job, self.settings.retain)

    @override
    def totals(self, before: dict, counters: dict) -> dict:
        return keyed_totals(before, counters, self.settings.processor.gauges)

    @override
    def progress_line(self, label: str, record: dict) -> str:
        b = record["batch"]
        mine = "".join(f", {name} {value:,}" for name, value in sorted(b["counters"].items()))
        then = ""
        if "follow_on" in record:  # the second step's own counts
            f = record["follow_on"]["batch"]
            its = "".join(f", {name} {value:,}" for name, value in sorted(f["counters"].items()))
            then = (
                f"; then {record['follow_on']['job']}: {f['rows']:,} rows, {f['keys']:,} keys{its}"
            )
        return (
            f"{label}: {b['rows']:,} rows in, {b['invalid']:,} invalid, {b['late']:,} late, "
            f"{b['keys']:,} keys, "
            f"{b['due']:,} timers fired{mine}{then}, "
            f"watermark {format_instant(record['watermark']) or 'none'}, "
            f"{record['duration_s']:.1f}s"
        )
