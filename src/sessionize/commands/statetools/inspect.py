"""`sessionize state inspect` and `export`: what a stopped job's state holds, read only."""

from __future__ import annotations

import os
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from rich.console import Console
from rich.table import Table

from sessionize.commands.options import progress_path
from sessionize.commands.statetools import keyed
from sessionize.commands.statetools.contents import (
    USER,
    PartitionContents,
    export_schema,
    open_sessions,
    read_partition,
)
from sessionize.commands.statetools.job import StateJob
from sessionize.config import format_instant
from sessionize.engines.progress import read_progress
from sessionize.errors import ConfigError, StateError
from sessionize.fs import resolve_fs
from sessionize.state import StateBackend


@dataclass(frozen=True)
class PartitionSummary:
    partition: int
    versions: list[int]  # committed versions kept, ascending
    users: int
    sessions: int
    oldest_us: int | None  # start of the oldest open session
    bytes: int
    committed_at: str | None  # when the partition's last version was committed


def read_state(
    sj: StateJob, version: int | None
) -> tuple[StateBackend, int, list[PartitionContents]]:
    """Every partition of the job at `version` (default: the one the next run builds on)."""
    sj.check_readable()
    sj.check_idle()
    backend = sj.backend()
    last = sj.last_version(backend)
    version = last if version is None else version
    if version not in backend.job_versions(sj.job):
        raise StateError(
            f"version {version} of job '{sj.job}' is not committed in "
            f"{backend.redacted_uri} (the last is {last})"
        )
    parts = [read_partition(backend, sj.job, p, version, sj.shape) for p in range(sj.partitions)]
    return backend, version, parts


def summarize(sj: StateJob, version: int | None = None) -> tuple[int, list[PartitionSummary]]:
    backend, version, parts = read_state(sj, version)
    times = _commit_times(sj)
    out = []
    for part in parts:
        versions = backend.versions(sj.job, part.partition)
        if sj.processor is not None:  # keys, rows, next timer
            users, count = part.users, part.rows.num_rows
            oldest = keyed.next_timer_us(part.rows, sj.processor)
        else:
            # Of the open sessions only: a user's state may also hold the sessions kept for
            # revisions and, with identity, the anonymous id's identity row.
            sessions = open_sessions(part.rows, sj.session_rules, sj.layout)
            users, count = len(pc.unique(sessions[sj.layout.key_name])), sessions.num_rows
            oldest = pc.min(sessions["start_time"].cast(pa.int64())).as_py()
        out.append(
            PartitionSummary(
                part.partition,
                versions,
                users,
                count,
                oldest,
                part.bytes,
                times.get(versions[-1]) if versions else None,
            )
        )
    return version, out


def user_sessions(sj: StateJob, user: str, version: int | None = None) -> pa.Table:
    """The open sessions of one user (`user` as the events spell it), with their pending
    events (export's columns)."""
    if sj.processor is not None:
        raise ConfigError(f"{sj.what} holds a processor's state: show a key's state with --key")
    want = sj.layout.event.field(USER).type
    try:
        value = pa.scalar(user).cast(want)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        raise ConfigError(f"--user '{user}': this job's user ids are {want} values") from None
    _, _, parts = read_state(sj, version)
    rows = pa.concat_tables([p.rows.filter(pc.equal(p.rows[USER], value)) for p in parts])
    return open_sessions(rows, sj.session_rules, sj.layout)


def key_state(sj: StateJob, key: str, version: int | None = None) -> pa.Table:
    """A processor's job: the state rows of one key and its timer (`--key`)."""
    if sj.processor is None:
        raise ConfigError(f"{sj.what} is a session job: show a user's state with --user")
    _, _, parts = read_state(sj, version)
    return keyed.key_rows(parts, sj.processor, key)


def export_state(sj: StateJob, to: str, version: int | None = None) -> tuple[int, int]:
    """Write the state at `version` to the Parquet file `to`: a session job's open
    sessions, a processor's rows per key (with the key's timer); (version, rows)."""
    if sj.processor is None:
        return export_sessions(sj, to, version)
    _, version, parts = read_state(sj, version)
    return version, keyed.write_rows(parts, sj.processor, to)


def export_sessions(sj: StateJob, to: str, version: int | None = None) -> tuple[int, int]:
    """Write the open sessions at `version` to the Parquet file `to`; (version, rows)."""
    _, version, parts = read_state(sj, version)
    schema = export_schema(sj.layout)
    tables = [open_sessions(p.rows, sj.session_rules, sj.layout) for p in parts]
    table = pa.concat_tables(tables).cast(schema) if tables else schema.empty_table()
    table = table.sort_by([(sj.layout.key_name, "ascending"), ("start_time", "ascending")])
    fs, path = resolve_fs(to)
    parent = os.path.dirname(path)
    if parent:
        fs.create_dir(parent, recursive=True)
    pq.write_table(table, path, filesystem=fs)
    return version, table.num_rows


def render(sj: StateJob, version: int, parts: list[PartitionSummary], console: Console) -> None:
    table = Table(title=f"state of job '{sj.job}' at version {version} ({sj.what})")
    names = ("open users", "open sessions", "oldest open session")
    if sj.processor is not None:
        names = ("keys", "rows", "next timer")
    for name in ("partition", "versions kept", *names, "bytes", "last commit"):
        table.add_column(name, justify="left" if name == "versions kept" else "right", no_wrap=True)
    for p in parts:
        table.add_row(
            str(p.partition),
            _span(p.versions),
            f"{p.users:,}",
            f"{p.sessions:,}",
            format_instant(p.oldest_us) or "-",
            f"{p.bytes:,}",
            p.committed_at or "-",
        )
    oldest = [p.oldest_us for p in parts if p.oldest_us is not None]
    table.add_section()
    table.add_row(
        "total",
        _span(sorted({v for p in parts for v in p.versions})),
        f"{sum(p.users for p in parts):,}",
        f"{sum(p.sessions for p in parts):,}",
        format_instant(min(oldest)) if oldest else "-",
        f"{sum(p.bytes for p in parts):,}",
        max((p.committed_at for p in parts if p.committed_at), default="-"),
    )
    console.print(table)


def _span(versions: list[int]) -> str:
    if not versions:
        return "0"
    return f"{len(versions)} ({versions[0]}..{versions[-1]})"


def _commit_times(sj: StateJob) -> dict[int, str | None]:
    """Commit time per version, from the job's progress log (if it is a local file)."""
    if sj.checkpoint:
        path = progress_path(None, sj.checkpoint, "progress.jsonl")
    else:
        path = progress_path(None, str(sj.output), "_progress.jsonl")
    if not path or not os.path.exists(path):
        return {}
    return {r["version"]: r.get("committed_at") for r in read_progress(path)}
