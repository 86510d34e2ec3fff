"""`sessionize batch`: the `store` engine run once per hour, the hour being the version.

Hour H reads `INPUT/event_date=D/event_hour=HH`, continues the sessions left open after
H-1, emits every session with `closed_at` before the end of H (its watermark), and carries
the rest to H+1 (DESIGN §3.5). Versions and output batch ids are the hour written as the
integer YYYYMMDDHH (2026110109 for 2026-11-01T09), so output rows say which hour wrote them.

Sequential: H runs only on top of a committed H-1, except the first hour of a new state.
Reprocessing: `--from H` with H already committed first retires every output batch >= H,
then rewinds the state to H-1, then recomputes H..--to. Each step is safe to repeat, so a
crash during a rewind is healed by running the same command again.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from pyspark.sql import SparkSession

from sessionize.config import SessionRules
from sessionize.engines.store import EngineSettings, StoreEngine, settings_record
from sessionize.errors import ConfigError, IncompatibleCheckpoint, StateError
from sessionize.sinks.parquet import ParquetSink, resolve_fs
from sessionize.sources.files import file_batch
from sessionize.spark import get_spark
from sessionize.state import open_backend

HOUR = timedelta(hours=1)


def hour_version(hour: datetime) -> int:
    return int(hour.strftime("%Y%m%d%H"))


def version_hour(version: int) -> str:
    s = str(version)
    return f"{s[0:4]}-{s[4:6]}-{s[6:8]}T{s[8:10]}"


@dataclass(frozen=True)
class BatchOptions:
    input: str
    output: str
    start: datetime  # --from, UTC, hour-aligned
    end: datetime  # --to (inclusive)
    state: str = "files"
    rules: SessionRules = field(default_factory=SessionRules)
    partitions: int = 4
    job: str = "sessionize"
    max_future_us: int | None = 86_400_000_000  # judged against the start of the run

    def state_uri(self) -> str:
        """`files` keeps the store next to the outputs, under `_state` (readers skip it)."""
        if self.state == "files":
            return f"files:{self.output.rstrip('/')}/_state"
        return self.state

    def engine_settings(self) -> EngineSettings:
        return EngineSettings(
            rules=self.rules,
            partitions=self.partitions,
            state_uri=self.state_uri(),
            job=self.job,
            output=self.output,
            max_future_us=self.max_future_us,
        )


def _hours(opts: BatchOptions) -> list[datetime]:
    if opts.start.minute or opts.start.second or opts.end < opts.start:
        raise ConfigError("--from must be an hour and --to the same or a later hour")
    n = int((opts.end - opts.start) / HOUR) + 1
    return [opts.start + i * HOUR for i in range(n)]


def _hour_path(root: str, hour: datetime) -> str:
    return f"{root.rstrip('/')}/event_date={hour:%Y-%m-%d}/event_hour={hour:%H}"


def run_batch(
    opts: BatchOptions,
    spark: SparkSession | None = None,
    on_hour: Callable[[str], None] = print,
) -> list[dict]:
    hours = _hours(opts)
    now_us = time.time_ns() // 1000  # one "now" for every hour of the run
    settings = opts.engine_settings()
    backend = open_backend(settings.state_uri)
    backend.check()
    committed = backend.job_versions(opts.job)
    first = hour_version(hours[0])
    previous = hour_version(hours[0] - HOUR)
    if committed:
        _check_settings(backend.read_job_record(opts.job, committed[-1]), settings)
    if committed and previous not in committed and first not in committed:
        nxt = version_hour(hour_version(datetime.strptime(str(committed[-1]), "%Y%m%d%H") + HOUR))
        raise StateError(
            f"hour {version_hour(first)} needs hour {version_hour(previous)} committed first; "
            f"the state's last hour is {version_hour(committed[-1])}: run --from {nxt}"
        )
    sink = ParquetSink(opts.output)
    if first in committed or any(v > first for v in committed):
        retired = sink.invalidate_from(first)
        backend.truncate_after(opts.job, previous)
        on_hour(
            f"reprocessing from {version_hour(first)}: retired {len(retired)} output hour(s), "
            f"state rewound to {version_hour(previous)}"
        )
    new_state = not backend.job_versions(opts.job)
    spark = spark or get_spark(f"sessionize-batch-{opts.job}", shuffle_partitions=opts.partitions)
    engine = StoreEngine(spark, settings, backend)
    records = []
    for i, hour in enumerate(hours):
        path = _hour_path(opts.input, hour)
        if _exists(path):
            raw = file_batch(spark, [path])
        else:
            on_hour(f"hour {hour:%Y-%m-%dT%H}: no input at {path}, treated as an empty hour")
            raw = spark.createDataFrame([], "value string, error string, source string")
        record = engine.run(
            raw,
            hour_version(hour),
            previous=hour_version(hour - HOUR),
            first=new_state and i == 0,
            end_watermark=int((hour + HOUR).timestamp() * 1_000_000),
            now_us=now_us,
        )
        records.append(record)
        on_hour(_progress(hour, record))
    return records


def _check_settings(record: dict | None, settings: EngineSettings) -> None:
    recorded = (record or {}).get("settings")
    current = settings_record(settings)
    if recorded and recorded != current:
        diffs = "; ".join(
            f"--{k.replace('_', '-')} {recorded.get(k)} (this run: {current.get(k)})"
            for k in sorted(current)
            if recorded.get(k) != current.get(k)
        )
        raise IncompatibleCheckpoint(
            f"the state was built with {diffs}: rerun with the same settings, or use a new --state"
        )


def _progress(hour: datetime, record: dict) -> str:
    b = record["batch"]
    return (
        f"hour {hour:%Y-%m-%dT%H}: {b['records']:,} events in, {b['sessions_out']:,} sessions "
        f"out, {b['late']:,} late, {b['invalid']:,} invalid, {b['open_sessions']:,} open "
        f"sessions, {record['duration_s']:.1f}s"
    )


def _exists(path: str) -> bool:
    fs, p = resolve_fs(path)
    from pyarrow import fs as pafs

    return fs.get_file_info(p).type == pafs.FileType.Directory or os.path.isdir(path)
