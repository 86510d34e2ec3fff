"""The progress log: one JSON line per committed batch, for monitoring and `report`.

Each line is the batch record (counters, totals, watermark, state round trips and bytes)
plus `committed_at` (UTC, ISO-8601), `phases_s` (seconds spent planning, running the
tasks, publishing and recording) and `input` (what the batch read: the files, or the
offsets / sequence numbers per partition or shard). It is written after the batch is
committed, so a line is never about a batch that did not happen; a batch re-run after a
crash between commit and log gets a second line with the same `version` (readers keep the
last one).

The log rotates at `max_bytes`: `progress.jsonl` becomes `progress.jsonl.1` (and `.1`
becomes `.2`, ...), `keep` old files are kept.
"""

from __future__ import annotations

import json
import os
from datetime import UTC, datetime

DEFAULT_MAX_BYTES = 10 << 20
DEFAULT_KEEP = 3


class ProgressLog:
    """Appends batch records to a local JSON-lines file, rotating it by size."""

    def __init__(self, path: str, max_bytes: int = DEFAULT_MAX_BYTES, keep: int = DEFAULT_KEEP):
        self.path = path
        self.max_bytes = max_bytes
        self.keep = keep

    def append(self, record: dict) -> None:
        line = json.dumps(
            {**record, "committed_at": datetime.now(UTC).isoformat(timespec="milliseconds")},
            sort_keys=True,
        )
        os.makedirs(os.path.dirname(os.path.abspath(self.path)), exist_ok=True)
        if os.path.exists(self.path) and os.path.getsize(self.path) + len(line) > self.max_bytes:
            self._rotate()
        with open(self.path, "a", encoding="utf-8") as f:
            f.write(line + "\n")

    def _rotate(self) -> None:
        for i in range(self.keep - 1, 0, -1):
            older = f"{self.path}.{i}"
            if os.path.exists(older):
                os.replace(older, f"{self.path}.{i + 1}")
        os.replace(self.path, f"{self.path}.1")


def read_progress(path: str) -> list[dict]:
    """The records of a progress log, oldest first (see `read_progress_lines`)."""
    return read_progress_lines(path)[0]


def read_progress_lines(path: str) -> tuple[list[dict], int]:
    """The records of a progress log, oldest first, rotated files included, and the number of
    lines that are not a record (a line cut short by a crash while it was appended). A batch
    logged twice (re-run) keeps its last line."""
    files = [f"{path}.{i}" for i in range(99, 0, -1) if os.path.exists(f"{path}.{i}")]
    by_version: dict[int, dict] = {}
    torn = 0
    for name in [*files, path]:
        if not os.path.exists(name):
            continue
        with open(name, encoding="utf-8", errors="replace") as f:
            for line in f:
                if not line.strip():
                    continue
                try:
                    record = json.loads(line)
                    version = record["version"]
                except (ValueError, KeyError, TypeError):
                    torn += 1
                    continue
                by_version.pop(version, None)
                by_version[version] = record
    return list(by_version.values()), torn
