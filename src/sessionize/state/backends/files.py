"""The `files` state store: Parquet deltas and snapshots on any pyarrow filesystem.

URI: `files:/abs/path`, a plain path, `file:///abs/path`, or `files:<pyarrow fs URI>`
(`files:s3://bucket/prefix`). Options as a query string: `snapshot_every` (K, the longest
chain: at most K-1 deltas after a snapshot, default 50), `cache_mb` (process cache bound,
default 256, 0 = no cache), `compression` (Parquet codec, default zstd), `lazy_mb` (a
partition whose state is larger is read lazily, default 32: see below).

What it writes under the root (every file, with its name) is in `files_layout.py`. Every
commit gets a random token; its data file carries the token in its name and the commit
record names the file, the token, and the parent version and token it was built on. A
version exists iff its commit record exists; the record is written last (temp file +
rename on local disks, a single PUT on object stores, conditional on S3: `files_io.py`), so
a crash leaves either the whole version or nothing visible, a re-commit of a version never
touches the files of the record it replaces until the new record is published, and of two
writers of one version at the same time on S3 the later is refused.

Commit of V on the loaded version P (steps in this order):
  1. write V's data file: a snapshot if P is empty (-1), if P's chain already holds K-1
     deltas, or if the rows of the chain's deltas with V's (puts plus removed keys) reach
     the rows of the state at V (and at least `SNAPSHOT_MIN_ROWS`), else a delta. So a cold
     load reads at most about twice the state's rows in at most K files, and a snapshot,
     which costs the whole state, comes once the deltas have cost about as much;
  2. delete the commit records of versions > V (newest first): they were computed from the
     state this commit replaces. Until step 3, the old V (if any) is still consistent;
  3. publish V's commit record (replacing an old one atomically); steps 2 and 3 first read
     the fence (`files_fence.py`);
  4. delete the commit records of versions in (P, V), then the data files of every record
     deleted or replaced (best effort; `maintenance` sweeps what a crash leaves).

Loading V reads V's record, then its parents' records down to the nearest snapshot,
checking at each link that the parent's current token is the one the child was built on;
then the snapshot and the deltas. A missing or re-committed link is a StateError.

In memory (the process cache, and what a transaction reads) a version is a
`layered.LayeredState`: the state as of some version, sorted by key, plus the versions'
changes since, so that a commit and a read cost what they touch, not the state's size.

A partition whose state is larger than `lazy_mb` is not loaded whole: its snapshots are
written in small row groups (`files_snapshot.py`), and a version holds the snapshot's footer
(its index) and the deltas since in memory, reading from the snapshot only the row groups
a transaction asks for, and for expiry, once something is due, the snapshot's key and
expiry columns once (into an index of 16 bytes a key that later checks search). Only a new
snapshot reads it whole (once in `snapshot_every` versions at most). The cache then
accounts the deltas, the footer and that index, not the state.
"""

from __future__ import annotations

import time
import uuid
from typing import Any
from urllib.parse import urlencode

import pyarrow as pa
import pyarrow.fs as pafs

from sessionize.errors import ConfigError, StateError
from sessionize.redaction import redact_uri
from sessionize.state import codec
from sessionize.state.backends.common import query_of, read_query, typed_options
from sessionize.state.backends.files_chain import load_chain
from sessionize.state.backends.files_fence import check_fence, raise_fence, read_fence
from sessionize.state.backends.files_io import FilesIO
from sessionize.state.backends.files_layout import (
    COMMIT_RECORD,
    DATA_FILE,
    FS_URI,
    JOB_RECORD,
    PARTITION_DIR,
    TEMP_FILE,
    CommitRecord,
    commit_record_path,
    data_file_name,
    job_dir,
    job_record_path,
    job_settings_path,
    partition_dir,
    resolve_location,
)
from sessionize.state.backends.files_snapshot import GROUP_ROWS, open_snapshot, write_snapshot
from sessionize.state.backends.files_version import FilesVersion
from sessionize.state.base import StateBackend, version_error
from sessionize.state.cache import CacheEntry, PartitionCache, process_cache
from sessionize.state.layered import Layer, LayeredState
from sessionize.state.metrics import StateMetrics
from sessionize.state.rows import EMPTY_VERSION, RowSpec
from sessionize.state.stored import Meta

