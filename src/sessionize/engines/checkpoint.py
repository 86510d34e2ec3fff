"""A stream's checkpoint: where it is, what it was created with, Spark's own progress in it.

`Checkpoint` is made once from `--checkpoint` (`Checkpoint.at`: the only place that reads
the string) and passed on: its place, file system, records (`sessionize.json`,
`sessionize-paths.json`, ...), lease and the paths below it. The functions below take it,
or a path (made into one at once).

A checkpoint belongs to one configuration: the engine and state, the session rules and the
partition count are part of the state (sessions split and expire by them, and keys are
placed by the partition count). `sessionize.json` in the checkpoint records them at the
first start; a later start with different settings is refused with the differences spelled
out as flags, instead of silently mixing two semantics.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, cast

import pyarrow.fs as pafs

from sessionize.config import DEFAULT_RULES_RECORD, describe_differences
from sessionize.engines.spark_logs import file_source_entries
from sessionize.errors import IncompatibleCheckpoint, StateError
from sessionize.fs import check_resolvable, child, listing, location_key, resolve_fs
from sessionize.mapping import DEFAULT_RECORD
from sessionize.places import same_place
from sessionize.sinks.registry import sink_at
from sessionize.state import StateBackend
from sessionize.state.lease import Lease
from sessionize.state.records import LEASE_DIR, FileRecords, Records

if TYPE_CHECKING:
    from sessionize.engines.keyed import KeyedSettings

FILE = "sessionize.json"
OUTPUT_RECORD = "_sessionize.json"  # in a batch job's output: the state it goes with
__all__ = ["LEASE_DIR", "Checkpoint"]


@dataclass(frozen=True)
class Checkpoint:
    """A stream's checkpoint: Spark's logs and our records in one directory (local, HDFS
    or another pyarrow file system). Pickles as its place.

    >>> Checkpoint.at("chk/").child("state").endswith("/chk/state")
    True
    """

    place: str  # as given, with the options that reach it

    @staticmethod
    def at(place: str, flag: str = "--checkpoint") -> Checkpoint:
        """The checkpoint at `place`, a path or URI a pyarrow file system reads.

        Raises:
            ConfigError: a scheme no file system reads, naming `flag`.
        """
        check_resolvable(place, flag)
        return Checkpoint(place)

    @staticmethod
    def of(checkpoint: Checkpoint | str) -> Checkpoint:
        """`checkpoint` as a Checkpoint (a path is made into one)."""
        return checkpoint if isinstance(checkpoint, Checkpoint) else Checkpoint(checkpoint)

    @functools.cached_property
    def _resolved(self) -> tuple[pafs.FileSystem, str]:
        return resolve_fs(self.place)

    @property
    def fs(self) -> pafs.FileSystem:
        return self._resolved[0]

    @property
    def base(self) -> str:
        """The checkpoint's path on `fs`."""
        return self._resolved[1]

    @functools.cached_property
    def records(self) -> Records:
        return FileRecords(self.place)

    @property
    def key(self) -> str:
        """One spelling of its place (fs.location_key), as owners and records name it."""
        return location_key(self.place)

    def child(self, *parts: str) -> str:
        """The path or URI of `parts` below the checkpoint (options kept at the end)."""
        return child(self.place, *parts)

    def lease(self) -> Lease:
        """One driver at a time runs its query (state/lease.py)."""
        return Lease(self.records.lease_records(), f"checkpoint {self.place}")

    def __str__(self) -> str:
        return self.place

    def __getstate__(self) -> dict:
        return {"place": self.place}

    def __setstate__(self, state: dict) -> None:
        object.__setattr__(self, "place", state["place"])


CheckpointLike = Checkpoint | str


