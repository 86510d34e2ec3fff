"""`sessionize rewind`: undo the batches of a stream after batch N, all parts together.

Batches 0..N stay committed; every later batch is undone in Spark's logs, the state and the
outputs, so that the next `sessionize stream` with the same flags recomputes from N+1 what
those batches read, plus anything new (docs/design.md, "Rewind"). Order:

  1. take the checkpoint's lease (a running query makes the rewind refuse) and check N;
  2. write the intent `CHECKPOINT/sessionize-rewind.json`: from here on a stream refuses to
     start until a rewind to the same N completes;
  3. retire the outputs' rows of batches > N (newest batch first: readers see a prefix
     0..K of the batches at every moment, each batch whole or absent);
  4. the state back to version N, by the engine that keeps it (engines/restorable.py: our
     store drops job records, then partition versions; Spark's store its version files
     after N+1 and the engine's batch records);
  5. Spark's logs: commits, the file source's seen-files log, offsets, then the progress
     log's lines of undone batches;
  6. delete the intent.

Each step is idempotent, so a rewind killed at any point completes when run again. N = -1
resets the query completely, including the settings it was bound to.
"""

from __future__ import annotations

import contextlib
import glob
import json
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime

from sessionize.commands.history import (
    RecordedCheckpoint,
    batch_history,
    open_checkpoint,
)
from sessionize.engines.checkpoint import (
    FILE,
    batch_input,
    checkpoint_lease,
    clear_rewind_intent,
    rewind_intent,
    write_rewind_intent,
)
from sessionize.engines.spark_logs import (
    FILE_SOURCE_LOG,
    file_source_entries,
    log_ids,
    truncate_file_source_log,
    truncate_log,
)
from sessionize.errors import ConfigError, StateError
from sessionize.faults import pause_point
from sessionize.fs import delete_dir, is_dir, resolve_fs


@dataclass
class RewindPlan:
    to_batch: int
    batches: list[int]  # planned or committed batches to undo
    files: int  # files the file source will read again
    offsets: object  # the source's end offset after the rewind (None: from the start)
    rows: dict[str, int]  # output rows to retire, per output
    state: str  # which state versions go


def rewind(
    checkpoint: str,
    to_batch: int,
    *,
    dry_run: bool = False,
    state: str | None = None,
    say: Callable[[str], None] = print,
    accept_duplicates: bool = False,
) -> RewindPlan:
    """Rewind the stream of `checkpoint` to after batch `to_batch` (-1: before the first);
    `accept_duplicates` lets it rewind over batches on Kafka, which the rerun repeats."""
    if to_batch < -1:
        raise ConfigError(f"--to-batch {to_batch}: give a committed batch id, or -1")
    if not is_dir(checkpoint):
        raise ConfigError(f"--checkpoint {checkpoint} is not a directory")
    with checkpoint_lease(checkpoint):
        unfinished = rewind_intent(checkpoint)
        # A rewind to -1 cut short may have deleted the settings already: its intent has them.
        ck = open_checkpoint(checkpoint, state, (unfinished or {}).get("settings"))
        if unfinished is not None and unfinished["to_batch"] != to_batch:
            raise StateError(
                f"checkpoint {checkpoint} has an unfinished rewind to batch "
                f"{unfinished['to_batch']}: complete it first with --to-batch "
                f"{unfinished['to_batch']}"
            )
        if unfinished is None:
            _check_target(ck, to_batch)
        plan = _plan(ck, to_batch)
        for line in plan_lines(plan):
            say(line)
        if dry_run:
            say("dry run: nothing was changed")
            return plan
        if accept_duplicates:  # then a Kafka sink accepts; folded Parquet still refuses
            ck.accept_duplicates = True
        sink = ck.sink()  # before the intent: a refused rewind leaves the stream as it was
        if sink is not None:
            sink.check_retractable(to_batch + 1, "add --accept-duplicates")
        started = time.perf_counter()
        write_rewind_intent(
            checkpoint,
            {
                "to_batch": to_batch,
                "undo": plan.batches,
                "settings": ck.settings,
                "started_at": datetime.now(UTC).isoformat(timespec="seconds"),
            },
        )
        _undo(ck, to_batch)
        clear_rewind_intent(checkpoint)
        rerun = "`stateful.stream`" if "processor" in ck.settings else "`sessionize stream`"
        say(
            f"rewound {checkpoint} to batch {to_batch} in {time.perf_counter() - started:.1f}s: "
            f"run the same {rerun} command to recompute from batch {to_batch + 1}"
        )
        return plan


