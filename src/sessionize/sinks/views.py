"""Views: what a plain reader of a compacted local Parquet output finds at `ROOT/NAME`.

Once an output is compacted (compaction.py), `ROOT/NAME` is a symlink to an immutable view:

    ROOT/NAME -> _views/NAME/VVVVVVVV                           the current view (relative link)
    ROOT/_views/NAME/VVVVVVVV/[session_date=D/]FILE.parquet     hard links, `batch_id` inside
    ROOT/_batches/NAME/batch_id=N/[session_date=D/]part-P...    the batch directories

A view holds a hard link to every compacted file of the newest manifest generation and to
every file of the committed batches not compacted yet, without the `batch_id=N/` level (the
files carry `batch_id` as a column), so Spark, pyarrow, DuckDB and Polars read `ROOT/NAME`
as they read it before compaction. Hard links make a view a snapshot: replacing or removing
a batch later does not change a view built before. After each publish, compaction and
removal, `refresh` builds the next view aside and switches `ROOT/NAME` to it with one rename
of a symlink over it; then the older views are moved out of their paths and deleted: a read
that resolved the link before, or listed their files, fails with "file not found" and reads
again; a listing under way at the instant of the move may miss files of that view, and
finds it gone once done. Killed at any step, the next refresh
(the next publish, compaction, or `sessionize maintain`) builds a view of the committed
state and deletes the others. An output turns into this layout at its first compaction:
its batch directory and a link to its first view swap places in one `renameat2` exchange.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import shutil

import pyarrow as pa
import pyarrow.parquet as pq

from sessionize import faults

VIEWS = "_views"
BATCHES = "_batches"
SWITCH = ".switch"  # the next link, renamed over ROOT/NAME
DROPPING = ".dropping-"  # an old view moved out of its path while it is deleted
BATCH_ID = "batch_id"


def uses_views(base: str, name: str) -> bool:
    """Whether output `name` has the view layout (its batch directories in `_batches`)."""
    moved = f"{base}/{BATCHES}/{name}"
    return os.path.isdir(moved) and not os.path.islink(moved)


def batches_root(base: str, name: str) -> str:
    """Where output `name`'s `batch_id=N/` directories live."""
    return f"{base}/{BATCHES}/{name}" if uses_views(base, name) else f"{base}/{name}"


def refresh(base: str, name: str, files: dict[str, tuple[str, int | None]]) -> int:
    """Build the next view of `files` ({path inside the view: (the file, its batch, None
    for a compacted file)}) and switch `ROOT/NAME` to it; returns its version. The output
    must use views."""
    version = _build(base, name, files)
    _switch(base, name, version)
    faults.pause_point(f"view-switched-{name}", version)
    drop_old(base, name)
    return version


def convert(base: str, name: str, files: dict[str, tuple[str, int | None]]) -> int:
    """Turn output `name` (a directory of batch directories) into the view layout: build the
    first view of `files`, then swap `ROOT/NAME` and a link to it in one exchange."""
    _discard_stray_link(base, name)
    version = _build(base, name, files)
    os.makedirs(f"{base}/{BATCHES}", exist_ok=True)
    link = f"{base}/{BATCHES}/{name}"
    os.symlink(_target(name, version), link)
    faults.pause_point(f"view-converting-{name}", version)
    if not _exchange(link, f"{base}/{name}"):
        # no atomic exchange here: readers of ROOT/NAME find nothing between the renames
        os.remove(link)
        os.rename(f"{base}/{name}", link)
        _switch(base, name, version)
    faults.pause_point(f"view-switched-{name}", version)
    drop_old(base, name)
    return version


def discard(base: str, name: str) -> int:
    """An output without the view layout: drop what an interrupted `convert` left."""
    _discard_stray_link(base, name)
    where = f"{base}/{VIEWS}/{name}"
    if not os.path.isdir(where):
        return 0
    gone = len(os.listdir(where))
    shutil.rmtree(where)
    return gone


def drop_old(base: str, name: str) -> int:
    """Delete every view but the current one (and a half-built one, a stale next link)."""
    where = f"{base}/{VIEWS}/{name}"
    current = _current(base, name)
    gone = 0
    for entry in sorted(os.listdir(where)) if os.path.isdir(where) else []:
        if entry == current:
            continue
        path = f"{where}/{entry}"
        if os.path.islink(path) or not os.path.isdir(path):
            os.remove(path)
        else:
            if not entry.startswith(DROPPING):  # else a drop killed midway left it
                # Out of its path first: a read of this view that starts from here on fails
                # with "file not found" instead of listing it half deleted.
                moved = f"{where}/{DROPPING}{entry}"
                os.rename(path, moved)
                path = moved
            for folder, _dirs, files in os.walk(path):
                for file in files:
                    os.remove(f"{folder}/{file}")
                    faults.pause_point(f"view-dropping-{name}", int(current or 0))
            shutil.rmtree(path)
        gone += 1
    return gone