def read_settings(checkpoint: CheckpointLike) -> dict[str, object]:
    """The settings `checkpoint` recorded ({} for a new one). A checkpoint from before
    mappings and the optional session rules could be chosen has the default ones (unset
    rules); one from before it recorded its output and input has those of its last run
    (`sessionize-paths.json`)."""
    try:
        settings = recorded(checkpoint)
        if not isinstance(settings, dict):
            raise ValueError("not a JSON object")
    except ValueError as e:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
        raise StateError(
            f"checkpoint {checkpoint}: {FILE} is not readable ({e}); restore it from a backup "
            "of the checkpoint, or start over with a new --checkpoint"
        ) from e
    if not settings:
        return {}
    last_run = recorded(checkpoint, PATHS_FILE)
    older = {
        k: last_run[k]
        for k in LOCATIONS
        if last_run.get(k) not in (None, "dataframe") and k not in settings
    }
    return {**DEFAULT_RECORD, **DEFAULT_RULES_RECORD, **older, **settings}


def check_or_record(checkpoint: CheckpointLike, settings: dict[str, object]) -> None:
    """Record `settings` in a new checkpoint, or refuse if it was created with others.

    A setting the checkpoint does not mention (recorded before the setting existed) is
    taken as this run's and added to the record. Places (`output`, `input`, a `files:PATH`
    state) are compared by `location_key`: one place, whatever its spelling."""
    processor = recorded(checkpoint).get("processor")
    if processor is not None:
        raise IncompatibleCheckpoint(
            f"checkpoint {checkpoint} belongs to the stateful job of processor {processor}, "
            "not to a session job: give the session job a checkpoint of its own"
        )
    recorded_settings = read_settings(checkpoint)
    before = {k: comparable(k, v) for k, v in recorded_settings.items()}
    now = {k: comparable(k, v) for k, v in settings.items()}
    changed = {k for k in now if k in before and not _same(k, before[k], now[k])}
    if changed:
        diffs = describe_differences({k: before[k] for k in changed}, {k: now[k] for k in changed})
        raise IncompatibleCheckpoint(
            f"checkpoint {checkpoint} was created with {diffs}: "
            + _advice(checkpoint, changed, before, now)
        )
    if set(settings) - set(recorded(checkpoint)):
        places = {k: now[k] for k in LOCATIONS if k in now}
        write_record(checkpoint, FILE, {**recorded_settings, **settings, **places})


LOCATIONS = ("output", "input")  # where a checkpoint writes and reads: compared as places


def comparable(key: str, value: object) -> object:
    """A recorded setting as it is compared: places by `location_key`."""
    if key in LOCATIONS and isinstance(value, str) and value.startswith("kafka://"):
        # A topic (an output's topic prefix) is the same place through any of its brokers.
        return "kafka://*/" + value.split("?", 1)[0].rstrip("/").rsplit("/", 1)[-1]
    if key in LOCATIONS and isinstance(value, str):
        return location_key(value)
    if key == "state" and isinstance(value, str) and value.startswith("files:"):
        return "files:" + location_key(value.removeprefix("files:"))
    return value


def same_setting(key: str, a: object, b: object) -> bool:
    """Whether two values of a recorded setting agree: places as the OS resolves them
    (a symlink, `..` or a mount of the recorded directory is that directory)."""
    return _same(key, comparable(key, a), comparable(key, b))


def _same(key: str, a: object, b: object) -> bool:
    """`same_setting` of two values `comparable` gave."""
    if a == b:
        return True
    if key not in (*LOCATIONS, "state") or not (isinstance(a, str) and isinstance(b, str)):
        return False
    if key == "state":  # `files:PATH`
        a, b = a.removeprefix("files:"), b.removeprefix("files:")
    return os.path.isabs(a) and os.path.isabs(b) and same_place(a, b)


