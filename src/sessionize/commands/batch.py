"""`sessionize batch`: the `store` engine run once per hour, the hour being the version.

Hour H reads `INPUT/event_date=D/event_hour=HH`, continues the sessions left open after
H-1, emits every session with `closed_at` before the end of H (its watermark), and carries
the rest to H+1 (docs/design.md, "Semantics", item 5). Versions and output batch ids are the hour
written as the integer YYYYMMDDHH (2026110109 for 2026-11-01T09), so output rows say which
hour wrote them. The folders, `--from` and `--to` are wall hours of `--input-timezone`
(default UTC; `sources/hours.py`): on a daylight saving day an hour holds two hours of
instants, or none and is skipped.

Sequential: H runs only on top of a committed H-1, except the first hour of a new state.
Reprocessing: `--from H` with H already committed first retires every output batch >= H,
then rewinds the state to H-1, then recomputes H..--to. Each step is safe to repeat, so a
crash during a rewind is healed by running the same command again.
"""

from __future__ import annotations

import shlex
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta

from pyspark.sql import SparkSession

from sessionize.api.sessionizer import Sessionizer
from sessionize.commands.options import (
    engine_settings,
    job_spark,
    progress_path,
    recorded_state,
    sessionizer,
    state_uri,
)
from sessionize.commands.placement import warn_local_paths
from sessionize.config import (
    DEFAULT_RULES_RECORD,
    SessionRules,
    check_timezone,
    describe_differences,
)
from sessionize.engines.checkpoint import (
    OUTPUT_RECORD,
    check_follow_on_rows,
    comparable,
    output_lease,
    output_records,
)
from sessionize.engines.late_cause import hours_behind
from sessionize.engines.ownership import batch_claim, check_batch
from sessionize.engines.progress import ProgressLog
from sessionize.engines.runner import BatchRequest, BatchRunner
from sessionize.engines.sessions import SessionEngine, SessionSettings, settings_record
from sessionize.errors import ConfigError, IncompatibleCheckpoint, StateError
from sessionize.fs import child, is_dir, without_options
from sessionize.logic.processor import LATE as LATE_EVENTS
from sessionize.logic.processor import check_revisable
from sessionize.mapping import DEFAULT_RECORD, EventMapping, new_mapping
from sessionize.redaction import needs_secret, redact_uri
from sessionize.schema import layout
from sessionize.sinks.registry import capabilities, check_output, check_revisions, record_place
from sessionize.sources.files import check_input as check_tree
from sessionize.sources.hours import (
    FolderHour,
    folder_hour,
    folder_hours,
    folder_path,
    previous_folder,
)
from sessionize.sources.registry import batch_records
from sessionize.state import open_backend
from sessionize.state.lease import Lease

HOUR = timedelta(hours=1)


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
    progress_log: str | None = None  # default: OUTPUT/_progress.jsonl
    master: str | None = None  # Spark master; default local[*] (or spark-submit's)
    remote: str | None = None  # Spark Connect server (sc://HOST:PORT) instead of a master
    spark_conf: dict[str, str] = field(default_factory=dict)
    output_format: str = "parquet"  # parquet | delta
    max_future_us: int | None = 86_400_000_000  # judged against the start of the run
    mapping: EventMapping = field(default_factory=new_mapping)  # fields, --input-format
    # The recorded settings the user gave (flag names, as `api.sessionizer.RECORDED`); the
    # others take the output's and the state's recorded values. None: all were given.
    explicit: frozenset[str] | None = None
    # The zone whose wall hours name the folders (and --from/--to); the output records it.
    input_timezone: str = "UTC"

    def __post_init__(self) -> None:
        check_timezone(self.input_timezone, "--input-timezone")

    def state_uri(self) -> str:
        """`files` keeps the store next to the outputs, under `_state` (readers skip it; a
        Kafka output: under its staging place); a PostgreSQL output has no directory for it."""
        if self.state == "files" and capabilities(self.output).keeps_records:
            raise ConfigError(
                "--state files keeps the state under the output, which a PostgreSQL output "
                "has no directory for: give --state files:PATH or --state postgresql://..."
            )
        return state_uri(self.state, child(record_place(self.output), "_state"))

    def engine_settings(self) -> SessionSettings:
        return engine_settings(self)

    def handoff(self) -> str:
        """Where the sessions go to the users step with identity (engines/handoff.py): a
        folder beside the records (`_handoff`), or of a `files:PATH` state where the output
        has no directory (PostgreSQL)."""
        if not self.mapping.anonymous:
            return ""
        if not capabilities(self.output).keeps_records:
            return child(record_place(self.output), "_handoff")
        uri = self.state_uri()
        if uri.startswith("files:"):
            return child(uri.removeprefix("files:"), "_handoff")
        raise ConfigError(
            "--anonymous-field numbers sessions per user in a second step, whose sessions "
            "are handed over in files, which a PostgreSQL output has no directory for: give "
            "--state files:PATH"
        )

    def sessionizer(self) -> Sessionizer:
        return sessionizer(self)

    def given(self, name: str) -> bool:
        return self.explicit is None or name in self.explicit