# Unreferenced data files younger than this, of versions still retained, may belong to a
# commit in progress and are left alone by maintenance.
ORPHAN_GRACE_S = 3600.0
# A chain's deltas may hold this many rows before their size alone asks for a snapshot
# (below it a cold load is cheap whatever the state; the chain cap still applies).
SNAPSHOT_MIN_ROWS = 100_000


class FilesBackend(FilesIO, StateBackend[FilesVersion]):
    scheme = "files"

    def __init__(
        self,
        root: str,
        *,
        snapshot_every: int = 50,
        cache_mb: int = 256,
        compression: str = "zstd",
        lazy_mb: int = 32,
        spec: RowSpec | None = None,
    ):
        super().__init__(spec)
        if not isinstance(snapshot_every, int) or snapshot_every < 1:
            raise ConfigError(f"snapshot_every must be a positive integer, not {snapshot_every!r}")
        if not isinstance(cache_mb, int) or cache_mb < 0:
            raise ConfigError(f"cache_mb must be a non-negative integer, not {cache_mb!r}")
        if not isinstance(lazy_mb, int) or lazy_mb < 0:
            raise ConfigError(f"lazy_mb must be a non-negative integer, not {lazy_mb!r}")
        self.lazy_mb = lazy_mb
        self.group_rows = GROUP_ROWS  # rows per row group of a lazy snapshot
        self.snapshot_every = snapshot_every
        self.cache_mb = cache_mb
        self.compression = compression
        self.location, self._fs, self._root = resolve_location(root)
        self._init_io()
        self._cache: PartitionCache | None = None
        if cache_mb:
            self._cache = process_cache()
            self._cache.resize(cache_mb * 1024 * 1024)

    # ----- configuration ----------------------------------------------------------------

    _DEFAULTS = {"snapshot_every": 50, "cache_mb": 256, "compression": "zstd", "lazy_mb": 32}

    @property
    def uri(self) -> str:
        query = query_of(self, self._DEFAULTS)
        if query and "?" in self.location:  # the filesystem's own options come first
            query = "&" + query[1:]
        return f"files:{self.location}{query}"

    @classmethod
    def from_uri(cls, uri: str, spec: RowSpec | None = None) -> FilesBackend:
        rest = uri
        if rest.lower().startswith("files:"):
            rest = rest[len("files:") :]
            if rest.startswith("//"):
                rest = "file:" + rest
        rest, _, query = rest.partition("?")
        remote = bool(FS_URI.match(rest)) and not rest.lower().startswith("file:")
        # a remote filesystem's own URI options pass through to it
        known, passed = read_query(query, list(cls._DEFAULTS), uri, keep_unknown=remote)
        options: dict[str, Any] = typed_options(known, cls._DEFAULTS, uri)
        if passed:
            rest = f"{rest}?{urlencode(passed, safe=':/')}"
        if not rest:
            raise ConfigError(f"state store URI {redact_uri(uri)!r} has no path")
        return cls(rest, spec=spec, **options)

    def check(self) -> None:
        probe = f"{self._root}/.check-{uuid.uuid4().hex}"
        try:
            self._make_dir(self._root)
            self._write(probe, b"ok")  # the way every file is written
            self._fs.delete_file(probe)
        except (OSError, pa.ArrowException) as e:
            raise StateError(f"state store {self.redacted_uri} is not usable: {e}") from e

    # ----- paths and small I/O ----------------------------------------------------------

    def _partition_dir(self, job: str, partition: int) -> str:
        return partition_dir(self._root, job, partition)

    def _record_path(self, job: str, partition: int, version: int) -> str:
        return commit_record_path(self._root, job, partition, version)

    def _cache_key(self, job: str, partition: int) -> tuple[str, str, int]:
        return (self.location, job, partition)

    def _read_record(
        self, job: str, partition: int, version: int, io: StateMetrics | None = None
    ) -> CommitRecord | None:
        path = self._record_path(job, partition, version)
        data = self._read(path, io)
        return None if data is None else CommitRecord.from_json(data, path)

    # ----- partitions -------------------------------------------------------------------

    def _versions(self, job: str, partition: int) -> list[int]:
        return self._committed(self._list(self._partition_dir(job, partition)))

    @staticmethod
    def _committed(listing: list[pafs.FileInfo]) -> list[int]:
        """The versions that have a commit record in a partition directory's listing."""
        return sorted(int(m.group(1)) for i in listing if (m := COMMIT_RECORD.match(i.base_name)))

    def _partitions(self, job: str) -> list[int]:
        found = []
        for info in self._list(f"{self._root}/{job}"):
            m = PARTITION_DIR.match(info.base_name)
            if m and info.type == pafs.FileType.Directory:
                found.append(int(m.group(1)))
        return sorted(found)

    def _open_version(self, job: str, partition: int, version: int) -> FilesVersion:
        key = self._cache_key(job, partition)
        if version == EMPTY_VERSION:
            return FilesVersion(self, job, partition, None, LayeredState.empty(self.spec))
        io = StateMetrics()
        record = self._read_record(job, partition, version, io)
        if record is None:
            raise version_error(job, partition, version, have=self._versions(job, partition))
        cached = self._cache.get(key) if self._cache is not None else None
        if cached and cached.version == version and cached.token == record.token:
            stored = FilesVersion(self, job, partition, record, cached.state)
            stored.metrics.cache_hits = 1
            stored.metrics.round_trips, stored.metrics.bytes_read = io.round_trips, io.bytes_read
            return stored

        # Walk the chain down to a snapshot (or to the cached version, if it is on it).
        chain = [record]
        base: LayeredState | None = None
        while chain[-1].kind == "delta":
            child = chain[-1]
            link = (child.parent_version, child.parent_token)
            if cached and (cached.version, cached.token) == link:
                base = cached.state
                break
            parent = self._read_record(job, partition, child.parent_version, io)
            if parent is None:
                raise version_error(
                    job,
                    partition,
                    version,
                    reason=(
                        f"it needs version {child.parent_version}, which is gone"
                        " (removed by maintenance or truncate_after)"
                    ),
                )
            if parent.token != child.parent_token:
                raise version_error(
                    job,
                    partition,
                    version,
                    reason=(
                        f"version {child.version} was built on a version {parent.version} that"
                        " has been re-committed since"
                    ),
                )
            chain.append(parent)

        state = load_chain(self, job, partition, record, chain, base, io)
        state = self._fitted(state.settled())

        stored = FilesVersion(self, job, partition, record, state)
        metrics = stored.metrics
        metrics.rows_loaded, metrics.bytes_read = io.rows_loaded, io.bytes_read
        metrics.round_trips = io.round_trips
        metrics.cache_hits = int(base is not None)
        metrics.extra["chain"] = len(chain)
        if self._cache is not None:
            self._cache.put(key, CacheEntry(version, record.token, state))
        return stored

    def _commit(
        self, stored: FilesVersion, version: int, puts: pa.Table, removes: pa.Array, meta: Meta
    ) -> None:
        spec = self.spec
        job, partition = stored.job, stored.partition
        metrics = stored.metrics
        directory = self._partition_dir(job, partition)
        try:  # over a lazy base, reads the key column of the row groups it changes
            state = self._fitted(stored.state.apply(puts, removes, io=metrics))
        except OSError as e:
            raise self._failed("read", directory, e) from e
        delta_rows = puts.num_rows + len(removes)
        chain_rows = stored.chain_rows + delta_rows
        snapshot = (
            stored.version == EMPTY_VERSION
            or stored.depth + 1 >= self.snapshot_every
            or chain_rows >= max(state.rows, SNAPSHOT_MIN_ROWS)
        )
        token = uuid.uuid4().hex
        kind = "snapshot" if snapshot else "delta"
        name = data_file_name(version, token, kind)
        if snapshot:
            try:  # a lazy base is read whole (once in K versions at most)
                state = state.whole(metrics)
            except OSError as e:
                raise self._failed("read", directory, e) from e
            assert isinstance(state.base, Layer)
            data_table = state.base.table
        else:
            data_table = codec.encode_delta(puts, removes, spec)
        record = CommitRecord(
            version=version,
            token=token,
            parent_version=stored.version,
            parent_token=stored.token,
            kind=kind,
            file=name,
            depth=0 if snapshot else stored.depth + 1,
            meta=meta,
            rows=state.rows,
            keys=state.keys,
            bytes=state.state_bytes,
            chain_rows=0 if snapshot else chain_rows,
        )
        record_path = self._record_path(job, partition, version)

        # 1. the data file (a new name: nothing visible changes)
        self._make_dir(directory, metrics)
        lazy = snapshot and self._lazy(record.bytes)
        if snapshot:
            groups = self.group_rows if lazy else None
            payload = write_snapshot(data_table, spec, self.compression, groups)
        else:
            payload = codec.to_parquet(data_table, self.compression)
        self._write(f"{directory}/{name}", payload, metrics)
        if lazy:  # keep the footer, not the rows (taken from the file's bytes in memory)
            path, data = f"{directory}/{name}", payload.to_pybytes()
            layer = open_snapshot(spec, self._fs, path, record.bytes, data)
            state = LayeredState.lazy(layer, state.keys, spec) if layer else state
        # 2. supersede the versions after V, newest first (unless a newer driver took over)
        check_fence(self, job, stored.epoch, metrics)
        listing = self._list(directory, metrics)
        existing = self._committed(listing)
        superseded = [v for v in existing if v > stored.version and v != version]
        replaced: list[CommitRecord] = []
        for v in sorted((v for v in superseded if v > version), reverse=True):
            replaced += self._drop_record(job, partition, v, metrics)
        old, seen = self._read_tagged(record_path, metrics) if version in existing else (None, "")
        replaced += [CommitRecord.from_json(old, record_path)] if old else []
        # 3. publish
        check_fence(self, job, stored.epoch, metrics)
        body = record.to_json(
            job=job,
            partition=partition,
            written_at=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            delta_rows=puts.num_rows,
            removed=len(removes),
            file_bytes=payload.size,
        )
        if not self._publish(record_path, body, seen, metrics):
            self._delete(f"{directory}/{name}", metrics)
            raise StateError(
                f"version {version} of {job} partition {partition} in {self.redacted_uri} was "
                "committed "
                "by another writer at the same time; this commit is dropped: run one driver "
                "per job"
            )
        # 4. clean up what the new record replaced
        for v in sorted((v for v in superseded if v < version), reverse=True):
            replaced += self._drop_record(job, partition, v, metrics)
        for rec in replaced:
            if rec.file != name:
                self._delete(f"{directory}/{rec.file}", metrics)

        metrics.committed_version = version
        metrics.rows_written += data_table.num_rows
        metrics.snapshots += int(snapshot)
        metrics.keys, metrics.bytes = record.keys, record.bytes
        if self._cache is not None:
            key = self._cache_key(job, partition)
            self._cache.put(key, CacheEntry(version, token, state))

    def _lazy(self, state_bytes: int) -> bool:
        """Whether a state of `state_bytes` is read lazily (see the module docstring)."""
        return state_bytes > self.lazy_mb * 1024 * 1024

    def _fitted(self, state: LayeredState) -> LayeredState:
        """`state`, folded if its runs alone keep it from fitting the cache (a partition near
        the bound then pays a fold per commit rather than a reload per batch)."""
        bound = self._cache.max_bytes if self._cache is not None else 0
        if state.runs and state.base.nbytes <= bound < state.nbytes:
            return state.fold()
        return state

    def _drop_record(
        self, job: str, partition: int, version: int, io: StateMetrics | None = None
    ) -> list[CommitRecord]:
        """Delete the commit record of `version`; return it (for its data file), if any."""
        record = self._read_record(job, partition, version, io)
        self._delete(self._record_path(job, partition, version), io)
        return [record] if record else []

    def _truncate_partition(self, job: str, partition: int, after: int) -> None:
        directory = self._partition_dir(job, partition)
        listing = self._list(directory)
        for v in sorted((v for v in self._committed(listing) if v > after), reverse=True):
            self._delete(self._record_path(job, partition, v))
        for info in listing:
            found = DATA_FILE.match(info.base_name) or TEMP_FILE.match(info.base_name)
            if found and int(found.group(1)) > after:
                self._delete(info.path)
        if self._cache is not None:
            entry = self._cache.get(self._cache_key(job, partition))
            if entry and entry.version > after:
                self._cache.drop(self._cache_key(job, partition))

    def _maintain(self, job: str, partition: int, keep_from: int) -> None:
        directory = self._partition_dir(job, partition)
        listing = self._list(directory)
        versions = self._committed(listing)
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
            self._delete(self._record_path(job, partition, v))
        # Data and temp files no record needs: those of dropped versions, of replaced
        # commits, and what crashed commits left behind (young ones of retained versions
        # may be a commit in progress).
        data_files: dict[int, list[str]] = {}
        for info in listing:
            if data := DATA_FILE.match(info.base_name):
                data_files.setdefault(int(data.group(1)), []).append(data.group(2))
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
            data = DATA_FILE.match(info.base_name)
            temp = TEMP_FILE.match(info.base_name)
            found = data or temp
            if found is None:
                continue
            v = int(found.group(1))
            if data and v in needed and live.get(v) == data.group(2):
                continue
            young = info.mtime is not None and now - info.mtime.timestamp() < ORPHAN_GRACE_S
            if v >= keep_from and young:
                continue
            self._delete(info.path)

    # ----- job records ------------------------------------------------------------------

    def _write_job_record(self, job: str, version: int, body: str, epoch: int | None) -> None:
        path = job_record_path(self._root, job, version)
        self._write_job_file(job, path, body, epoch, f"job record {job}/{version}")

    def _read_job_record(self, job: str, version: int) -> bytes | None:
        return self._read(job_record_path(self._root, job, version))

    def _write_job_settings(self, job: str, body: str, epoch: int | None) -> None:
        path = job_settings_path(self._root, job)
        self._write_job_file(job, path, body, epoch, f"the settings of job {job}")

    def _write_job_file(self, job: str, path: str, body: str, epoch: int | None, what: str) -> None:
        """Write a file of the job's log (a record, the settings) unless fenced."""
        check_fence(self, job, epoch)
        try:
            self._make_dir(job_dir(self._root, job))
            self._write(path, body.encode())
        except (OSError, pa.ArrowException) as e:
            raise StateError(f"cannot write {what} to {self.redacted_uri}: {e}") from e

    def _read_job_settings(self, job: str) -> bytes | None:
        return self._read(job_settings_path(self._root, job))

    def _raise_fence(self, job: str, epoch: int, partitions: list[int]) -> int:
        return raise_fence(self, job, epoch)  # one per job, which its partitions share

    def _read_fence(self, job: str) -> int:
        return read_fence(self, job)

    def _job_versions(self, job: str) -> list[int]:
        listing = self._list(job_dir(self._root, job))
        return sorted(int(m.group(1)) for i in listing if (m := JOB_RECORD.match(i.base_name)))

    def _delete_job_records(self, job: str, versions: list[int]) -> None:
        for v in sorted(versions, reverse=True):
            self._delete(job_record_path(self._root, job, v))

    def truncate_after(self, job: str, version: int) -> None:
        try:
            super().truncate_after(job, version)
        except (OSError, pa.ArrowException) as e:
            where = f"{job} after {version} in {self.redacted_uri}"
            raise StateError(f"cannot truncate {where}: {e}") from e