def _advice(
    checkpoint: CheckpointLike,
    changed: set[str],
    before: dict[str, object],
    now: dict[str, object],
) -> str:
    """What to do about a refused change: a way for every changed flag, and a fresh start
    naming everything that must be new at once, so that following the advice is not
    refused again for another flag."""
    ways = []
    if "output" in changed:
        ways.append(
            "its outputs move only deliberately: stop the stream, then run `sessionize "
            f"maintain --output {before['output']} --checkpoint {checkpoint} --move-output "
            f"{now['output']}`, or rerun with the recorded --output"
        )
    if "input" in changed:
        ways.append(
            "a checkpoint knows what it read of one input only: rerun with the recorded --input"
        )
    if "state" in changed:
        ways.append(
            "move a state deliberately with `sessionize state migrate`, or rerun with "
            "the recorded --state (or leave --state out)"
        )
    others = changed - {"output", "input", "state"}
    if others:
        ways.append(
            f"leave {'these flags' if len(others) > 1 else 'the flag'} out to use the recorded "
            "values, or give the same ones (`sessionize rewind --checkpoint "
            f"{checkpoint} --to-batch -1` starts this job over with new ones)"
        )
    fresh = "a new --checkpoint and a new --output"
    if before.get("state") not in (None, "files", "spark-rocksdb", "spark-hdfs"):
        # a store outside the checkpoint keeps the job's batches: another job there
        fresh = "a new --checkpoint, a new --output and a new --job"
    return "; ".join(ways) + f"; or start over with {fresh}"


def offset_log(checkpoint: CheckpointLike, batch_id: int) -> tuple[dict, object] | None:
    """Spark's offset log entry of a batch: (its metadata, the source's end offset), or None
    when the batch was never planned. The metadata holds `batchTimestampMs` and
    `batchWatermarkMs`; a re-executed batch reuses the entry."""
    ck = Checkpoint.of(checkpoint)
    try:
        with ck.fs.open_input_stream(f"{ck.base}/offsets/{batch_id}") as f:
            lines = f.read().decode().splitlines()
    except FileNotFoundError:
        return None
    offsets = json.loads(lines[2]) if len(lines) > 2 and lines[2] != "-" else None
    return json.loads(lines[1]), offsets


def batch_timestamp_us(checkpoint: CheckpointLike, batch_id: int) -> int:
    """The time Spark fixed for a batch in its offset log (`batchTimestampMs`), in µs.

    A re-executed batch reuses its logged offsets and this time, so rules that compare
    event times with "now" give the same answer on every attempt.
    """
    entry = offset_log(checkpoint, batch_id)
    if entry is None:
        raise FileNotFoundError(f"{checkpoint}/offsets/{batch_id}")
    return int(entry[0]["batchTimestampMs"]) * 1000


def last_committed_batch(checkpoint: CheckpointLike) -> int | None:
    """The highest batch id in Spark's commit log, or None for a new checkpoint."""
    ck = Checkpoint.of(checkpoint)
    ids = [
        int(i.base_name)
        for i in listing(ck.fs, f"{ck.base}/commits")
        if re.fullmatch(r"\d+", os.path.basename(i.path))
    ]
    return max(ids) if ids else None


def batch_input(checkpoint: CheckpointLike, batch_id: int) -> dict[str, object]:
    """What batch `batch_id` read, from Spark's logs: the source's end offset as Spark
    logged it, and for the file source the number of files (plain or compacted log).

    The file source's log numbers its own batches: a batch reads the log's batches after
    the previous batch's `logOffset` up to its own. They are the query's batch ids until a
    driver dies between the two logs' writes; the restart then reads two log batches in
    one query batch."""
    entry = offset_log(checkpoint, batch_id)
    if entry is None:
        return {}
    out: dict[str, object] = {"offsets": entry[1]}
    end = _log_offset(entry[1])
    if end is None:
        return out
    before = offset_log(checkpoint, batch_id - 1) if batch_id > 0 else None
    start = _log_offset(before[1]) if before is not None else None
    ck = Checkpoint.of(checkpoint)
    fs, base = ck.fs, ck.base
    for log_batch in range(-1 if start is None else start, end):
        for name in (f"{log_batch + 1}", f"{log_batch + 1}.compact"):
            try:
                with fs.open_input_stream(f"{base}/sources/0/{name}") as f:
                    lines = f.read().decode().splitlines()[1:]
            except FileNotFoundError:
                continue
            entries = [json.loads(x) for x in lines if x]
            files = sum(1 for e in entries if e.get("batchId") == log_batch + 1)
            out["files"] = int(out.get("files", 0)) + files  # type: ignore[call-overload]
    return out