def _hours(opts: BatchOptions) -> tuple[list[FolderHour], list[datetime]]:
    """The folders --from..--to (wall hours of --input-timezone), and those it skips."""
    if opts.start.minute or opts.start.second or opts.end < opts.start:
        raise ConfigError("--from must be an hour and --to the same or a later hour")
    hours, skipped = folder_hours(opts.start, opts.end, opts.input_timezone)
    if not hours:
        raise ConfigError(
            f"--from..--to holds no hour of {opts.input_timezone} (a daylight "
            "saving change skips it); give a wider range"
        )
    return hours, skipped


def run_batch(
    opts: BatchOptions,
    spark: SparkSession | None = None,
    on_hour: Callable[[str], None] = print,
    on_start: Callable[[int], None] = lambda hours: None,
) -> list[dict]:
    """Run hours --from..--to in order; returns their records. `on_hour` gets one line per
    hour (and notes such as a reprocessing); `on_start` the number of hours, once they are
    about to run."""
    hours, skipped = _hours(opts)
    for name in skipped:
        on_hour(
            f"hour {name:%Y-%m-%dT%H} does not exist in {opts.input_timezone} (clocks go "
            "forward): no folder, skipped"
        )
    check_tree(opts.input)  # as `stream` does: a missing tree is a mistake, not empty hours
    check_output(opts.output, None)
    bound = bind_output(opts)  # before anything is written: the output's state and owner
    check_batch(bound.output, bound.job, recorded_state(bound.state))
    with output_lease(opts.output) as lease:
        opts = bind_output(opts)
        check_output(opts.output, opts.output_format)
        if opts.rules.revise_within_us is not None:  # given now; a recorded one passed before
            check_revisable(layout(opts.mapping), open_sessions=False)
            check_revisions(True, opts.output, opts.output_format)
        return _run(opts, hours, spark, on_hour, on_start, lease)


def output_record(opts: BatchOptions) -> dict[str, str]:
    """What a batch output is bound to: its state and job (whose hours it holds), the
    format its tables are in, and the zone naming its hours (which folder each batch is)."""
    state = recorded_state(opts.state)
    return {
        "state": state,
        "job": opts.job,
        "output_format": opts.output_format,
        "input_timezone": opts.input_timezone,
    }


def bind_output(opts: BatchOptions) -> BatchOptions:
    """`opts` with the state, job and output format the output recorded at its first run
    (when not given). A batch output continues the sessions its state holds open:
    another state on the same output is refused, as another output on a checkpoint is."""
    before = output_records(opts.output).read(OUTPUT_RECORD)
    if not before:
        return opts  # recorded once the state answered (`_run`)
    before = {"input_timezone": "UTC", **before}  # recorded before the zone could be chosen
    mine = output_record(opts)
    taken = {k: v for k, v in before.items() if k in mine and not opts.given(k)}
    if needs_secret(str(taken.get("state", ""))):
        raise ConfigError(
            f"output {without_options(opts.output)} goes with state {taken['state']}, "
            "recorded without its secret: give it with --state"
        )
    opts = replace(opts, **taken)
    now = output_record(opts)
    changed = {k for k in now if k in before and comparable(k, before[k]) != comparable(k, now[k])}
    if changed:
        diffs = describe_differences({k: before[k] for k in changed}, {k: now[k] for k in changed})
        raise IncompatibleCheckpoint(
            f"output {without_options(opts.output)} was written with {diffs}: a batch output "
            "goes with the state and job that hold its open sessions; leave the flag out or "
            "give the recorded value, or use a new --output"
        )
    return opts