def _check_target(ck: RecordedCheckpoint, to_batch: int) -> None:
    if to_batch == -1:
        return
    history = batch_history(ck)
    if to_batch not in history.committed:
        last = history.committed[-1] if history.committed else None
        span = f"committed: up to batch {last}" if last is not None else "none is committed"
        raise StateError(
            f"batch {to_batch} is not a committed batch of {ck.path} ({span}); "
            "see `sessionize history`"
        )
    if to_batch not in history.restorable:
        oldest = history.restorable[0] if history.restorable else None
        raise StateError(
            f"batch {to_batch} of {ck.path} can no longer be restored: the oldest restorable "
            f"batch is {oldest} ({history.oldest_reason}); rewind to a later batch or to -1"
        )


def _plan(ck: RecordedCheckpoint, to_batch: int) -> RewindPlan:
    planned = set(log_ids(ck.path, "offsets")) | set(log_ids(ck.path, "commits"))
    batches = sorted(b for b in planned if b > to_batch)
    files = sum(1 for e in file_source_entries(ck.path) if e["batchId"] > to_batch)
    offsets = batch_input(ck.path, to_batch).get("offsets") if to_batch >= 0 else None
    sink = ck.sink()
    rows = {}
    if sink is not None:
        rows = {name: sink.rows_from(name, to_batch + 1) for name in ck.outputs}
    state = ck.state.describe_drop(to_batch)
    return RewindPlan(to_batch, batches, files, offsets, rows, state)


def plan_lines(plan: RewindPlan) -> list[str]:
    undo = (
        f"batches {plan.batches[0]}..{plan.batches[-1]} ({len(plan.batches)})"
        if plan.batches
        else "no batch"
    )
    where = "the start" if plan.offsets is None else f"after batch {plan.to_batch}"
    if isinstance(plan.offsets, dict) and "partitions" in plan.offsets:  # Kafka
        parts = sorted(plan.offsets["partitions"].items())
        where = "Kafka offsets " + " ".join(f"{p}:{o}" for p, o in parts)
    elif isinstance(plan.offsets, dict) and "shards" in plan.offsets:  # Kinesis
        shards = sorted(plan.offsets["shards"].items())
        where = "after Kinesis sequence numbers " + " ".join(
            f"{s}:{(pos or {}).get('after') or 'start'}" for s, pos in shards
        )
    rows = ", ".join(f"{n} {name}" for name, n in plan.rows.items()) or "no output recorded"
    return [
        f"undo: {undo}",
        f"input: read again from {where} ({plan.files} files of the file source)",
        f"outputs: retire {rows}",
        f"state: drop {plan.state}",
    ]


def _undo(ck: RecordedCheckpoint, to_batch: int) -> None:
    sink = ck.sink()
    if sink is not None:
        sink.invalidate_from(to_batch + 1)  # step 3
    pause_point("rewind-outputs", to_batch)
    fs, base = resolve_fs(ck.path)
    ck.state.truncate_after(to_batch)  # step 4
    pause_point("rewind-state", to_batch)
    truncate_log(ck.path, "commits", to_batch)  # step 5
    truncate_file_source_log(ck.path, to_batch)
    truncate_log(ck.path, "offsets", to_batch)
    if to_batch == -1:
        for name in ("commits", "offsets", FILE_SOURCE_LOG.split("/")[0]):
            delete_dir(fs, f"{base}/{name}")
        with contextlib.suppress(FileNotFoundError):
            fs.delete_file(f"{base}/{FILE}")  # new settings are accepted from now on
    pause_point("rewind-logs", to_batch)
    log = ck.progress_log()
    if log:
        _trim_progress(log, to_batch)


def _trim_progress(path: str, to_batch: int) -> None:
    """Keep the progress log's lines of batches 0..to_batch (rotated files included). A
    log reached through a symlink is rewritten where it is: the link stays a link."""
    for name in [path, *glob.glob(f"{path}.[0-9]*")]:
        if not os.path.exists(name):
            continue
        name = os.path.realpath(name)
        with open(name, encoding="utf-8", errors="replace") as f:
            lines = f.readlines()
        kept = [line for line in lines if _version(line) <= to_batch]
        if len(kept) == len(lines):
            continue
        with open(f"{name}.rewind.tmp", "w", encoding="utf-8") as f:
            f.writelines(kept)
        os.replace(f"{name}.rewind.tmp", name)


def _version(line: str) -> int:
    try:
        return int(json.loads(line)["version"])
    except (ValueError, KeyError, TypeError):
        return -1  # a torn line: kept, readers skip it
