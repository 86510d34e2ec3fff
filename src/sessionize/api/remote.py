"""A stream over Spark Connect, seen from the client.

There the `foreachBatch` function (the batch runner) is pickled and runs in a Python process
of the Connect server: what it records and prints stays there. The client learns of each
committed batch from the progress log the runner appends to (it lives with the checkpoint,
which both sides see), and of a failed batch from the text of the error Spark sends back.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, MutableSequence

from sessionize.engines.progress import read_progress
from sessionize.engines.session_report import session_line
from sessionize.engines.warnings import batch_warnings, mapping_warnings
from sessionize.errors import SessionizeError, raised_in_task


def quiet(line: str) -> None:
    """on_batch of the server's copy of the runner: the client prints (ProgressTail)."""


class ProgressTail:
    """The batch records a run adds to its progress log, reported once each."""

    def __init__(
        self,
        path: str | None,
        on_batch: Callable[[str], None],
        records: MutableSequence[dict] | None = None,  # a deque keeps only the last ones
        line: Callable[[str, dict], str] = session_line,  # the engine's `progress_line`
    ):
        self.path = path
        self.on_batch = on_batch
        self.line = line
        self.records: MutableSequence[dict] = [] if records is None else records
        self.on_record: Callable[[dict], None] | None = None  # each new record (metrics)
        self._seen = {_key(r) for r in self._read()}  # logged before this run
        self._lock = threading.Lock()  # drained by the waiting thread and by metrics scrapes

    def drain(self) -> None:
        with self._lock:
            self._drain()

    def _drain(self) -> None:
        logged = self._read()
        keys = [_key(r) for r in logged]
        new = [(k, r) for k, r in zip(keys, logged, strict=True) if k not in self._seen]
        # Only what the log still holds can be read again: the rest is forgotten, so that
        # the set stays as small as the rotated log.
        self._seen = set(keys)
        for _, record in new:
            self.records.append(record)
            if self.on_record is not None:
                self.on_record(record)
            label = f"batch {record['version']}"
            self.on_batch(self.line(label, record))
            for warning in batch_warnings(label, record, {}):  # reasons stay on the server
                self.on_batch(warning)
            mapping_warnings(record, self.on_batch)

    def _read(self) -> list[dict]:
        return read_progress(self.path) if self.path else []


def _key(record: dict) -> str:
    return json.dumps(record, sort_keys=True)


def failure_of(exc: BaseException) -> SessionizeError | None:
    """The SessionizeError a batch raised on the server, from the text of Spark's error."""
    return raised_in_task(exc)