def _run(
    opts: BatchOptions,
    hours: list[FolderHour],
    spark: SparkSession | None,
    on_hour: Callable[[str], None],
    on_start: Callable[[int], None],
    lease: Lease,
) -> list[dict]:
    now_us = time.time_ns() // 1000  # one "now" for every hour of the run
    # The flags' settings open the store; once its last record fills in the flags left
    # out, the run has one settings object, which the engine and the closing note use.
    settings = opts.engine_settings()
    backend = open_backend(settings.state_uri, settings.row_spec())
    backend.check()
    committed = backend.job_versions(opts.job)
    if not committed:  # a new job: a flag that matches nothing is refused before any write
        opts.sessionizer().resolved({})
    # The output's record binds it to the state; its id is the job's, the output's owner.
    claim = batch_claim(opts.output, opts.job, recorded_state(opts.state), output_record(opts))
    first = hours[0].version
    previous = previous_folder(hours[0].name, opts.input_timezone).version
    if committed:
        recorded_settings = backend.recorded_settings(opts.job)
        if recorded_settings:  # the flags left out take the state's values
            s, _ = opts.sessionizer().resolved({**DEFAULT_RECORD, **recorded_settings})
            opts = replace(opts, rules=s.rules, partitions=s.partitions, mapping=s.mapping)
            resolved = opts.engine_settings()
            if resolved.row_spec() != settings.row_spec():
                backend = open_backend(resolved.state_uri, resolved.row_spec())
            settings = resolved
        _check_settings(recorded_settings, settings, opts.state)
        check_follow_on_rows(backend, settings.follow_on())
    if committed and previous not in committed and first not in committed:
        after = _hour_of(committed[-1]) + HOUR
        # One of two consecutive wall hours exists, whatever the zone's gaps.
        tz = opts.input_timezone
        found = folder_hour(after, tz) or folder_hour(after + HOUR, tz)
        assert found is not None
        nxt = version_hour(found.version)
        raise StateError(
            f"hour {version_hour(first)} needs hour {version_hour(previous)} committed first; "
            f"the state's last hour is {version_hour(committed[-1])}: run --from {nxt}"
        )
    then = settings.follow_on()  # the users step's job, with identity
    if then is not None and previous in committed and not backend.job_versions(then.job):
        raise IncompatibleCheckpoint(
            f"output {redact_uri(opts.output)} has hours of job '{opts.job}' up to "
            f"{version_hour(committed[-1])} without its second step '{then.job}' (state "
            f"{redact_uri(settings.state_uri)} has none of it: they were run before that step "
            "existed, or its state was removed): run them again from the state's first hour, "
            f"`sessionize batch --from {version_hour(committed[0])}` with the same flags"
        )
    sink = settings.sink()  # the outputs of the settings checked: revisions' too
    if first in committed or any(v > first for v in committed):
        retired = sink.invalidate_from(first)
        backend.truncate_after(opts.job, previous)
        if opts.mapping.anonymous:  # the users step's job goes back with it
            backend.truncate_after(f"{opts.job}.users", previous)
        on_hour(
            f"reprocessing from {version_hour(first)}: retired {len(retired)} output hour(s), "
            f"state rewound to {version_hour(previous)}"
        )
    new_state = not backend.job_versions(opts.job)
    spark = spark or job_spark(opts, f"sessionize-batch-{opts.job}")
    warn_local_paths(spark, opts.output, settings.state_uri)
    log = progress_path(opts.progress_log, record_place(opts.output), "_progress.jsonl")
    # The engine runs with the settings checked against the state's record: one object.
    engine = SessionEngine(
        spark, settings, backend, parser=opts.sessionizer().file_parser(), lease=lease
    )
    runner = BatchRunner(
        engine,
        on_hour,
        label=_label,
        progress=ProgressLog(log) if log else None,
        describe_input=lambda version: {
            "path": folder_path(opts.input, _hour_of(version)),
            "input_timezone": opts.input_timezone,
        },
        lease=lease,
        claim=claim,
        explain_late=lambda version, previous: hours_behind(
            engine.sink.staged_counts(LATE_EVENTS, version, "event_time"),
            previous.get("watermark"),
        ),
    )
    on_start(len(hours))
    try:
        for i, hour in enumerate(hours):
            path = folder_path(opts.input, hour.name)
            if not is_dir(path):
                on_hour(
                    f"hour {hour.name:%Y-%m-%dT%H}: no input at {path}, treated as an empty hour"
                )
            raw = batch_records(spark, [path] if is_dir(path) else [], opts.mapping)
            request = BatchRequest(
                hour.version,
                previous=previous_folder(hour.name, opts.input_timezone).version,
                first=new_state and i == 0,
                end_watermark=hour.end_us,  # the end of its instants
                now_us=now_us,
                last=i == len(hours) - 1,  # the mapping is judged by then at the latest
            )
            runner.run(raw, request)
    finally:
        engine.sink.close()
    later = [v for v in committed if v > hours[-1].version]
    if later:
        on_hour(_rest_note(opts, settings, hours[-1].name + HOUR, _hour_of(later[-1])))
    return list(runner.records)


