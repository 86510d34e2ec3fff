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
from sessionize.engines.keyed import with_invalid
from sessionize.engines.locate import restorable_state
from sessionize.engines.progress import read_progress
from sessionize.engines.restorable import RestorableState
from sessionize.engines.runner import RETAIN, RETAIN_CONF
from sessionize.engines.spark_logs import log_ids
from sessionize.errors import ConfigError
from sessionize.fs import is_dir
from sessionize.mapping import EventMapping
from sessionize.sinks.base import Sink
from sessionize.sinks.outputs import named, session_outputs
from sessionize.sinks.registry import open_sink


@dataclass
class RecordedCheckpoint:
    """A stream's checkpoint and what its runs recorded in it (settings and paths)."""

    path: str
    settings: dict
    paths: dict
    state: RestorableState  # its engine's backward half
    accept_duplicates: bool = False  # a rewind over batches on Kafka, which reruns repeat

    @property
    def job(self) -> str:
        return str(self.settings.get("job", "sessionize"))

    def sink(self) -> Sink | None:
        output = self.paths.get("output") or self.settings.get("output")
        if not output:
            return None
        fmt = self.paths.get("output_format") or self.settings.get("output_format", "parquet")
        outputs, mapping = None, None
        if "processor" in self.settings:
            outputs = named(self.outputs, record_key=self.settings.get("key"))
        else:  # a session job's: those of its recorded schema (3 adds `events`)
            mapping = EventMapping.from_record(self.settings)
        revise = bool(self.settings.get("revise_within"))  # `session_revisions` too
        sink = open_sink(output, fmt, job=self.job, outputs=outputs, mapping=mapping, revise=revise)
        return sink.accepting_duplicates() if self.accept_duplicates else sink

    @property
    def outputs(self) -> tuple[str, ...]:
        """The outputs a batch writes: a processor's as recorded with the invalid rows
        (older records name only the processor's), or the sessions'."""
        if "processor" in self.settings:
            return with_invalid(tuple(self.settings.get("outputs") or ()))
        mapping = EventMapping.from_record(self.settings)
        revise = bool(self.settings.get("revise_within"))
        return session_outputs(mapping, revise=revise).names

    def progress_log(self) -> str | None:
        return self.paths.get("progress_log") or progress_path(None, self.path, "progress.jsonl")


def open_checkpoint(
    path: str, state: str | None = None, settings: dict | None = None
) -> RecordedCheckpoint:
    """The checkpoint at `path`; `state` gives the state URI when the recorded one had its
    password hidden (it must name the same store); `settings` stand in for a
    `sessionize.json` that is gone."""
    if not is_dir(path):
        raise ConfigError(f"--checkpoint {path} is not a directory")
    settings = recorded(path) or settings or {}
    if not settings:
        raise ConfigError(f"{path} is not a sessionize checkpoint (no {FILE})")
    paths = recorded(path, PATHS_FILE)
    return RecordedCheckpoint(
        path, settings, paths, restorable_state(path, settings, paths.get("state"), state)
    )


@dataclass
class BatchHistory:
    committed: list[int]  # Spark's commit log
    restorable: list[int]
    batches: list[dict] = field(default_factory=list)  # one per restorable batch
    oldest_reason: str = ""


def batch_history(ck: RecordedCheckpoint) -> BatchHistory:
    """The restorable committed batches, with what each read and wrote."""
    committed = log_ids(ck.path, "commits")
    offsets = set(log_ids(ck.path, "offsets"))
    # Spark restarts after batch B from offsets/B and offsets/B-1: without the latter it
    # stops with "batch B-1 doesn't exist", so the oldest retained batch is not restorable.
    ok = {b for b in set(committed) & offsets if b == 0 or b - 1 in offsets}
    limits = _state_limits(ck, committed)
    for floor in limits.values():
        ok = {b for b in ok if b >= floor}
    ok = ck.state.restorable(ok)
    restorable = sorted(ok)
    history = BatchHistory(committed, restorable)
    history.oldest_reason = _reason(committed, restorable, limits, min(offsets, default=0))
    progress = {}
    log = ck.progress_log()
    if log:
        progress = {r["version"]: r for r in read_progress(log)}
    for b in restorable:
        history.batches.append(_describe(ck, b, progress.get(b)))
    return history


def _state_limits(ck: RecordedCheckpoint, committed: list[int]) -> dict[str, int]:
    """The oldest batch each kept part of the state still allows, by what keeps it."""
    if not committed:
        return {}
    return ck.state.floors()


def _reason(
    committed: list[int], restorable: list[int], limits: dict[str, int], first_offsets: int
) -> str:
    if not restorable:
        return "no committed batch can be restored"
    oldest = restorable[0]
    if oldest == 0:
        return "it is the first batch"
    binding = [name for name, floor in limits.items() if floor == oldest]
    if committed and oldest <= max(committed[0], first_offsets + 1):
        # The first kept batch itself is not restorable: a restart needs its predecessor.
        binding.insert(0, f"Spark's offset and commit logs ({RETAIN_CONF})")
    what = " and ".join(binding) or "the logs"
    return f"{what} keep the last {RETAIN} batches (retention); older ones are gone"


def _describe(ck: RecordedCheckpoint, b: int, progress: dict | None) -> dict:
    record = progress or ck.state.record(b) or {}
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
        "counters": counters.get("counters"),  # a processor's own
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


def history_lines(ck: RecordedCheckpoint, history: BatchHistory) -> list[str]:
    lines = []
    for b in history.batches:
        made = f"{_n(b['sessions_out'])} sessions out"
        if b["counters"] is not None:  # a processor's job: its counters instead
            made = "  ".join(f"{_n(v)} {k}" for k, v in sorted(b["counters"].items()))
        lines.append(
            f"batch {b['batch']}  {b['when'] or '?'}  read {b['read']}  "
            f"{_n(b['lines'])} lines  {_n(b['invalid'])} invalid  {_n(b['events_in'])} events in  "
            f"{made}  {_n(b['late'])} late  watermark after {b['watermark'] or 'none'}"
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
