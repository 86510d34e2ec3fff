"""What a checkpoint was created with, and Spark's own progress in it.

A checkpoint belongs to one configuration: the engine and state, the session rules and the
partition count are part of the state (sessions split and expire by them, and keys are
placed by the partition count). `sessionize.json` in the checkpoint records them at the
first start; a later start with different settings is refused with the differences spelled
out as flags, instead of silently mixing two semantics.
"""

from __future__ import annotations

import json
import os
import re

from sessionize.errors import IncompatibleCheckpoint, StateError
from sessionize.sinks.parquet import resolve_fs

FILE = "sessionize.json"


def check_or_record(checkpoint: str, settings: dict[str, object]) -> None:
    """Record `settings` in a new checkpoint, or refuse if it was created with others."""
    fs, base = resolve_fs(checkpoint)
    path = f"{base}/{FILE}"
    try:
        with fs.open_input_stream(path) as f:
            recorded = json.loads(f.read())
        if not isinstance(recorded, dict):
            raise ValueError("not a JSON object")
    except ValueError as e:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
        raise StateError(
            f"checkpoint {checkpoint}: {FILE} is not readable ({e}); restore it from a backup "
            "of the checkpoint, or start over with a new --checkpoint"
        ) from e
    except FileNotFoundError:
        fs.create_dir(base, recursive=True)
        with fs.open_output_stream(path) as f:
            f.write(json.dumps(settings, indent=2, sort_keys=True).encode())
        return
    diffs = [
        f"--{k.replace('_', '-')} {recorded.get(k)!s} (this run: {settings.get(k)!s})"
        for k in sorted(set(recorded) | set(settings))
        if recorded.get(k) != settings.get(k)
    ]
    if diffs:
        raise IncompatibleCheckpoint(
            f"checkpoint {checkpoint} was created with "
            + "; ".join(diffs)
            + ": rerun with the same settings, or use a new --checkpoint"
        )


def batch_timestamp_us(checkpoint: str, batch_id: int) -> int:
    """The time Spark fixed for a batch in its offset log (`batchTimestampMs`), in µs.

    A re-executed batch reuses its logged offsets and this time, so rules that compare
    event times with "now" give the same answer on every attempt.
    """
    fs, base = resolve_fs(checkpoint)
    with fs.open_input_stream(f"{base}/offsets/{batch_id}") as f:
        metadata = json.loads(f.read().decode().splitlines()[1])
    return int(metadata["batchTimestampMs"]) * 1000


def last_committed_batch(checkpoint: str) -> int | None:
    """The highest batch id in Spark's commit log, or None for a new checkpoint."""
    fs, base = resolve_fs(checkpoint)
    from pyarrow import fs as pafs

    sel = pafs.FileSelector(f"{base}/commits", allow_not_found=True)
    ids = [
        int(i.base_name)
        for i in fs.get_file_info(sel)
        if re.fullmatch(r"\d+", os.path.basename(i.path))
    ]
    return max(ids) if ids else None
