"""Spark's logs in a checkpoint, as rewinding a query sees them (docs/design.md, "Rewind").

Spark keeps, per micro-batch: `offsets/B` (what the batch reads, planned before it runs),
`commits/B` (written once it finished), the file source's seen-files log `sources/0/B`
(every `compactInterval`-th entry is `B.compact`, holding every entry up to B, after which
Spark deletes the files older than the compaction before the retained batches), and for
the `spark-*` engines its state store versions `state/0/P/V.(delta|snapshot|zip|changelog)`
(batch B reads version B, commits B+1). On a local file system each file has a `.NAME.crc`
sibling, removed with it.

Every change here is idempotent and leaves each file whole (written aside, then moved), so
an interrupted rewind is completed by running it again.
"""

from __future__ import annotations

import contextlib
import json
import re

import pyarrow.fs as pafs

from sessionize.config import retained_batches
from sessionize.fs import listing, resolve_fs

LOGS = ("commits", "offsets")  # undone in this order: a batch stops counting as done first
FILE_SOURCE_LOG = "sources/0"
STATE_DIR = "state/0"
COMPACT_CONF = "spark.sql.streaming.fileSource.log.compactInterval"
# Spark keeps the file source's log files for 10 minutes after a compaction made them
# redundant, and every compacted file lists every file ever read: at short triggers that is
# dozens of ever-growing copies. Only the query itself reads its source log (rewinding
# rebuilds the files it needs; `file_source_entries` reads again what vanished while it
# read), so they go at once.
STREAM_CONFS = {"spark.sql.streaming.fileSource.log.cleanupDelay": "0"}
_STATE_FILE = re.compile(r"(\d+)(?:_[^.]*)?\.(delta|snapshot|zip|changelog)")


def _delete(fs: pafs.FileSystem, path: str) -> None:
    """Delete a file and its Hadoop checksum sibling; missing ones are fine."""
    directory, name = path.rsplit("/", 1)
    for p in (path, f"{directory}/.{name}.crc"):
        with contextlib.suppress(FileNotFoundError):
            fs.delete_file(p)


def log_ids(checkpoint: str, log: str) -> list[int]:
    """The batch ids of one of Spark's logs (`offsets`, `commits`, `sources/0`), ascending."""
    fs, base = resolve_fs(checkpoint)
    ids = []
    for info in listing(fs, f"{base}/{log}"):
        m = re.fullmatch(r"(\d+)(\.compact)?", info.base_name)
        if m:
            ids.append(int(m.group(1)))
    return sorted(ids)


def truncate_log(checkpoint: str, log: str, after: int) -> list[int]:
    """Delete the entries of `log` after batch `after`, newest first; returns their ids."""
    fs, base = resolve_fs(checkpoint)
    gone = [b for b in log_ids(checkpoint, log) if b > after]
    for b in reversed(gone):
        for name in (str(b), f"{b}.compact"):
            _delete(fs, f"{base}/{log}/{name}")
    return gone


def file_source_entries(checkpoint: str) -> list[dict]:
    """Every entry of the file source's log (path, timestamp, batchId), compacted or not,
    each once."""
    for _ in range(3):  # a file compacted away since the listing: list again
        try:
            return _file_source_entries(checkpoint)
        except FileNotFoundError:
            continue
    raise FileNotFoundError(f"{checkpoint}/{FILE_SOURCE_LOG} changed while it was read")


def _file_source_entries(checkpoint: str) -> list[dict]:
    fs, base = resolve_fs(checkpoint)
    entries: dict[str, dict] = {}
    for info in listing(fs, f"{base}/{FILE_SOURCE_LOG}"):
        if not re.fullmatch(r"\d+(\.compact)?", info.base_name):
            continue
        with fs.open_input_stream(info.path) as f:
            for line in f.read().decode().splitlines()[1:]:
                if line:
                    entry = json.loads(line)
                    entries[entry["path"]] = entry
    return list(entries.values())


