"""The `files` state store: Parquet deltas and snapshots on any pyarrow filesystem.

URI: `files:/abs/path`, a plain path, `file:///abs/path`, or `files:<pyarrow fs URI>`
(`files:s3://bucket/prefix`). Options as a query string: `snapshot_every` (K, default 10),
`cache_mb` (process cache bound, default 256, 0 = no cache), `compression` (Parquet codec,
default zstd).

Layout under the root::

    <job>/_job/<version>.json                                 job records (driver commit log)
    <job>/partition=<p>/<version>.commit.json                 commit record: the version exists
    <job>/partition=<p>/<version>-<token>.delta.parquet       puts + removed keys of the version
    <job>/partition=<p>/<version>-<token>.snapshot.parquet    full state at the version

Versions are zero-padded to 20 digits so names sort by version. Every commit gets a random
token; its data file carries the token in its name and the commit record names the file,
the token, and the parent version and token it was built on. A version exists iff its
commit record exists; the record is written last (temp file + rename on local disks, a
single PUT on object stores), so a crash leaves either the whole version or nothing
visible, and a re-commit of a version never touches the files of the record it replaces
until the new record is published.

Commit of V on the loaded version P (steps in this order):
  1. write V's data file: a snapshot if P is empty (-1) or P's chain already holds K-1
     deltas, else a delta;
  2. delete the commit records of versions > V (newest first): they were computed from the
     state this commit replaces. Until step 3, the old V (if any) is still consistent;
  3. publish V's commit record (replacing an old one atomically);
  4. delete the commit records of versions in (P, V), then the data files of every record
     deleted or replaced (best effort; `maintenance` sweeps what a crash leaves).

Loading V reads V's record, then its parents' records down to the nearest snapshot,
checking at each link that the parent's current token is the one the child was built on;
then the snapshot and the deltas. A missing or re-committed link is a StateError.
"""

from __future__ import annotations

import json
import os
import re
import time
import uuid
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qsl, urlencode

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs

from sessionize.errors import ConfigError, StateError
from sessionize.state import codec
from sessionize.state.base import (
    EMPTY_VERSION,
    RowSpec,
    StateBackend,
    StateMetrics,
    StoredVersion,
    check_job,
    check_partition,
    check_version,
)
from sessionize.state.cache import CacheEntry, PartitionCache, process_cache

FORMAT = 1
JOB_DIR = "_job"
ORPHAN_GRACE_S = 3600.0
"""Unreferenced data files younger than this, of versions still retained, may belong to a
commit in progress and are left alone by maintenance."""

_RECORD = re.compile(r"^(\d{20})\.commit\.json$")
_DATA = re.compile(r"^(\d{20})-([0-9a-f]{32})\.(delta|snapshot)\.parquet$")
_TEMP = re.compile(r"^(\d{20})[-.].*\.tmp-[0-9a-f]+$")
_JOB_RECORD = re.compile(r"^(\d{20})\.json$")
_PARTITION = re.compile(r"^partition=(\d+)$")
_FS_URI = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]+://")
_OBJECT_STORES = ("S3FileSystem", "GcsFileSystem", "AzureFileSystem")


def _count(io: StateMetrics | None, calls: int = 1) -> None:
    if io is not None:
        io.round_trips += calls


def _v(version: int) -> str:
    return f"{version:020d}"


@dataclass(frozen=True)
class _Record:
    """A partition commit record, as stored in `<version>.commit.json`."""

    version: int
    token: str
    parent_version: int
    parent_token: str | None
    kind: str  # "delta" | "snapshot"
    file: str
    depth: int  # deltas since the last snapshot (0 for a snapshot)
    meta: dict
    rows: int
    keys: int
    bytes: int

    def to_json(self, **extra: Any) -> bytes:
        body = {"format": FORMAT, **self.__dict__, **extra}
        return json.dumps(body, sort_keys=True, allow_nan=False).encode()

    @classmethod
    def from_json(cls, data: bytes, where: str) -> _Record:
        try:
            body = json.loads(data)
            if body.get("format") != FORMAT:
                raise ValueError(f"format {body.get('format')!r}, expected {FORMAT}")
            return cls(**{k: body[k] for k in cls.__dataclass_fields__})
        except (ValueError, KeyError, TypeError) as e:
            raise StateError(f"state commit record {where} is unreadable: {e}") from e