def with_batch_ids(directory: str, batch_id: int) -> int:
    """Give every Parquet file under `directory` (a staged batch, which no reader reads) a
    `batch_id` column; returns how many were rewritten."""
    rewritten = 0
    for folder, _dirs, names in os.walk(directory):
        for file in sorted(n for n in names if n.endswith(".parquet")):
            if _has_batch_id(f"{folder}/{file}"):
                continue
            _copy_with_batch_id(f"{folder}/{file}", f"{folder}/.{file}.tmp", batch_id)
            os.replace(f"{folder}/.{file}.tmp", f"{folder}/{file}")
            rewritten += 1
    return rewritten


def _has_batch_id(path: str) -> bool:
    return BATCH_ID in pq.read_schema(path).names


def _copy_with_batch_id(source: str, target: str, batch_id: int) -> None:
    table = pq.ParquetFile(source).read()
    column = pa.array([batch_id] * table.num_rows, pa.int64())
    pq.write_table(table.append_column(BATCH_ID, column), target)


def _build(base: str, name: str, files: dict[str, tuple[str, int | None]]) -> int:
    """A batch file is linked when the current view links it already or it holds
    `batch_id` (written before the output had views, it does not: the view gets a copy
    with the column; the batch's next compaction ends that)."""
    where = f"{base}/{VIEWS}/{name}"
    os.makedirs(where, exist_ok=True)
    versions = [int(e) for e in os.listdir(where) if e.isdigit()]
    current = _current(base, name)
    version = max(versions + [int(current or 0)]) + 1
    view = f"{where}/{version:08d}"
    os.makedirs(view)
    made = {view}
    for rel, (source, batch) in sorted(files.items()):
        target = f"{view}/{rel}"
        if os.path.dirname(target) not in made:
            os.makedirs(os.path.dirname(target), exist_ok=True)
            made.add(os.path.dirname(target))
        seen = f"{where}/{current}/{rel}" if current else None
        if batch is None or _same_file(seen, source) or _has_batch_id(source):
            os.link(source, target)
        else:
            _copy_with_batch_id(source, target, batch)
        faults.pause_point(f"view-linking-{name}", version)
    faults.pause_point(f"view-built-{name}", version)
    return version


def _same_file(a: str | None, b: str) -> bool:
    try:
        return a is not None and os.path.samefile(a, b)
    except FileNotFoundError:
        return False


def _target(name: str, version: int) -> str:
    """The link's text, relative to ROOT: a moved output keeps its views."""
    return f"{VIEWS}/{name}/{version:08d}"


def _switch(base: str, name: str, version: int) -> None:
    link = f"{base}/{VIEWS}/{name}/{SWITCH}"
    if os.path.lexists(link):
        os.remove(link)
    os.symlink(_target(name, version), link)
    os.replace(link, f"{base}/{name}")  # a rename: atomic, readers find one view or the other


def _current(base: str, name: str) -> str | None:
    """The current view's directory name (VVVVVVVV), or None."""
    path = f"{base}/{name}"
    if not os.path.islink(path):
        return None
    return os.readlink(path).rsplit("/", 1)[-1]


def _discard_stray_link(base: str, name: str) -> None:
    link = f"{base}/{BATCHES}/{name}"
    if os.path.islink(link):  # a convert killed before its exchange
        os.remove(link)


_RENAME_EXCHANGE = 2


def _exchange(a: str, b: str) -> bool:
    """Swap the entries `a` and `b` atomically (Linux renameat2); False where that is not
    available (another system, a filesystem without it)."""
    libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
    renameat2 = getattr(libc, "renameat2", None)
    if renameat2 is None:
        return False
    at_fdcwd = -100
    done = renameat2(at_fdcwd, a.encode(), at_fdcwd, b.encode(), _RENAME_EXCHANGE)
    if done == 0:
        return True
    errno = ctypes.get_errno()
    if errno in (22, 38, 95):  # EINVAL, ENOSYS, EOPNOTSUPP: not supported here
        return False
    raise OSError(errno, os.strerror(errno), b)