def truncate_file_source_log(
    checkpoint: str, after: int, default_interval: int | None = None
) -> int:
    """Make the file source's log end at batch `after`; returns how many files it forgets.

    Batches up to `after` may only be left in a compacted file of a later batch (Spark
    deleted their own files after compacting): those are written again first, from the
    compacted entries, in the names Spark reads them by (at the log's own compact interval,
    `compact_interval` of the files present and `default_interval`, the retained batches
    unless given), and only then is everything after `after` deleted."""
    fs, base = resolve_fs(checkpoint)
    ids = log_ids(checkpoint, FILE_SOURCE_LOG)
    if not ids:
        return 0
    entries = file_source_entries(checkpoint)
    forgotten = sum(1 for e in entries if e["batchId"] > after)
    if after >= 0:
        default = retained_batches() if default_interval is None else default_interval
        _rebuild_up_to(fs, f"{base}/{FILE_SOURCE_LOG}", entries, after, default)
    truncate_log(checkpoint, FILE_SOURCE_LOG, after)
    return forgotten


def compact_interval(compacted: list[int], default: int) -> int:
    """The compact interval Spark uses for a file source log, as its CompactibleFileStreamLog
    decides it when the query starts: an existing log keeps its own interval.

    Args:
        compacted: the batch ids of the log's `.compact` files.
        default: `spark.sql.streaming.fileSource.log.compactInterval` for the query.

    Returns:
        The distance of the two newest compacted files; with one compacted file `c`, the
        smallest divisor of `c + 1` not below `default` (`c + 1` itself when `default` is
        at least half of it); with none, `default`.

    Example:
        >>> compact_interval([99, 199], 10), compact_interval([19], 100)
        (100, 20)
    """
    newest = sorted(compacted, reverse=True)
    if len(newest) >= 2:
        return newest[0] - newest[1]
    if not newest:
        return default
    n = newest[0] + 1
    if n <= default or default >= n // 2:
        return n
    return next((i for i in range(default, n // 2 + 1) if n % i == 0), n)


def _rebuild_up_to(fs, log: str, entries: list[dict], last: int, default: int) -> None:
    """Ensure Spark can read batches 0..last: the newest compacted file at or before `last`
    and the plain files after it, each written from the entries if missing."""
    present = {i.base_name for i in listing(fs, log)}
    compacted = sorted(int(n.split(".")[0]) for n in present if n.endswith(".compact"))
    span = compact_interval(compacted, default)
    newest_compact = ((last + 1) // span) * span - 1
    base_compact = newest_compact if newest_compact >= 0 else None
    todo: list[tuple[str, list[dict]]] = []
    if base_compact is not None:
        todo.append(
            (f"{base_compact}.compact", [e for e in entries if e["batchId"] <= base_compact])
        )
    first = 0 if base_compact is None else base_compact + 1
    for b in range(first, last + 1):
        todo.append((str(b), [e for e in entries if e["batchId"] == b]))
    for name, rows in todo:
        if name in present:
            continue
        body = "\n".join(["v1", *(json.dumps(e, separators=(",", ":")) for e in rows)])
        tmp = f"{log}/.{name}.rewind.tmp"
        with fs.open_output_stream(tmp) as f:
            f.write(body.encode())
        fs.move(tmp, f"{log}/{name}")


def spark_state_versions(checkpoint: str) -> dict[int, list[int]]:
    """Spark's state store versions per state partition of the `spark-*` engines."""
    fs, base = resolve_fs(checkpoint)
    out: dict[int, list[int]] = {}
    for part in listing(fs, f"{base}/{STATE_DIR}"):
        if part.type != pafs.FileType.Directory or not part.base_name.isdigit():
            continue
        versions = set()
        for info in listing(fs, part.path):
            m = _STATE_FILE.fullmatch(info.base_name)
            if m:
                versions.add(int(m.group(1)))
        out[int(part.base_name)] = sorted(versions)
    return out


def truncate_spark_state(checkpoint: str, after_version: int) -> int:
    """Delete Spark's state store files of versions after `after_version` in every state
    partition (`-1`: the whole state); returns how many files went."""
    fs, base = resolve_fs(checkpoint)
    gone = 0
    for part in listing(fs, f"{base}/{STATE_DIR}"):
        if part.type != pafs.FileType.Directory or not part.base_name.isdigit():
            continue
        for info in sorted(listing(fs, part.path), key=lambda i: i.base_name, reverse=True):
            m = _STATE_FILE.fullmatch(info.base_name)
            if m and int(m.group(1)) > after_version:
                _delete(fs, info.path)
                gone += 1
    return gone