class FilesBackend(StateBackend):
    scheme = "files"

    def __init__(
        self,
        root: str,
        *,
        snapshot_every: int = 10,
        cache_mb: int = 256,
        compression: str = "zstd",
        spec: RowSpec | None = None,
    ):
        super().__init__(spec)
        if not isinstance(snapshot_every, int) or snapshot_every < 1:
            raise ConfigError(f"snapshot_every must be a positive integer, not {snapshot_every!r}")
        if not isinstance(cache_mb, int) or cache_mb < 0:
            raise ConfigError(f"cache_mb must be a non-negative integer, not {cache_mb!r}")
        self.snapshot_every = snapshot_every
        self.cache_mb = cache_mb
        self.compression = compression
        self.location, self._fs, self._root = _resolve(root)
        self._atomic_put = type(self._fs).__name__ in _OBJECT_STORES
        self._cache: PartitionCache | None = None
        if cache_mb:
            self._cache = process_cache()
            self._cache.resize(cache_mb * 1024 * 1024)

    # ----- configuration ----------------------------------------------------------------

    _DEFAULTS = {"snapshot_every": 10, "cache_mb": 256, "compression": "zstd"}

    @property
    def uri(self) -> str:
        options = {k: getattr(self, k) for k, d in self._DEFAULTS.items() if getattr(self, k) != d}
        if not options:
            return f"files:{self.location}"
        return f"files:{self.location}{'&' if '?' in self.location else '?'}{urlencode(options)}"

    @classmethod
    def from_uri(cls, uri: str, spec: RowSpec | None = None) -> FilesBackend:
        rest = uri
        if rest.lower().startswith("files:"):
            rest = rest[len("files:") :]
            if rest.startswith("//"):
                rest = "file:" + rest
        rest, _, query = rest.partition("?")
        remote = _FS_URI.match(rest) and not rest.lower().startswith("file:")
        options: dict[str, Any] = {}
        passed: list[tuple[str, str]] = []  # a remote filesystem's own URI options
        for name, value in parse_qsl(query, keep_blank_values=True, strict_parsing=bool(query)):
            if name not in cls._DEFAULTS:
                if remote:
                    passed.append((name, value))
                    continue
                raise ConfigError(
                    f"unknown option '{name}' in state store URI {uri!r};"
                    f" known: {', '.join(cls._DEFAULTS)}"
                )
            default = cls._DEFAULTS[name]
            try:
                options[name] = type(default)(value)
            except ValueError:
                raise ConfigError(f"option {name}={value!r} in {uri!r} is not valid") from None
        if passed:
            rest = f"{rest}?{urlencode(passed)}"
        if not rest:
            raise ConfigError(f"state store URI {uri!r} has no path")
        return cls(rest, spec=spec, **options)

    def check(self) -> None:
        probe = f"{self._root}/.check-{uuid.uuid4().hex}"
        try:
            self._fs.create_dir(self._root, recursive=True)
            with self._fs.open_output_stream(probe) as f:
                f.write(b"ok")
            self._fs.delete_file(probe)
        except (OSError, pa.ArrowException) as e:
            raise StateError(f"state store {self.uri} is not usable: {e}") from e

    # ----- paths and small I/O ----------------------------------------------------------

    def _partition_dir(self, job: str, partition: int) -> str:
        return f"{self._root}/{job}/partition={partition}"

    def _cache_key(self, job: str, partition: int) -> tuple[str, str, int]:
        return (self.location, job, partition)

    # Each helper counts its filesystem calls in `io` (a transaction's metrics), if given.

    def _list(self, directory: str, io: StateMetrics | None = None) -> list[pafs.FileInfo]:
        _count(io)
        try:
            return self._fs.get_file_info(pafs.FileSelector(directory, allow_not_found=True))
        except (OSError, pa.ArrowException) as e:
            raise StateError(f"cannot list {directory} in state store {self.uri}: {e}") from e

    def _read(self, path: str, io: StateMetrics | None = None) -> bytes | None:
        _count(io)
        try:
            with self._fs.open_input_stream(path) as f:
                data = f.read()
            if io is not None:
                io.bytes_read += len(data)
            return data
        except FileNotFoundError:
            return None
        except (OSError, pa.ArrowException) as e:
            if "not found" in str(e).lower() or "no such file" in str(e).lower():
                return None
            raise StateError(f"cannot read {path} in state store {self.uri}: {e}") from e

    def _write(self, path: str, data: bytes | pa.Buffer, io: StateMetrics | None = None) -> None:
        """Write `path` so that readers see all of it or nothing."""
        _count(io, 1 if self._atomic_put else 2)
        if io is not None:
            io.bytes_written += len(data)
        if self._atomic_put:
            with self._fs.open_output_stream(path) as f:
                f.write(data)
            return
        tmp = f"{path}.tmp-{uuid.uuid4().hex[:16]}"
        try:
            with self._fs.open_output_stream(tmp) as f:
                f.write(data)
            self._fs.move(tmp, path)
        except BaseException:
            self._delete(tmp)
            raise

    def _delete(self, path: str, io: StateMetrics | None = None) -> None:
        _count(io)
        try:
            self._fs.delete_file(path)
        except FileNotFoundError:
            pass
        except (OSError, pa.ArrowException) as e:
            if "not found" not in str(e).lower() and "no such file" not in str(e).lower():
                raise

    def _read_record(
        self, job: str, partition: int, version: int, io: StateMetrics | None = None
    ) -> _Record | None:
        path = f"{self._partition_dir(job, partition)}/{_v(version)}.commit.json"
        data = self._read(path, io)
        return None if data is None else _Record.from_json(data, path)

    # ----- partitions -------------------------------------------------------------------

    def versions(self, job: str, partition: int) -> list[int]:
        check_job(job)
        check_partition(partition)
        return self._versions(self._list(self._partition_dir(job, partition)))

    @staticmethod
    def _versions(listing: list[pafs.FileInfo]) -> list[int]:
        return sorted(int(m.group(1)) for i in listing if (m := _RECORD.match(i.base_name)))

    def partitions(self, job: str) -> list[int]:
        check_job(job)
        found = []
        for info in self._list(f"{self._root}/{job}"):
            m = _PARTITION.match(info.base_name)
            if m and info.type == pafs.FileType.Directory:
                found.append(int(m.group(1)))
        return sorted(found)

    def _open_version(self, job: str, partition: int, version: int) -> FilesVersion:
        key = self._cache_key(job, partition)
        if version == EMPTY_VERSION:
            return FilesVersion(self, job, partition, None, self.spec.empty())
        io = StateMetrics()
        record = self._read_record(job, partition, version, io)
        if record is None:
            raise StateError(self._missing(job, partition, version))
        cached = self._cache.get(key) if self._cache is not None else None
        if cached and cached.version == version and cached.token == record.token:
            self._cache.record(hit=True)
            stored = FilesVersion(self, job, partition, record, cached.table)
            stored.metrics.cache_hits = 1
            stored.metrics.round_trips, stored.metrics.bytes_read = io.round_trips, io.bytes_read
            return stored

        # Walk the chain down to a snapshot (or to the cached version, if it is on it).
        chain = [record]
        base: pa.Table | None = None
        while chain[-1].kind == "delta":
            child = chain[-1]
            if cached and (cached.version, cached.token) == (
                child.parent_version,
                child.parent_token,
            ):
                base = cached.table
                break
            parent = self._read_record(job, partition, child.parent_version, io)
            if parent is None:
                raise StateError(
                    f"version {version} of state {job}/partition={partition} is not restorable:"
                    f" it needs version {child.parent_version}, which is gone"
                    " (removed by maintenance or truncate_after)"
                )
            if parent.token != child.parent_token:
                raise StateError(
                    f"version {version} of state {job}/partition={partition} is not restorable:"
                    f" version {child.version} was built on a version {parent.version} that"
                    " has been re-committed since"
                )
            chain.append(parent)
        if self._cache is not None:
            self._cache.record(hit=base is not None)

        directory = self._partition_dir(job, partition)
        rows_loaded = 0
        table = base
        deltas: list[tuple[pa.Table, pa.Array]] = []
        for rec in reversed(chain):
            data = self._read(f"{directory}/{rec.file}", io)
            if data is None:
                raise StateError(
                    f"version {version} of state {job}/partition={partition} is not restorable:"
                    f" file {rec.file} of version {rec.version} is missing"
                )
            piece = codec.from_parquet(data)
            rows_loaded += piece.num_rows
            if rec.kind == "snapshot":
                table = piece.cast(self.spec.schema)
            else:
                deltas.append(codec.decode_delta(piece, self.spec))
        table = codec.apply_chain(table, deltas, self.spec).combine_chunks()

        stored = FilesVersion(self, job, partition, record, table)
        m = stored.metrics
        m.rows_loaded, m.bytes_read, m.round_trips = rows_loaded, io.bytes_read, io.round_trips
        m.cache_hits = int(base is not None)
        m.extra["chain"] = len(chain)
        if self._cache is not None:
            self._cache.put(key, CacheEntry(version, record.token, record.depth, table))
        return stored

    def _missing(self, job: str, partition: int, version: int) -> str:
        have = self.versions(job, partition)
        span = f"restorable: {have[0]}..{have[-1]}" if have else "no version is committed"
        return (
            f"version {version} of state {job}/partition={partition} is not committed"
            f" or no longer retained ({span})"
        )

    def _commit(
        self, stored: FilesVersion, version: int, puts: pa.Table, removes: pa.Array, meta: dict
    ) -> None:
        spec = self.spec
        job, partition = stored.job, stored.partition
        m = stored.metrics
        directory = self._partition_dir(job, partition)
        table = codec.apply_changes(stored.table, puts, removes, spec)
        snapshot = stored.version == EMPTY_VERSION or stored.depth + 1 >= self.snapshot_every
        token = uuid.uuid4().hex
        kind = "snapshot" if snapshot else "delta"
        name = f"{_v(version)}-{token}.{kind}.parquet"
        data_table = table if snapshot else codec.encode_delta(puts, removes, spec)
        record = _Record(
            version=version,
            token=token,
            parent_version=stored.version,
            parent_token=stored.token,
            kind=kind,
            file=name,
            depth=0 if snapshot else stored.depth + 1,
            meta=meta,
            rows=table.num_rows,
            keys=pc.count_distinct(table.column(spec.key)).as_py(),
            bytes=table.nbytes,
        )
        record_path = f"{directory}/{_v(version)}.commit.json"

        # 1. the data file (a new name: nothing visible changes)
        _count(m)
        self._fs.create_dir(directory, recursive=True)
        payload = codec.to_parquet(data_table, self.compression)
        self._write(f"{directory}/{name}", payload, m)
        # 2. supersede the versions after V, newest first
        listing = self._list(directory, m)
        existing = self._versions(listing)
        superseded = [v for v in existing if v > stored.version and v != version]
        replaced: list[_Record] = []
        for v in sorted((v for v in superseded if v > version), reverse=True):
            replaced += self._drop_record(job, partition, v, m)
        if version in existing:
            old = self._read_record(job, partition, version, m)
            replaced += [old] if old else []
        # 3. publish
        body = record.to_json(
            job=job,
            partition=partition,
            written_at=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            delta_rows=puts.num_rows,
            removed=len(removes),
            file_bytes=payload.size,
        )
        self._write(record_path, body, m)
        # 4. clean up what the new record replaced
        for v in sorted((v for v in superseded if v < version), reverse=True):
            replaced += self._drop_record(job, partition, v, m)
        for rec in replaced:
            if rec.file != name:
                self._delete(f"{directory}/{rec.file}", m)

        m.committed_version = version
        m.rows_written += data_table.num_rows
        m.snapshots += int(snapshot)
        m.keys, m.bytes = record.keys, record.bytes
        if self._cache is not None:
            key = self._cache_key(job, partition)
            self._cache.put(key, CacheEntry(version, token, record.depth, table))

    def _drop_record(
        self, job: str, partition: int, version: int, io: StateMetrics | None = None
    ) -> list[_Record]:
        """Delete the commit record of `version`; return it (for its data file), if any."""
        record = self._read_record(job, partition, version, io)
        self._delete(f"{self._partition_dir(job, partition)}/{_v(version)}.commit.json", io)
        return [record] if record else []

    def _truncate_partition(self, job: str, partition: int, after: int) -> None:
        directory = self._partition_dir(job, partition)
        listing = self._list(directory)
        for v in sorted((v for v in self._versions(listing) if v > after), reverse=True):
            self._delete(f"{directory}/{_v(v)}.commit.json")
        for info in listing:
            m = _DATA.match(info.base_name) or _TEMP.match(info.base_name)
            if m and int(m.group(1)) > after:
                self._delete(info.path)
        if self._cache is not None:
            entry = self._cache.get(self._cache_key(job, partition))
            if entry and entry.version > after:
                self._cache.drop(self._cache_key(job, partition))

    def _maintain(self, job: str, partition: int, keep_from: int) -> None:
        directory = self._partition_dir(job, partition)
        listing = self._list(directory)
        versions = self._versions(listing)
        needed = {v for v in versions if v >= keep_from}
        tokens: dict[int, str] = {}
        # The chain of the oldest retained version, down to its snapshot.
        rec = self._read_record(job, partition, keep_from)
        while rec is not None:
            needed.add(rec.version)
            tokens[rec.version] = rec.token
            if rec.kind == "snapshot":
                break
            parent = self._read_record(job, partition, rec.parent_version)
            rec = parent if parent and parent.token == rec.parent_token else None
        for v in sorted((v for v in versions if v not in needed), reverse=True):
            self._delete(f"{directory}/{_v(v)}.commit.json")
        # Data and temp files no record needs: those of dropped versions, of replaced
        # commits, and what crashed commits left behind (young ones of retained versions
        # may be a commit in progress).
        data_files: dict[int, list[str]] = {}
        for info in listing:
            if m := _DATA.match(info.base_name):
                data_files.setdefault(int(m.group(1)), []).append(m.group(2))
        live: dict[int, str | None] = {}
        for v in needed:
            if v in tokens:
                live[v] = tokens[v]
            elif len(data_files.get(v, ())) == 1:  # the usual case: no record to read
                live[v] = data_files[v][0]
            else:
                r = self._read_record(job, partition, v)
                live[v] = r.token if r else None
        now = time.time()
        for info in listing:
            m = _DATA.match(info.base_name)
            t = _TEMP.match(info.base_name)
            if not (m or t):
                continue
            v = int((m or t).group(1))
            if m and v in needed and live.get(v) == m.group(2):
                continue
            young = info.mtime is not None and now - info.mtime.timestamp() < ORPHAN_GRACE_S
            if v >= keep_from and young:
                continue
            self._delete(info.path)

    # ----- job records ------------------------------------------------------------------

    def _job_record_path(self, job: str, version: int) -> str:
        return f"{self._root}/{job}/{JOB_DIR}/{_v(version)}.json"

    def write_job_record(self, job: str, version: int, record: dict) -> None:
        check_job(job)
        check_version(version)
        try:
            body = json.dumps(record, sort_keys=True, allow_nan=False).encode()
        except (TypeError, ValueError) as e:
            raise StateError(f"job record of {job} version {version} is not JSON-able: {e}") from e
        try:
            self._fs.create_dir(f"{self._root}/{job}/{JOB_DIR}", recursive=True)
            self._write(self._job_record_path(job, version), body)
        except (OSError, pa.ArrowException) as e:
            raise StateError(f"cannot write job record {job}/{version} to {self.uri}: {e}") from e

    def read_job_record(self, job: str, version: int) -> dict | None:
        check_job(job)
        check_version(version)
        data = self._read(self._job_record_path(job, version))
        if data is None:
            return None
        try:
            return json.loads(data)
        except ValueError as e:
            raise StateError(f"job record {job}/{version} in {self.uri} is unreadable") from e

    def job_versions(self, job: str) -> list[int]:
        check_job(job)
        listing = self._list(f"{self._root}/{job}/{JOB_DIR}")
        return sorted(int(m.group(1)) for i in listing if (m := _JOB_RECORD.match(i.base_name)))

    def _delete_job_records(self, job: str, versions: list[int]) -> None:
        for v in sorted(versions, reverse=True):
            self._delete(self._job_record_path(job, v))

    def truncate_after(self, job: str, version: int) -> None:
        try:
            super().truncate_after(job, version)
        except (OSError, pa.ArrowException) as e:
            raise StateError(f"cannot truncate {job} after {version} in {self.uri}: {e}") from e