def _check_settings(recorded: dict | None, settings: SessionSettings, state: str) -> None:
    if recorded:  # a state from before mappings could be chosen has the default one
        recorded = {**DEFAULT_RECORD, **DEFAULT_RULES_RECORD, **recorded}
    diffs = describe_differences(recorded, settings_record(settings)) if recorded else ""
    if diffs:
        # The output goes with its state (`bind_output`): a fresh start needs both new.
        fresh = "a new --output" if state == "files" else "a new --output and a new --job"
        raise IncompatibleCheckpoint(
            f"the state was built with {diffs}: leave the flags out to use the recorded "
            f"values, or give the same ones; or start over with {fresh}"
        )


def _rest_note(opts: BatchOptions, run: SessionSettings, start: datetime, end: datetime) -> str:
    """The last line of a partial reprocess: what it retired, and the command to redo it
    (with the settings `run` ran with)."""
    flags = {"input": opts.input, "output": opts.output}
    if opts.state != "files":
        flags["state"] = redact_uri(opts.state)
    settings = settings_record(run)
    settings.pop("session_columns", None)  # no flag: the state's record says it
    if not run.mapping.anonymous:  # refused without identity, where it matches nothing
        settings.pop("attribution_lookback", None)
    conversions = str(settings.pop("conversion", "") or "")
    settings["channel_rules"] = str(settings.get("channel_rules", "")).split("#sha256:")[0]
    flags.update(settings)
    flags["job"] = opts.job
    if opts.input_timezone != "UTC":
        flags["input_timezone"] = opts.input_timezone
    flags.update({"from": f"{start:%Y-%m-%dT%H}", "to": f"{end:%Y-%m-%dT%H}"})
    pairs = [*flags.items(), *(("conversion", c) for c in conversions.split(";") if c)]
    command = " ".join(
        f"--{k.replace('_', '-')}" + ("" if v is True else f" {shlex.quote(str(v))}")
        for k, v in pairs
        if v not in ("", False)  # an optional rule left unset, or a flag left off
    )
    return (
        f"hours {start:%Y-%m-%dT%H}..{end:%Y-%m-%dT%H} were committed before and are now "
        f"retired, not recomputed; recompute them with: sessionize batch {command}"
    )


def _hour_of(version: int) -> datetime:
    """The folder's wall hour a version names."""
    return datetime.strptime(str(version), "%Y%m%d%H")


def _label(version: int) -> str:
    return f"hour {version_hour(version)}"
