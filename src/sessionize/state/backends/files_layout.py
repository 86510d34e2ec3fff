"""The `files` store's names and records: what it writes under its root, and where.

Every name below is relative to the root (see `files.py` for the commit protocol)::

    <job>/_job/<version>.json                                 job record (the driver's
                                                              commit log): its JSON text
    <job>/_job/settings.json                                  the job's settings: their
                                                              JSON text
    <job>/_fence/<epoch>                                      empty: a driver of this lease
                                                              epoch fenced the job (the
                                                              largest name is the fence)
    <job>/partition=<p>/<version>.commit.json                 commit record (`CommitRecord`):
                                                              the version exists
    <job>/partition=<p>/<version>-<token>.delta.parquet       the version's puts and removed
                                                              keys (`codec.encode_delta`)
    <job>/partition=<p>/<version>-<token>.snapshot.parquet    the full state at the version
    <any of the above>.tmp-<16 hex>                           a file being written (renamed
                                                              into place when complete)
    .check-<32 hex>                                           written and deleted by `check`

Versions are zero-padded to 20 digits so that names sort by version; a token is 32 hex
digits, new for every commit.
"""

from __future__ import annotations

import builtins
import json
import os
import re
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.fs as pafs

from sessionize.errors import ConfigError, StateError

FORMAT = 1
JOB_DIR = "_job"
FENCE_DIR = "_fence"

COMMIT_RECORD = re.compile(r"^(\d{20})\.commit\.json$")
DATA_FILE = re.compile(r"^(\d{20})-([0-9a-f]{32})\.(delta|snapshot)\.parquet$")
TEMP_FILE = re.compile(r"^(\d{20})[-.].*\.tmp-[0-9a-f]+$")
JOB_RECORD = re.compile(r"^(\d{20})\.json$")
FENCE_MARK = re.compile(r"^(\d{20})$")
PARTITION_DIR = re.compile(r"^partition=(\d+)$")
FS_URI = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]+://")


def version_name(version: int) -> str:
    return f"{version:020d}"


def partition_dir(root: str, job: str, partition: int) -> str:
    return f"{root}/{job}/partition={partition}"


def commit_record_path(root: str, job: str, partition: int, version: int) -> str:
    return f"{partition_dir(root, job, partition)}/{version_name(version)}.commit.json"


def data_file_name(version: int, token: str, kind: str) -> str:
    return f"{version_name(version)}-{token}.{kind}.parquet"


def job_dir(root: str, job: str) -> str:
    return f"{root}/{job}/{JOB_DIR}"


def fence_dir(root: str, job: str) -> str:
    return f"{root}/{job}/{FENCE_DIR}"


def job_record_path(root: str, job: str, version: int) -> str:
    return f"{job_dir(root, job)}/{version_name(version)}.json"


def job_settings_path(root: str, job: str) -> str:
    return f"{job_dir(root, job)}/settings.json"


@dataclass(frozen=True)
class CommitRecord:
    """A partition commit record, as stored in `<version>.commit.json`: a JSON object with
    these fields plus `format`, `job`, `partition`, `written_at`, `delta_rows`, `removed`
    and `file_bytes` (written for people; not read back)."""

    version: int
    token: str
    parent_version: int
    parent_token: str | None
    kind: str  # "delta" | "snapshot"
    file: str
    depth: int  # deltas since the last snapshot (0 for a snapshot)
    meta: dict[str, Any]
    rows: int
    keys: int
    bytes: int
    chain_rows: int = 0  # rows in the deltas since the snapshot, this one's included

    def to_json(self, **extra: Any) -> builtins.bytes:  # `bytes` is a field here
        body = {"format": FORMAT, **self.__dict__, **extra}
        return json.dumps(body, sort_keys=True, allow_nan=False).encode()

    @classmethod
    def from_json(cls, data: builtins.bytes, where: str) -> CommitRecord:
        try:
            body = json.loads(data)
            if body.get("format") != FORMAT:
                raise ValueError(f"format {body.get('format')!r}, expected {FORMAT}")
            optional = {"chain_rows"}  # absent from records written before it existed
            fields = [k for k in cls.__dataclass_fields__ if k in body or k not in optional]
            return cls(**{k: body[k] for k in fields})
        except (ValueError, KeyError, TypeError) as e:
            raise StateError(f"state commit record {where} is unreadable: {e}") from e


def resolve_location(root: str) -> tuple[str, pafs.FileSystem, str]:
    """(canonical location, filesystem, path on it) of a path or pyarrow filesystem URI."""
    if not FS_URI.match(root):
        path = os.path.abspath(os.path.expanduser(root))
        return path, pafs.LocalFileSystem(), path.rstrip("/") or "/"
    try:
        fs, path = pafs.FileSystem.from_uri(root)
    except (pa.ArrowException, ValueError) as e:
        raise ConfigError(
            f"state store location {root!r} is not a usable filesystem URI: {e}"
        ) from e
    path = path.rstrip("/")
    if isinstance(fs, pafs.LocalFileSystem):
        return path, fs, path
    base, _, query = root.partition("?")
    return base.rstrip("/") + (f"?{query}" if query else ""), fs, path
