"""The one atomic step that moves a checkpoint to another state: its recorded settings
(`sessionize.json`: the state and the partition count) are rewritten aside and renamed
into place, so a crash leaves either the old settings or the new ones, never a mix."""

from __future__ import annotations

import json
import secrets

from sessionize.commands.options import recorded_state
from sessionize.engines.checkpoint import FILE, comparable, recorded
from sessionize.fs import resolve_fs


def switch_checkpoint(checkpoint: str, state: str, partitions: int) -> dict:
    """Record `state` (as `--state` is recorded) and `partitions` in the checkpoint;
    returns the new settings. The rename is atomic on local and HDFS file systems."""
    settings = {**recorded(checkpoint), "state": state, "partitions": partitions}
    fs, base = resolve_fs(checkpoint)
    tmp = f"{base}/.{FILE}.{secrets.token_hex(6)}.tmp"
    with fs.open_output_stream(tmp) as f:
        f.write(json.dumps(settings, indent=2, sort_keys=True).encode())
    fs.move(tmp, f"{base}/{FILE}")
    return settings


def already_switched(checkpoint: str, to: str, partitions: int | None) -> bool:
    """Whether the checkpoint already records state `to` (a `--state` value) and
    `partitions` (None: any): a rerun after the switch was made."""
    settings = recorded(checkpoint)
    state = recorded_state(to)
    same_count = partitions is None or settings.get("partitions") == partitions
    return comparable("state", settings.get("state")) == comparable("state", state) and same_count