class FilesVersion(StoredVersion):
    """A partition loaded in full: reads are in-memory Arrow filters (no I/O)."""

    def __init__(
        self,
        backend: FilesBackend,
        job: str,
        partition: int,
        record: _Record | None,  # None: the empty state
        table: pa.Table,
    ):
        version = record.version if record else EMPTY_VERSION
        super().__init__(job, partition, version, record.meta if record else {}, backend.spec)
        self._backend = backend
        self.token = record.token if record else None
        self.depth = record.depth if record else 0
        self.table = table
        self.metrics.keys = record.keys if record else 0
        self.metrics.bytes = record.bytes if record else 0

    def read_rows(self, keys: pa.Int64Array) -> pa.Table:
        return self.table.filter(pc.is_in(self.table.column(self.spec.key), keys))

    def read_expiring(self, upto_us: int) -> pa.Int64Array:
        expiry = self.table.column(self.spec.expiry)
        mask = pc.less(expiry, pa.scalar(upto_us, expiry.type))
        return self.table.filter(mask).column(self.spec.key).combine_chunks().unique()

    def write(self, version: int, puts: pa.Table, removes: pa.Int64Array, meta: dict) -> None:
        self._backend._commit(self, version, puts, removes, meta)

    def close(self) -> None:
        self.table = self._backend.spec.empty()


def _resolve(root: str) -> tuple[str, pafs.FileSystem, str]:
    """(canonical location, filesystem, path on it) of a path or pyarrow filesystem URI."""
    if not _FS_URI.match(root):
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
