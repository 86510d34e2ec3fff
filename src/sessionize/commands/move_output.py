"""`sessionize maintain --move-output NEW`: a stopped job's outputs, moved on purpose.

A checkpoint records where its outputs are and refuses another `--output` (a stream
writing half its batches in one place and half in another would have rewinds retire only
one of them). Moving them is this one step, with the leases of the output and of the
checkpoint held (a running driver makes it refuse):

- a local output is copied, verified, recorded, then deleted (sinks/tree_move.py): the
  intent `OLD/_moving.json` names NEW first, so a move cut short at any step completes
  when run again, and a job refuses to start on OLD meanwhile;
- a PostgreSQL output moves to another schema of its database in one transaction
  (sinks/postgres_move.py), then NEW is recorded.

Places are compared as the OS resolves them (places.py): NEW inside OLD through a symlink,
`..` or a mount is refused before anything is written.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Callable
from contextlib import ExitStack

from sessionize import faults
from sessionize.engines.checkpoint import (
    FILE,
    LEASE_DIR,
    PATHS_FILE,
    checkpoint_lease,
    output_lease,
    read_settings,
    recorded,
    refuse_if_rewinding,
    same_setting,
    write_record,
)
from sessionize.errors import ConfigError, StateError
from sessionize.fs import is_local, location_key
from sessionize.places import same_place, within
from sessionize.redaction import redact_uri
from sessionize.sinks import tree_move
from sessionize.sinks.registry import capabilities

_STAYS = frozenset({LEASE_DIR})  # the old output's lease stays with it, and goes with it


def move_output(
    output: str, new: str, *, checkpoint: str | None = None, say: Callable[[str], None] = print
) -> str:
    """Move the committed outputs of a stopped job from `output` to `new` and, given the
    stream's `checkpoint`, record `new` in it; returns the new place.

    Args:
        output: the output the job writes (the checkpoint's recorded one).
        new: where it goes: a new or empty local directory for a local output, another
            schema of the same database for a PostgreSQL one (`...?schema=NEW`).
        checkpoint: the stream's checkpoint (None: a batch job, whose output holds its state).
        say: where the one-line summary goes.

    Raises:
        ConfigError: an object store URI, `new` is `output` or inside it (by any alias), a
            non-empty `new`, a PostgreSQL output moved off its database.
        StateError: a driver holds a lease, the checkpoint records another output, or
            another move of `output` was cut short.
        SinkError: a copy that does not match its original (nothing is deleted then).

    >>> move_output("out/", "archive/out", checkpoint="chk/")  # doctest: +SKIP
    'moved /data/out to /data/archive/out (412 files, 3.1 MB, hard links); ...'
    """
    if _in_database(output) or _in_database(new):
        return _move_postgres(output, new, checkpoint, say)
    if not (is_local(output) and is_local(new)):
        raise ConfigError(
            "--move-output moves outputs on the local filesystem (a path or file://) and "
            "PostgreSQL outputs to another schema; on an object store, start a new "
            "--checkpoint for the new place instead"
        )
    old, to = location_key(output), location_key(new)
    _refuse_overlap(old, to)
    with ExitStack() as held:
        if os.path.isdir(old):
            held.enter_context(output_lease(old))
        writes = _bound(held, checkpoint, old, to)
        intent = tree_move.read_intent(old)
        if intent is not None and not same_place(intent["to"], to):
            raise StateError(
                f"a move of {old} to {intent['to']} was cut short: complete it first with "
                f"--move-output {intent['to']}"
            )
        if not tree_move.moved_entries(old, _STAYS) and (intent or writes == "new"):
            summary = f"{old} was moved to {to} already"  # a move that ended in its clean-up
        else:
            summary = _move_tree(old, to, checkpoint, intent is not None)
    _drop_old(old)
    say(summary)
    return to


def _refuse_overlap(old: str, to: str) -> None:
    """NEW and OLD must be two places, neither inside the other, through any alias."""
    alias = "" if to == old or to.startswith(old + os.sep) else " (through a symlink or mount)"
    if same_place(old, to):
        raise ConfigError(f"--move-output {to} is --output {old}{alias}: give another place")
    if within(to, old):
        raise ConfigError(
            f"--move-output {to} is inside --output {old}{alias}: give a place outside it"
        )
    if within(old, to):
        raise ConfigError(
            f"--output {old} is inside --move-output {to}: give a new or empty directory outside it"
        )


def _bound(held: ExitStack, checkpoint: str | None, old: str, to: str) -> str | None:
    """Take the checkpoint's lease and say where it writes: "old", "new", or None (no
    checkpoint, or one that does not say)."""
    if not checkpoint:
        return None
    held.enter_context(checkpoint_lease(checkpoint))
    refuse_if_rewinding(checkpoint)
    settings = read_settings(checkpoint)
    if not settings:
        raise ConfigError(f"{checkpoint} is not a sessionize checkpoint (no {FILE})")
    writes = settings.get("output")
    if writes is None:
        return None
    if same_setting("output", writes, old):
        return "old"
    if same_setting("output", writes, to):
        return "new"  # a move cut short after the checkpoint took the new place
    raise StateError(
        f"checkpoint {checkpoint} writes its outputs to {writes}, not to --output {old}: "
        f"give --output {writes}"
    )


def _move_tree(old: str, to: str, checkpoint: str | None, resumed: bool) -> str:
    """Copy, verify, record, delete (sinks/tree_move.py); the summary line."""
    if not os.path.isdir(old):
        raise ConfigError(f"--output {old} is not a directory")
    if not resumed and os.path.isdir(to) and os.listdir(to):
        raise ConfigError(f"--move-output {to} is not empty: give a new or empty directory")
    tree_move.write_intent(old, to, checkpoint)
    tree_move.copy_tree(old, to, _STAYS)
    faults.pause_point("move-copied", 0)
    checked = tree_move.verify_tree(old, to, _STAYS)
    if checkpoint:
        _record(checkpoint, to)
    faults.pause_point("move-recorded", 0)
    tree_move.remove_moved(old, to, _STAYS)
    tree_move.clear_intent(old)
    copied = checked.files - checked.linked
    how = (
        "hard links on one filesystem"
        if not copied
        else "copied and verified"
        if not checked.linked
        else f"{checked.linked} hard links, {copied} copied and verified"
    )
    where = "; the checkpoint writes there now" if checkpoint else ""
    return (
        f"moved {old} to {to} ({checked.files} files, {checked.bytes / 1e6:,.1f} MB: {how}){where}"
    )


def _drop_old(old: str) -> None:
    """What is left of the old place once the lease is given back: its lease records, and
    the directory if nothing else is in it."""
    if not os.path.isdir(old) or tree_move.moved_entries(old, _STAYS):
        return
    shutil.rmtree(os.path.join(old, LEASE_DIR), ignore_errors=True)
    tree_move.clear_intent(old)
    with contextlib.suppress(OSError):  # something new appeared in it: it stays, with that
        os.rmdir(old)


def _move_postgres(
    output: str, new: str, checkpoint: str | None, say: Callable[[str], None]
) -> str:
    """A PostgreSQL output to another schema of its database (sinks/postgres_move.py)."""
    if not (_in_database(output) and _in_database(new)):
        raise ConfigError(
            f"--move-output {redact_uri(new)}: a PostgreSQL output moves only to another "
            "schema of its database (--move-output postgresql://USER@HOST/DB?schema=NEW), "
            "and a file output only to a local directory; to write elsewhere, start a new "
            "--checkpoint there"
        )
    from sessionize.sinks.postgres_move import move_schema, moved_already  # the postgres extra

    old, to = location_key(output), location_key(new)
    if old == to:
        raise ConfigError(f"--move-output {to} is --output {old}: give another schema")
    with ExitStack() as held:
        done = moved_already(output, new)  # run again after its transaction committed
        if not done:  # (taking the old place's lease would create its lease table again)
            held.enter_context(output_lease(output))
        _bound(held, checkpoint, old, to)
        moved = 0 if done else move_schema(output, new)
        if checkpoint:
            _record(checkpoint, to)
    where = "; the checkpoint writes there now" if checkpoint else ""
    line = f"moved {old} to {to} ({moved} tables){where}"
    say(line)
    return to


def _record(checkpoint: str, to: str) -> None:
    """The checkpoint's settings, then its last run's paths, name `to`."""
    write_record(checkpoint, FILE, {**recorded(checkpoint), "output": to})
    paths = recorded(checkpoint, PATHS_FILE)
    if paths:
        write_record(checkpoint, PATHS_FILE, {**paths, "output": to})


def _in_database(output: str) -> bool:
    """An output that keeps its records in its own storage (PostgreSQL): it moves there."""
    return "://" in output and capabilities(output).keeps_records
