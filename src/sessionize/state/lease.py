"""Leases: at most one driver commits to a job's state and outputs at a time.

A lease is a sequence of numbered records, one per driver that took it: the *epoch*. A
driver starts by creating the record of epoch E+1, where E is the latest; creation is
atomic (create-if-absent), so of two drivers racing for it exactly one wins. While it runs,
a background thread rewrites its record with a fresh heartbeat every `ttl / 3`; on a clean
exit it marks the record released.

A driver may take the lease over from the holder of epoch E when that record is released,
when its heartbeat is older than the holder's `ttl` (presumed dead), or when the holder ran
on this host and its process is gone (so a kill -9 restart on the same machine takes over
at once). Otherwise it refuses to start, naming the holder.

Taking the lease is not enough to keep a presumed-dead driver from committing: every state
commit and every job record carries the driver's epoch, and the store rejects it inside the
commit (a conditional write, a transaction, a Lua script) unless it is still the latest. The
batch runner also checks the lease before publishing outputs. A driver that finds it lost
the lease stops with one line and commits nothing more.

The storage of the records is the store's (`LeaseRecords`): the state backend for our
engines, a directory of the checkpoint for Spark's state or of the output for batch jobs
(`lease_records`: files, or on `s3://` objects created by conditional PUTs).
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import socket
import threading
import time
from abc import ABC, abstractmethod
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from typing import Any

import pyarrow.fs as pafs

from sessionize.errors import LeaseHeld, LeaseLost
from sessionize.fs import listing, resolve_fs
from sessionize.objectstore import ObjectStoreUri

# How long a silent driver keeps its lease: a driver on another host that stops
# heartbeating (every ttl/3) is taken over this long after its last heartbeat.
DEFAULT_TTL_S = float(os.environ.get("SESSIONIZE_LEASE_TTL_S", "30"))
# Epoch records kept: one is written per driver start; older ones only tell history.
KEPT_EPOCHS = 10


@dataclass(frozen=True)
class Holder:
    """Who holds (or held) one epoch of a lease."""

    epoch: int
    host: str
    pid: int
    started: str  # ISO-8601, UTC
    token: str
    heartbeat: float  # seconds since the epoch, UTC
    ttl_s: float
    released: bool = False

    def describe(self) -> str:
        return f"the driver on {self.host}, pid {self.pid}, started {self.started}"

    def presumed_dead(self, now: float) -> bool:
        if self.released or now - self.heartbeat > self.ttl_s:
            return True
        return self.host == socket.gethostname() and not _process_alive(self.pid)

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @staticmethod
    def from_json(text: str | bytes) -> Holder:
        return Holder(**json.loads(text))


def _process_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class LeaseRecords(ABC):
    """Where the epochs of one lease are kept."""

    @abstractmethod
    def latest(self) -> Holder | None:
        """The record of the highest epoch, or None."""

    @abstractmethod
    def create(self, holder: Holder) -> bool:
        """Store the record of `holder.epoch` unless that epoch exists; False if it did."""

    @abstractmethod
    def update(self, holder: Holder) -> None:
        """Overwrite the record of `holder.epoch` (its holder's heartbeat or release)."""

    def forget_before(self, epoch: int) -> None:  # noqa: B027 - optional
        """Delete the records of epochs below `epoch` (only the latest decides anything)."""


class Lease:
    """The driver's side: take the lease, keep it alive, check it, give it back."""

    def __init__(self, records: LeaseRecords, what: str, ttl_s: float = DEFAULT_TTL_S):
        self.records = records
        self.what = what
        self.ttl_s = ttl_s
        self.holder: Holder | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def epoch(self) -> int:
        if self.holder is None:
            raise LeaseLost(f"{self.what}: this driver holds no lease")
        return self.holder.epoch

    def acquire(self, above: int = 0) -> int:
        """Take the lease (see the module doc) with an epoch greater than the latest record's
        and than `above`; LeaseHeld names the live holder."""
        now = time.time()
        current = self.records.latest()
        if current is not None and not current.presumed_dead(now):
            raise _held(self.what, current, self.ttl_s)
        mine = Holder(
            epoch=max(current.epoch if current else 0, above) + 1,
            host=socket.gethostname(),
            pid=os.getpid(),
            started=datetime.now(UTC).isoformat(timespec="seconds"),
            token=secrets.token_hex(8),
            heartbeat=now,
            ttl_s=self.ttl_s,
        )
        if not self.records.create(mine):
            winner = self.records.latest()
            raise _held(self.what, winner or mine, self.ttl_s)
        self.holder = mine
        self.records.forget_before(mine.epoch - KEPT_EPOCHS + 1)
        self._thread = threading.Thread(target=self._beat, name="sessionize-lease", daemon=True)
        self._thread.start()
        return mine.epoch

    def check(self) -> None:
        """LeaseLost unless this driver's epoch is still the latest."""
        latest = self.records.latest()
        if self.holder is None or latest is None or latest.epoch != self.holder.epoch:
            taker = f": {latest.describe()} took it over" if latest else ""
            raise LeaseLost(
                f"this driver lost its lease on {self.what}{taker}; it stops without "
                "committing (nothing is lost: the other driver continues the job)"
            )

    def acquire_above(self, fence: int) -> int:
        """Take the lease again with an epoch above a store's `fence`: the store was fenced
        by epochs of lease records that are gone (a checkpoint made anew over kept state),
        which this driver's epoch must outrank."""
        self.release()
        self._stop = threading.Event()
        return self.acquire(above=fence)

    def release(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        if self.holder is None:
            return
        try:
            latest = self.records.latest()
            if latest is not None and latest.epoch == self.holder.epoch:
                self.records.update(_with(self.holder, released=True))
        except Exception:  # noqa: BLE001 - out of reach (S3 down): the lease expires instead,
            pass  # at once for a restart on this host; the failure that ended the run shows
        self.holder = None

    def __getstate__(self) -> dict[str, Any]:
        # A copy (the foreachBatch function over Spark Connect runs on the server) checks
        # and fences with the same holder; the heartbeat stays with the driver that took it.
        return {**self.__dict__, "_stop": None, "_thread": None}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._stop = threading.Event()

    def __enter__(self) -> Lease:
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()

    def _beat(self) -> None:
        while not self._stop.wait(self.ttl_s / 3):
            holder = self.holder
            try:  # records on S3 may be out of reach for a while
                latest = self.records.latest()
                if holder is None or latest is None or latest.epoch != holder.epoch:
                    return  # lost: commits will be refused; the runner stops the query
                self.holder = _with(holder, heartbeat=time.time())
                self.records.update(self.holder)
            except Exception:  # noqa: BLE001 - a missed beat only shortens the lease
                continue


def _with(holder: Holder, **changes: Any) -> Holder:
    return Holder(**{**asdict(holder), **changes})


def _held(what: str, holder: Holder, ttl_s: float) -> LeaseHeld:
    return LeaseHeld(
        f"{what} is in use by {holder.describe()} (lease epoch {holder.epoch}); stop that "
        f"driver first, or, if it is gone, start again once its lease expires "
        f"({ttl_s:g} s after its last heartbeat; at once on the same host)"
    )


class DirectoryLeaseRecords(LeaseRecords):
    """Epoch records as files `DIR/EPOCH.json` on a local or pyarrow file system.

    Creation is exclusive and whole on local paths (a hard link of a written file); on
    other file systems but S3 (`ObjectLeaseRecords`) it is a check then a write, which two
    drivers starting within milliseconds of each other could both pass (HDFS checkpoints).
    """

    def __init__(self, directory: str):
        self.fs, self.dir = resolve_fs(directory)
        self.local = isinstance(self.fs, pafs.LocalFileSystem)

    def _path(self, epoch: int) -> str:
        return f"{self.dir}/{epoch:010d}.json"

    def latest(self) -> Holder | None:
        epochs = [
            int(i.base_name[:-5])
            for i in listing(self.fs, self.dir)
            if i.base_name.endswith(".json") and i.base_name[:-5].isdigit()
        ]
        if not epochs:
            return None
        with self.fs.open_input_stream(self._path(max(epochs))) as f:
            return Holder.from_json(f.read())

    def create(self, holder: Holder) -> bool:
        self.fs.create_dir(self.dir, recursive=True)
        path = self._path(holder.epoch)
        if self.local:
            # Written aside, then hard-linked into place: the link fails if the epoch
            # exists, and a reader never sees the record without its content.
            tmp = f"{path}.{holder.token}.tmp"
            with open(tmp, "w") as f:
                f.write(holder.to_json())
            try:
                os.link(tmp, path)
            except FileExistsError:
                return False
            finally:
                os.unlink(tmp)
            return True
        if self.fs.get_file_info(path).type != pafs.FileType.NotFound:
            return False
        self.update(holder)
        return True

    def forget_before(self, epoch: int) -> None:
        for info in listing(self.fs, self.dir):
            name = info.base_name
            if name.endswith(".json") and name[:-5].isdigit() and int(name[:-5]) < epoch:
                with contextlib.suppress(FileNotFoundError):
                    self.fs.delete_file(info.path)

    def update(self, holder: Holder) -> None:
        path = self._path(holder.epoch)
        tmp = f"{path}.{holder.token}.tmp"
        with self.fs.open_output_stream(tmp) as f:
            f.write(holder.to_json().encode())
        self.fs.move(tmp, path)


class ObjectLeaseRecords(DirectoryLeaseRecords):
    """Epoch records as objects `PREFIX/EPOCH.json` on S3, which has neither rename nor an
    exclusive create through pyarrow: an epoch is created by a conditional PUT
    (`If-None-Match: *`), so of two racing drivers one gets False, and rewritten by a plain
    PUT, which replaces an object whole."""

    def __init__(self, directory: str, store: ObjectStoreUri):
        super().__init__(directory)
        self.store = store

    def create(self, holder: Holder) -> bool:
        body = holder.to_json().encode()
        return self.store.put_if_absent(f"{holder.epoch:010d}.json", body)

    def update(self, holder: Holder) -> None:
        with self.fs.open_output_stream(self._path(holder.epoch)) as f:
            f.write(holder.to_json().encode())


def lease_records(directory: str) -> LeaseRecords:
    """The epoch records kept under `directory` (a path or URI)."""
    store = ObjectStoreUri.parse(directory)
    if store is not None:
        return ObjectLeaseRecords(directory, store)
    return DirectoryLeaseRecords(directory)