def _log_offset(offset: object) -> int | None:
    """The file source's offset (`{"logOffset": K}`) as K; None for another source."""
    if isinstance(offset, dict) and isinstance(offset.get("logOffset"), int):
        return offset["logOffset"]
    return None


def checkpoint_lease(checkpoint: CheckpointLike) -> Lease:
    """The lease of a checkpoint: one driver at a time runs its query (state/lease.py)."""
    return Checkpoint.of(checkpoint).lease()


def output_records(output: str) -> Records:
    """Where a batch job keeps its records and lease for `output`: where its sink says
    (the output's directory, a Kafka output's staging place, a PostgreSQL schema)."""
    return sink_at(output).records()


def output_lease(output: str) -> Lease:
    """The lease of an output: one driver writes it at a time."""
    return output_records(output).lease("output")


PATHS_FILE = "sessionize-paths.json"


def record_paths(checkpoint: CheckpointLike, paths: dict[str, str | None]) -> None:
    """Where the last run read and wrote, as given (with the options that reach them: tools
    read it); `sessionize.json` holds the places that are compared between runs."""
    write_record(checkpoint, PATHS_FILE, paths)


def write_record(checkpoint: CheckpointLike, name: str, record: dict) -> None:
    """A JSON record of the checkpoint, written aside and renamed into place: a crash leaves
    the old record or the new one."""
    Checkpoint.of(checkpoint).records.write(name, record)


def recorded(checkpoint: CheckpointLike, name: str = FILE) -> dict:
    """A JSON record of the checkpoint (`sessionize.json` by default); {} when missing."""
    return Checkpoint.of(checkpoint).records.read(name)


def last_offsets(checkpoint: CheckpointLike) -> dict | None:
    """The source's end offset of the last committed batch, as Spark logged it."""
    last = last_committed_batch(checkpoint)
    return None if last is None else cast(dict | None, batch_input(checkpoint, last).get("offsets"))


def seen_files(checkpoint: CheckpointLike) -> set[str]:
    """Every file the file source has taken into a batch (its log, compacted or not)."""
    return {e["path"] for e in file_source_entries(str(checkpoint))}


REWIND_FILE = "sessionize-rewind.json"


def rewind_intent(checkpoint: CheckpointLike) -> dict | None:
    """The record of a rewind that started and has not finished, or None."""
    return recorded(checkpoint, REWIND_FILE) or None


def write_rewind_intent(checkpoint: CheckpointLike, intent: dict) -> None:
    """Written whole (aside, then moved) before a rewind changes anything."""
    write_record(checkpoint, REWIND_FILE, intent)


def clear_rewind_intent(checkpoint: CheckpointLike) -> None:
    """The last step of a rewind."""
    ck = Checkpoint.of(checkpoint)
    with contextlib.suppress(FileNotFoundError):
        ck.fs.delete_file(f"{ck.base}/{REWIND_FILE}")


def refuse_if_rewinding(checkpoint: CheckpointLike) -> None:
    """A query must not start on a checkpoint whose rewind was interrupted half way."""
    intent = rewind_intent(checkpoint)
    if intent is not None:
        raise StateError(
            f"checkpoint {checkpoint} has an unfinished rewind to batch {intent['to_batch']}: "
            f"complete it with `sessionize rewind --checkpoint {checkpoint} --to-batch "
            f"{intent['to_batch']}`, then start the stream again"
        )


