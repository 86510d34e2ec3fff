"""Moving a local output's directory tree elsewhere: copy, verify, then delete.

A move never deletes a file before an identical copy of it exists in the new place, so a
crash at any step loses nothing, and the same move run again completes it:

  1. the intent `OLD/_moving.json` names the new place (a job refuses to start on OLD from
     now on, `refuse_if_moving`);
  2. every file is copied into NEW: a hard link on the same filesystem (free, and the same
     bytes by construction), else a byte copy written aside and renamed into place;
     symlinks (the views of a compacted output are relative ones) are copied as links,
     files hard-linked together in OLD are linked together in NEW;
  3. every file of OLD is checked against its copy: the same inode, or the same size and
     SHA-256; symlinks the same target;
  4. (the caller records NEW in the checkpoint;)
  5. OLD's files are deleted, then its directories, bottom up (`os.rmdir`: a directory
     that still holds anything stays).

Steps 3 and 5 refuse a pair of directories that are one directory (the new place reached
through a symlink or a mount of the old one): there a "copy" would be the file itself.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import shutil
from collections.abc import Iterator
from dataclasses import dataclass

from sessionize import faults
from sessionize.errors import SinkError, StateError
from sessionize.places import identity

INTENT = "_moving.json"  # in the old output while a move is under way
_TMP = ".sessionize-move.tmp"  # a copy being written, renamed over its final name
# Errors of os.link that mean "no hard link here": copy the bytes instead.
_NO_LINK = {errno.EXDEV, errno.EPERM, errno.EMLINK, errno.ENOTSUP, errno.EOPNOTSUPP}


@dataclass
class Moved:
    """What a step handled: files, their bytes, how many are hard links, and symlinks."""

    files: int = 0
    bytes: int = 0
    linked: int = 0
    symlinks: int = 0


def read_intent(root: str) -> dict | None:
    """The intent of a move of `root` under way ({"to", "checkpoint"}), or None."""
    try:
        with open(os.path.join(root, INTENT), encoding="utf-8") as f:
            intent = json.load(f)
    except (FileNotFoundError, NotADirectoryError, ValueError):
        return None
    return intent if isinstance(intent, dict) and "to" in intent else None


def write_intent(root: str, to: str, checkpoint: str | None) -> None:
    """Written aside and renamed into place: a crash leaves no intent or a whole one."""
    tmp = os.path.join(root, f".{INTENT}.tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump({"to": to, "checkpoint": checkpoint}, f)
    os.replace(tmp, os.path.join(root, INTENT))


def clear_intent(root: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.remove(os.path.join(root, INTENT))


def refuse_if_moving(output: str) -> None:
    """A job must not write an output whose move was cut short (its files are half in the
    new place, and the move deletes them here when it completes).

    Raises:
        StateError: naming the command that completes the move.
    """
    intent = read_intent(output)
    if intent is None:
        return
    checkpoint = f" --checkpoint {intent['checkpoint']}" if intent.get("checkpoint") else ""
    raise StateError(
        f"--output {output} is being moved to {intent['to']} (the move was cut short): "
        f"complete it with `sessionize maintain --output {output}{checkpoint} --move-output "
        f"{intent['to']}`, then start the job on {intent['to']}"
    )


def moved_entries(root: str, stays: frozenset[str]) -> list[str]:
    """The names at the top of `root` that a move takes (not `stays`, not the intent)."""
    if not os.path.isdir(root):
        return []
    return sorted(set(os.listdir(root)) - stays - {INTENT, f".{INTENT}.tmp"})


def copy_tree(old: str, to: str, stays: frozenset[str]) -> Moved:
    """Step 2: every entry of `old` (but `stays`) into `to`; a file already there as a hard
    link of its original is kept (a move run again)."""
    done = Moved()
    os.makedirs(to, exist_ok=True)
    copies: dict[tuple[int, int], str] = {}  # a byte-copied file's inode -> its first copy
    for rel, kind in _walk(old, stays):
        src, dst = os.path.join(old, rel), os.path.join(to, rel)
        if kind == "dir":
            if os.path.lexists(dst) and not os.path.isdir(dst):
                raise SinkError(f"cannot move {src}: {dst} exists and is not a directory")
            os.makedirs(dst, exist_ok=True)
            continue
        if kind == "link":
            _copy_link(src, dst)
            done.symlinks += 1
            continue
        done.files += 1
        st = os.stat(src, follow_symlinks=False)
        done.bytes += st.st_size
        done.linked += _copy_file(src, dst, st, copies)
        faults.pause_point("move-copying", done.files)
    for rel, kind in _walk(old, stays):  # modes and times of the directories, once filled
        if kind == "dir":
            shutil.copystat(os.path.join(old, rel), os.path.join(to, rel))
    return done


def verify_tree(old: str, to: str, stays: frozenset[str]) -> Moved:
    """Step 3: every file of `old` has an identical copy in `to`.

    Raises:
        SinkError: the first file without one (nothing is deleted then).
    """
    done = Moved()
    _distinct(old, to)
    for rel, kind in _walk(old, stays):
        src, dst = os.path.join(old, rel), os.path.join(to, rel)
        if kind == "dir":
            _distinct(src, dst)
            continue
        if kind == "link":
            if not os.path.islink(dst) or os.readlink(dst) != os.readlink(src):
                raise _differs(src, dst, "not the same symlink")
            done.symlinks += 1
            continue
        done.files += 1
        st = os.stat(src, follow_symlinks=False)
        done.bytes += st.st_size
        if os.path.islink(dst) or not os.path.isfile(dst):
            raise _differs(src, dst, "missing")
        if identity(dst) == (st.st_dev, st.st_ino):
            done.linked += 1
            continue
        if os.path.getsize(dst) != st.st_size or _digest(dst) != _digest(src):
            raise _differs(src, dst, "other bytes")
    return done


def remove_moved(old: str, to: str, stays: frozenset[str]) -> int:
    """Step 5 (after `verify_tree`): delete `old`'s files that have their copy in `to`,
    then its emptied directories; `stays` and the intent are left. Returns files deleted."""
    removed = 0
    for rel, kind in reversed(list(_walk(old, stays))):  # children before their directory
        src, dst = os.path.join(old, rel), os.path.join(to, rel)
        if kind == "dir":
            os.rmdir(src)  # empty by now; anything else in it makes the move stop here
            continue
        _distinct(os.path.dirname(src), os.path.dirname(dst))
        if not os.path.lexists(dst):
            raise _differs(src, dst, "missing")
        os.remove(src)
        removed += 1
        faults.pause_point("move-removing", removed)
    return removed


def _walk(root: str, stays: frozenset[str]) -> Iterator[tuple[str, str]]:
    """(relative path, "dir" | "file" | "link") of everything under `root`, parents first,
    without following symlinks; `stays` and the intent at the top are left out."""
    top = set(moved_entries(root, stays))

    def walk(rel: str) -> Iterator[tuple[str, str]]:
        with os.scandir(os.path.join(root, rel)) as found:
            entries = sorted(found, key=lambda e: e.name)
        for entry in entries:
            if not rel and entry.name not in top:
                continue
            path = os.path.join(rel, entry.name)
            if entry.is_symlink():
                yield path, "link"
            elif entry.is_dir(follow_symlinks=False):
                yield path, "dir"
                yield from walk(path)
            elif entry.is_file(follow_symlinks=False):
                yield path, "file"
            else:
                raise SinkError(f"cannot move {entry.path}: not a file, directory or symlink")

    if os.path.isdir(root):
        yield from walk("")


def _copy_file(src: str, dst: str, st: os.stat_result, copies: dict) -> int:
    """1 if `dst` is a hard link of `src`, 0 if it is a byte copy."""
    if identity(dst) == (st.st_dev, st.st_ino) and not os.path.islink(dst):
        return 1
    tmp = f"{dst}{_TMP}"
    with contextlib.suppress(FileNotFoundError):
        os.remove(tmp)
    linked = 1
    try:
        os.link(src, tmp)
    except OSError as exc:
        if exc.errno not in _NO_LINK:
            raise
        linked = 0
        first = copies.get((st.st_dev, st.st_ino))
        if first is not None:
            os.link(first, tmp)  # linked together in the old place: so in the new one
        else:
            shutil.copy2(src, tmp)
            if st.st_nlink > 1:
                copies[(st.st_dev, st.st_ino)] = dst
    os.replace(tmp, dst)
    return linked


def _copy_link(src: str, dst: str) -> None:
    target = os.readlink(src)
    if os.path.islink(dst) and os.readlink(dst) == target:
        return
    tmp = f"{dst}{_TMP}"
    with contextlib.suppress(FileNotFoundError):
        os.remove(tmp)
    os.symlink(target, tmp)
    os.replace(tmp, dst)


def _digest(path: str) -> str:
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def _distinct(a: str, b: str) -> None:
    """Refuse two spellings of one directory: a "copy" there is the original itself."""
    ida = identity(a)
    if ida is not None and ida == identity(b):
        raise SinkError(
            f"{b} is {a} (through a symlink or a mount): nothing was deleted; give a "
            "--move-output outside the output"
        )


def _differs(src: str, dst: str, why: str) -> SinkError:
    return SinkError(
        f"{dst} is not a copy of {src} ({why}): nothing more was deleted; run the same "
        "command again to copy it"
    )
