"""Read the progress log: one JSON object per committed batch (the engine's batch record
plus `committed_at`), turned into columns over commit time for the report's plots."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from datetime import UTC, datetime

import numpy as np

from sessionize.engines.progress import read_progress_lines
from sessionize.fs import child, without_options

FILE_NAME = "progress.jsonl"  # under the checkpoint (engines/progress.py writes it)
BATCH_FILE_NAME = "_progress.jsonl"  # under the output of batch jobs


def default_path(output: str, checkpoint: str | None) -> str:
    """Where the job writes its progress log unless told otherwise."""
    if checkpoint:
        return child(checkpoint, FILE_NAME)
    return child(output, BATCH_FILE_NAME)


@dataclass
class Progress:
    """The batches of the log, in commit order; `missing` says why there are none."""

    path: str
    committed_at: np.ndarray = field(default_factory=lambda: np.array([], "datetime64[ms]"))
    version: np.ndarray = field(default_factory=lambda: np.array([], np.int64))
    duration_s: np.ndarray = field(default_factory=lambda: np.array([], float))
    records: np.ndarray = field(default_factory=lambda: np.array([], float))
    open_sessions: np.ndarray = field(default_factory=lambda: np.array([], float))
    state_bytes_read: np.ndarray = field(default_factory=lambda: np.array([], float))
    state_bytes_written: np.ndarray = field(default_factory=lambda: np.array([], float))
    bot_events: np.ndarray = field(default_factory=lambda: np.array([], float))  # --bots drop
    skipped_lines: int = 0
    missing: str | None = None

    @property
    def batches(self) -> int:
        return len(self.version)

    @property
    def events_per_s(self) -> np.ndarray:
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.where(self.duration_s > 0, self.records / self.duration_s, np.nan)


def read_progress(path: str) -> Progress:
    """The log at `path`; a missing or empty log gives a Progress that says so."""
    if not os.path.isfile(path):
        return Progress(path, missing=f"no progress log at {without_options(path)}")
    rows, skipped = [], 0
    for row in (records := read_progress_lines(path))[0]:
        try:
            row["_at"] = _instant(row["committed_at"])
            _ = row["batch"].get
        except (ValueError, KeyError, TypeError, AttributeError):
            skipped += 1
            continue
        rows.append(row)
    skipped += records[1]
    if not rows:
        return Progress(path, skipped_lines=skipped, missing=f"no batches in {path}")

    def batch(key: str) -> np.ndarray:
        return np.array([r["batch"].get(key, np.nan) for r in rows], dtype=float)

    return Progress(
        path,
        committed_at=np.array([r["_at"] for r in rows], "datetime64[ms]"),
        version=np.array([r["version"] for r in rows], np.int64),
        duration_s=np.array([r.get("duration_s", np.nan) for r in rows], dtype=float),
        records=batch("records"),
        open_sessions=batch("open_sessions"),
        state_bytes_read=batch("state_bytes_read"),
        state_bytes_written=batch("state_bytes_written"),
        bot_events=batch("bot_events"),
        skipped_lines=skipped,
    )


def _instant(iso: str) -> np.datetime64:
    """An ISO time (with offset or `Z`) as a naive UTC datetime64."""
    t = datetime.fromisoformat(iso.replace("Z", "+00:00"))
    if t.tzinfo is not None:
        t = t.astimezone(UTC).replace(tzinfo=None)
    return np.datetime64(t, "ms")