# A stateful job's settings recorded before they existed, as those jobs ran: compared so,
# a restart that adds one (a gauge, whose running sum would start mid-job) is refused.
# A follow-on (`stateful.FollowOn`) added to or dropped from a running job is refused too.
_PROCESSOR_RECORD_DEFAULTS: dict[str, object] = {"gauges": [], "follow_on": None}


def processor_record(recorded: dict | None) -> dict:
    """A stateful job's recorded settings (a checkpoint's or a store's entry) as they
    compare with a run's: a setting recorded before it existed reads as what those jobs
    ran with. Nothing recorded stays {}."""
    return {**_PROCESSOR_RECORD_DEFAULTS, **recorded} if recorded else {}


def check_or_record_processor(checkpoint: CheckpointLike, settings: dict[str, object]) -> None:
    """Record a stateful job's `settings` (its processor's name, key, state schema,
    parameters, partitions, lateness, output) in a new checkpoint, or refuse, in one line
    naming every difference, a checkpoint created with others or by a session job."""
    before = recorded(checkpoint)
    now = {k: json.loads(json.dumps(comparable(k, v))) for k, v in settings.items()}
    if before and "processor" not in before:
        raise IncompatibleCheckpoint(
            f"checkpoint {checkpoint} belongs to a session job, not to processor "
            f"{settings['processor']}: give this job a checkpoint of its own"
        )
    was = {k: json.loads(json.dumps(comparable(k, v))) for k, v in processor_record(before).items()}
    diffs = settings_differences(was, now)
    if diffs:
        raise IncompatibleCheckpoint(
            f"checkpoint {checkpoint} was created with {diffs}: run it with what it was "
            "created with, or start over with a new checkpoint and state"
        )
    if set(settings) - set(before):
        write_record(checkpoint, FILE, {**before, **settings})


def follow_on_job(settings: Mapping[str, object], job: str) -> str | None:
    """The store job of the second step of a job whose recorded settings are `settings`
    (a processor's `follow_on`; a session job's users step with `--anonymous-field`),
    None without one: rewind, batch reprocessing and the state tools act on both."""
    then = settings.get("follow_on")
    if isinstance(then, dict):
        return str(then["job"])
    if "processor" not in settings and settings.get("anonymous_field"):
        return f"{job}.users"
    return None


def settings_differences(was: Mapping[str, object], now: Mapping[str, object]) -> str:
    """`KEY OLD (now NEW)` for each setting recorded with another value, joined by `; `
    ('': none differs); the settings only one side has are not compared."""
    changed = [k for k in now if k in was and was[k] != now[k]]
    return "; ".join(f"{k} {was[k]!r} (now {now[k]!r})" for k in changed)


def check_follow_on_rows(backend: StateBackend, then: KeyedSettings | None) -> None:
    """Refuse in one line a follow-on (a session job's users step) whose committed state
    holds rows of other columns than its processor keeps: written by an earlier version
    (`users` before it summed conversions), they cannot be read. A stateful job's
    checkpoint refuses that before (its `follow_on` record)."""
    if then is None or not backend.job_versions(then.job):
        return
    stored = backend.read_job_settings(then.job) or {}
    was = str(stored.get("state_schema") or "")
    now = str(then.record()["state_schema"])
    if was and was != now:
        gained = [c for c in now.split(", ") if c not in was.split(", ")]
        lost = [c for c in was.split(", ") if c not in now.split(", ")]
        change = "; ".join(
            part
            for part in (
                f"this run adds {', '.join(gained)}" if gained else "",
                f"drops {', '.join(lost)}" if lost else "",
            )
            if part
        )
        raise IncompatibleCheckpoint(
            f"the state of job '{then.job}' was written by an earlier version, with other "
            f"columns ({change}): start the job over (`sessionize rewind --to-batch -1`, or "
            "a new --output for a batch job)"
        )
