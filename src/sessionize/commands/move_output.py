"""`sessionize maintain --move-output NEW`: a stopped job's outputs, moved on purpose.

A checkpoint records where its outputs are and refuses another `--output` (a stream
writing half its batches in one place and half in another would have rewinds retire only
one of them). Moving them is this one step: with the leases of the output and of the
checkpoint held (a running driver makes it refuse), every entry of the output directory
(the four outputs, staging, the progress log, a batch job's `_state`) is renamed into NEW,
then the checkpoint records NEW. An intent file in the old directory names NEW first, so a
move cut short completes when run again.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable
from contextlib import ExitStack

from sessionize.engines.checkpoint import (
    FILE,
    LEASE_DIR,
    PATHS_FILE,
    checkpoint_lease,
    output_lease,
    read_settings,
    recorded,
    refuse_if_rewinding,
    write_record,
)
from sessionize.errors import ConfigError, StateError
from sessionize.fs import is_local, location_key

INTENT = "_moving.json"  # in the old output while a move is under way
_STAYS = {LEASE_DIR, INTENT}


def move_output(
    output: str, new: str, *, checkpoint: str | None = None, say: Callable[[str], None] = print
) -> str:
    """Move the committed outputs of a stopped job from `output` to `new` and, given the
    stream's `checkpoint`, record `new` in it; returns the new place.

    Args:
        output: the output directory the job writes (the checkpoint's recorded one).
        new: where it goes; a new or empty directory on the local filesystem.
        checkpoint: the stream's checkpoint (None: a batch job, whose output holds its state).
        say: where the one-line summary goes.

    Raises:
        ConfigError: an object store URI, the same place, or a non-empty `new`.
        StateError: a driver holds a lease, or the checkpoint records another output.

    >>> move_output("out/", "archive/out", checkpoint="chk/")  # doctest: +SKIP
    'moved /data/out to /data/archive/out (6 entries); the checkpoint writes there now'
    """
    if not (is_local(output) and is_local(new)):
        raise ConfigError(
            "--move-output moves outputs on the local filesystem (a path or file://); on an "
            "object store, start a new --checkpoint for the new place instead"
        )
    old, to = location_key(output), location_key(new)
    if old == to or to.startswith(old + os.sep):
        raise ConfigError(f"--move-output {to} is --output {old} or inside it")
    with ExitStack() as held:
        if os.path.isdir(old):
            held.enter_context(output_lease(old))
        if checkpoint:
            held.enter_context(checkpoint_lease(checkpoint))
            refuse_if_rewinding(checkpoint)
            if _check_checkpoint(checkpoint, old, to) == to and not os.path.isdir(old):
                say(f"{checkpoint} writes to {to} already: nothing to move")
                return to
        moved = _move_entries(old, to)
        if checkpoint:
            _record(checkpoint, to)
    shutil.rmtree(old, ignore_errors=True)  # only the lease and the intent were left
    where = "; the checkpoint writes there now" if checkpoint else ""
    line = f"moved {old} to {to} ({moved} entries){where}"
    say(line)
    return to


def _check_checkpoint(checkpoint: str, old: str, to: str) -> str | None:
    """Where the checkpoint writes (None: it does not say), when it is `old` or `to`."""
    settings = read_settings(checkpoint)
    if not settings:
        raise ConfigError(f"{checkpoint} is not a sessionize checkpoint (no {FILE})")
    writes = settings.get("output")
    if writes is None or location_key(str(writes)) in (old, to):
        # `to`: a move cut short after the checkpoint took the new place
        return None if writes is None else location_key(str(writes))
    raise StateError(
        f"checkpoint {checkpoint} writes its outputs to {writes}, not to --output {old}: "
        f"give --output {writes}"
    )


def _move_entries(old: str, to: str) -> int:
    """Rename each entry of `old` into `to`, after the intent names `to`."""
    entries = sorted(set(os.listdir(old)) - _STAYS) if os.path.isdir(old) else []
    intent = _intent(old)
    if os.path.isdir(to) and os.listdir(to) and intent != to:
        raise ConfigError(f"--move-output {to} is not empty: give a new or empty directory")
    if not os.path.isdir(old) and not os.path.isdir(to):
        raise ConfigError(f"--output {old} is not a directory")
    if entries:
        with open(os.path.join(old, INTENT), "w", encoding="utf-8") as f:
            json.dump({"to": to}, f)
        os.makedirs(to, exist_ok=True)
    for name in entries:
        shutil.move(os.path.join(old, name), os.path.join(to, name))  # a rename on one disk
    return len(entries)


def _intent(old: str) -> str | None:
    try:
        with open(os.path.join(old, INTENT), encoding="utf-8") as f:
            return json.load(f).get("to")
    except (FileNotFoundError, NotADirectoryError, ValueError):
        return None


def _record(checkpoint: str, to: str) -> None:
    """The checkpoint's settings, then its last run's paths, name `to`."""
    write_record(checkpoint, FILE, {**recorded(checkpoint), "output": to})
    paths = recorded(checkpoint, PATHS_FILE)
    if paths:
        write_record(checkpoint, PATHS_FILE, {**paths, "output": to})
