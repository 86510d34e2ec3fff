"""`sessionize history`: the committed batches of a stream that can still be restored.

A batch B can be restored (`sessionize rewind --to-batch B`) when everything a restart after
it needs is still kept: Spark's offset and commit log entries of B, and its state: our
store's job record and version B of every partition, or for the `spark-*` engines Spark's
state version B+1 (batch B+1 reads version B+1). Spark and our store keep the same number of
batches (`engines.runner.RETAIN`); what is listed is what both still have.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from sessionize.commands.options import progress_path
from sessionize.config import counted, format_instant
from sessionize.engines.checkpoint import (
    FILE,
    PATHS_FILE,
    batch_input,
    offset_log,
    recorded,
)
from sessionize.engines.progress import read_progress
from sessionize.engines.runner import RETAIN, RETAIN_CONF
from sessionize.engines.spark_logs import log_ids, spark_state_versions
from sessionize.engines.spark_state import PROVIDERS, BatchRecords
from sessionize.errors import ConfigError
from sessionize.fs import is_dir
from sessionize.sinks.base import Sink
from sessionize.sinks.registry import accepting_duplicates, open_sink
from sessionize.state import StateBackend, open_backend


@dataclass
class Checkpoint:
    """A stream's checkpoint and what its runs recorded in it (settings and paths)."""

    path: str
    settings: dict
    paths: dict
    state_uri: str | None = None  # our store's URI (None: Spark's state)
    accept_duplicates: bool = False  # a rewind over batches on Kafka, which reruns repeat

    @property
    def job(self) -> str:
        return str(self.settings.get("job", "sessionize"))

    @property
    def spark_state(self) -> bool:
        return self.settings.get("state") in PROVIDERS

    def backend(self) -> StateBackend | None:
        return None if self.state_uri is None else open_backend(self.state_uri)

    def sink(self) -> Sink | None:
        output = self.paths.get("output")
        if not output:
            return None
        fmt = self.paths.get("output_format") or self.settings.get("output_format", "parquet")
        sink = open_sink(output, fmt, job=self.job)
        return accepting_duplicates(sink) if self.accept_duplicates else sink

    def progress_log(self) -> str | None:
        return self.paths.get("progress_log") or progress_path(None, self.path, "progress.jsonl")


def open_checkpoint(
    path: str, state: str | None = None, settings: dict | None = None
) -> Checkpoint:
    """The checkpoint at `path`; `state` gives the state URI when the recorded one had its
    password hidden (it must name the same store); `settings` stand in for a
    `sessionize.json` that is gone."""
    if not is_dir(path):
        raise ConfigError(f"--checkpoint {path} is not a directory")
    settings = recorded(path) or settings or {}
    if not settings:
        raise ConfigError(f"{path} is not a sessionize checkpoint (no {FILE})")
    paths = recorded(path, PATHS_FILE)
    ck = Checkpoint(path, settings, paths)
    if ck.spark_state:
        return ck
    if settings.get("state") == "files":
        ck.state_uri = f"files:{path.rstrip('/')}/state"
    else:
        ck.state_uri = _state_uri(path, paths.get("state") or str(settings["state"]), state)
    return ck


def _state_uri(path: str, recorded_uri: str, given: str | None) -> str:
    from sessionize.config import redact_uri

    if given is not None:
        if redact_uri(given) != redact_uri(recorded_uri):
            raise ConfigError(
                f"--state {redact_uri(given)} is not the state of checkpoint {path} "
                f"({recorded_uri})"
            )
        return given
    if "***" in recorded_uri:
        raise ConfigError(
            f"checkpoint {path} records its state as {recorded_uri}, without the secret: give "
            "it with --state URI"
        )
    return recorded_uri


@dataclass
class History:
    committed: list[int]  # Spark's commit log
    restorable: list[int]
    batches: list[dict] = field(default_factory=list)  # one per restorable batch
    oldest_reason: str = ""


def batch_history(ck: Checkpoint) -> History:
    """The restorable committed batches, with what each read and wrote."""
    committed = log_ids(ck.path, "commits")
    ok = set(committed) & set(log_ids(ck.path, "offsets"))
    limits = _state_limits(ck, committed)
    for floor in limits.values():
        ok = {b for b in ok if b >= floor}
    if not ck.spark_state:
        backend = ck.backend()
        assert backend is not None
        ok &= set(backend.job_versions(ck.job))
    restorable = sorted(ok)
    history = History(committed, restorable)
    history.oldest_reason = _reason(committed, restorable, limits)
    progress = {}
    log = ck.progress_log()
    if log:
        progress = {r["version"]: r for r in read_progress(log)}
    for b in restorable:
        history.batches.append(_describe(ck, b, progress.get(b)))
    return history


def _state_limits(ck: Checkpoint, committed: list[int]) -> dict[str, int]:
    """The oldest batch each kept part of the state still allows, by what keeps it."""
    if not committed:
        return {}
    if ck.spark_state:
        versions = spark_state_versions(ck.path)
        floors = [v[0] - 1 for v in versions.values() if v]
        return {"Spark's state store": max(floors)} if floors else {}
    backend = ck.backend()
    assert backend is not None
    limits = {}
    jobs = backend.job_versions(ck.job)
    if jobs:
        limits["the state's job records"] = jobs[0]
    floors = [backend.versions(ck.job, p) for p in backend.partitions(ck.job)]
    floors = [v[0] for v in floors if v]
    if floors:
        limits["the state's partition versions"] = max(floors)
    return limits


def _reason(committed: list[int], restorable: list[int], limits: dict[str, int]) -> str:
    if not restorable:
        return "no committed batch can be restored"
    oldest = restorable[0]
    if oldest == 0:
        return "it is the first batch"
    binding = [name for name, floor in limits.items() if floor == oldest]
    if committed and committed[0] == oldest:
        binding.insert(0, f"Spark's offset and commit logs ({RETAIN_CONF})")
    what = " and ".join(binding) or "the logs"
    return f"{what} keep the last {RETAIN} batches (retention); older ones are gone"


def _describe(ck: Checkpoint, b: int, progress: dict | None) -> dict:
    record = progress
    if record is None and ck.spark_state:
        record = BatchRecords(ck.path).read(b)
    elif record is None:
        backend = ck.backend()
        record = backend.read_job_record(ck.job, b) if backend else None
    record = record or {}
    counters = record.get("batch", {})
    entry = offset_log(ck.path, b)
    when = str(record.get("committed_at", ""))[:19].replace("+", "") or None
    when = f"{when}Z" if when else None
    if when is None and entry is not None:
        when = format_instant(int(entry[0]["batchTimestampMs"]) * 1000)
    read = record.get("input") or batch_input(ck.path, b)
    previous = batch_input(ck.path, b - 1).get("offsets") if b > 0 else None
    return {
        "batch": b,
        "when": when,
        "read": describe_read(read, previous),
        "lines": counters.get("records"),
        "events_in": counters.get("events_in"),
        "sessions_out": counters.get("sessions_out"),
        "late": counters.get("late"),
        "invalid": counters.get("invalid"),
        "watermark": format_instant(record.get("watermark")),
    }


def describe_read(read: dict, previous: object) -> str:
    """What a batch read: `3 files`, or per Kafka partition / Kinesis shard `from-to`."""
    if "files" in read:
        return counted(read["files"], "file")
    offsets = read.get("offsets")
    if isinstance(offsets, dict) and "partitions" in offsets:  # Kafka
        before = previous.get("partitions", {}) if isinstance(previous, dict) else {}
        parts = [f"{p}:{before.get(p, '')}-{o}" for p, o in sorted(offsets["partitions"].items())]
        return f"offsets {' '.join(parts)}"
    if isinstance(offsets, dict) and "shards" in offsets:  # Kinesis
        before = previous.get("shards", {}) if isinstance(previous, dict) else {}
        parts = []
        for shard, pos in sorted(offsets["shards"].items()):
            start = (before.get(shard) or {}).get("after") or "start"
            parts.append(f"{shard}:{start}..{pos.get('after')}")
        return f"sequence numbers {' '.join(parts)}"
    return "input unknown"


def history_lines(ck: Checkpoint, history: History) -> list[str]:
    lines = []
    for b in history.batches:
        lines.append(
            f"batch {b['batch']}  {b['when'] or '?'}  read {b['read']}  "
            f"{_n(b['lines'])} lines  {_n(b['invalid'])} invalid  {_n(b['events_in'])} events in  "
            f"{_n(b['sessions_out'])} sessions out  {_n(b['late'])} late  "
            f"watermark after {b['watermark'] or 'none'}"
        )
    if not history.committed:
        lines.append(f"checkpoint {ck.path} has no committed batch")
    elif history.restorable:
        lines.append(
            f"oldest restorable batch: {history.restorable[0]} ({history.oldest_reason}); "
            "`sessionize rewind --to-batch -1` starts over from nothing"
        )
    else:
        lines.append(f"no batch can be restored ({history.oldest_reason})")
    return lines


def _n(value: object) -> str:
    return "?" if value is None else f"{value:,}"
