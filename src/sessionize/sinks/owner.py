"""An output belongs to one job: the first commit into it records its owner, and every other
job is refused at start (docs/design.md, "Outputs", ownership).

Two jobs writing one output break exactly once without an error: each numbers its batches
from its own start (a stream from 0, a batch job by hour), so the second one's publish
replaces or adds to the first one's batches, and a rewind of either retires the other's
rows. So the owner is recorded with the output and compared at every start:

- the record: `{"id", "kind", "job", "place", "processor"}`; the id is the job's own, made
  with its checkpoint (a stream: `CHECKPOINT/sessionize-id.json`, kept when the checkpoint
  is moved or rewound) or with its binding to its state (a batch job: `_sessionize.json`;
  a `stateful.run` job: its job name and state). It is kept at the output: `OUT/_owner.json`
  (local, `s3://`, Parquet or Delta), a row of `_sessionize_records` (PostgreSQL), a record
  keyed `_owner` on `PREFIX._batches` (Kafka, `kafka_owner.py`);
- `refusal` decides (a pure function, below); `claim.OwnerClaim` records the owner just
  before a job's first publish, created only where absent (an exclusive create, a
  conditional PUT, an `INSERT ... ON CONFLICT DO NOTHING`, a transaction under one
  transactional id), so of two jobs racing for a new output one wins and the other stops
  before it publishes;
- an output written before owners were recorded holds batches and no record: the job whose
  own records say it wrote there (a checkpoint that records this output and committed a
  batch, a batch job's `_sessionize.json`) takes it at its next publish; any other is refused.
"""

from __future__ import annotations

import json
import os
import uuid
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import asdict, dataclass, field

import pyarrow.fs as pafs

from sessionize.errors import ConfigError, StateError
from sessionize.fs import listing, resolve_fs
from sessionize.objectstore import ObjectStoreUri

RECORD = "_owner.json"  # at a file output's root; a PostgreSQL output's record name

# The kinds of job, as their owner records and messages name them.
STREAM, BATCH, STATEFUL_STREAM, STATEFUL_RUN = "stream", "batch", "stateful stream", "stateful run"


@dataclass(frozen=True)
class Owner:
    """The job that owns an output (or claims one): what its record holds.

    `place` is where the job's own records are, for people: a stream's checkpoint, a batch
    job's state (without secrets). Only `id` decides; the rest names the job in messages.
    """

    id: str | None  # None: a new job, whose id is made once it is accepted
    kind: str
    job: str
    place: str
    processor: str | None = None

    def describe(self) -> str:
        """The job in words: `the stream of checkpoint /data/chk`.

        >>> Owner("1f", BATCH, "daily", "files").describe()
        "the batch job 'daily' with state files"
        """
        if self.kind == STREAM:
            return f"the stream of checkpoint {self.place}"
        if self.kind == STATEFUL_STREAM:
            return f"the stateful stream of processor {self.processor} at checkpoint {self.place}"
        if self.kind == STATEFUL_RUN:
            job = f"the stateful job '{self.job}'"
            return f"{job} of processor {self.processor}, state {self.place}"
        return f"the batch job '{self.job}' with state {self.place}"

    def way_out(self) -> str:
        """What the person refused can do instead."""
        if self.kind in (STREAM, STATEFUL_STREAM):
            run = "run that checkpoint (moved elsewhere, it keeps its outputs)"
        elif self.kind == BATCH:
            run = "run `sessionize batch` with that state and job"
        else:
            run = "run that stateful job"
        return f"{run}, or give this job another --output"

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @staticmethod
    def from_json(text: str | bytes) -> Owner:
        body = json.loads(text)
        return Owner(**{k: body.get(k) for k in ("id", "kind", "job", "place", "processor")})


def new_id() -> str:
    """A new job's id (made once, with its checkpoint or its output record)."""
    return uuid.uuid4().hex


@dataclass(frozen=True)
class Claimant:
    """The job that starts on an output: the owner it would record (`owner.id` None: a new
    job, whose id is made once it is accepted), and whether its own records say it wrote
    this output before owners were recorded (asked only of such an output)."""

    owner: Owner
    wrote_here: Callable[[], bool] = field(default=lambda: False, compare=False)

    @property
    def id(self) -> str | None:
        return self.owner.id


def refusal(shown: str, recorded: Owner | None, written: list[str], me: Claimant) -> str | None:
    """Why `me` may not write the output `shown`, in one line; None when it may.

    `recorded` is the output's owner record; `written` names what the output holds (its
    outputs with committed batches), for an output without a record.

    >>> me = Claimant(Owner(None, STREAM, "sessionize", "/chk2"))
    >>> refusal("/out", None, [], me) is None  # a new output: the first commit records me
    True
    >>> refusal("/out", Owner("a1", STREAM, "sessionize", "/chk"), [], me)[:52]
    'output /out belongs to the stream of checkpoint /chk'
    """
    if recorded is not None:
        if recorded.id is not None and recorded.id == me.id:
            return None
        if recorded.kind in (STREAM, STATEFUL_STREAM) and recorded.place == me.owner.place:
            return (  # the checkpoint was removed and made again: another job, same place
                f"output {shown} belongs to {recorded.describe()} as it was before it was made "
                f"anew: its batches are not this job's; give this job another --output, or "
                f"remove {shown} to start it over"
            )
        return (
            f"output {shown} belongs to {recorded.describe()}, not to "
            f"{me.owner.describe()}: {recorded.way_out()}"
        )
    if not written or me.wrote_here():
        return None
    return (
        f"output {shown} holds {', '.join(written)}, written before outputs recorded their "
        f"owner and not by {me.owner.describe()}: write it with the job that wrote it, or "
        "give this job another --output"
    )


class OwnerRecords(ABC):
    """Where an output keeps its owner record."""

    @abstractmethod
    def read(self) -> Owner | None:
        """The owner recorded, or None."""

    @abstractmethod
    def create(self, owner: Owner) -> bool:
        """Record `owner` unless an owner is recorded (atomically); False if one was."""

    @abstractmethod
    def replace(self, owner: Owner) -> None:
        """Rewrite the record of the same owner (its checkpoint moved: its new place)."""

    @abstractmethod
    def written(self) -> list[str]:
        """The outputs that hold committed batches (for an output without a record)."""


class FileOwnerRecords(OwnerRecords):
    """`OUT/_owner.json` at a local or `s3://` output: created by an exclusive hard link
    (local) or a conditional PUT (S3), replaced whole (a rename, a PUT)."""

    def __init__(self, root: str):
        self.root = root
        self.fs, self.base = resolve_fs(root)
        self.path = f"{self.base}/{RECORD}"

    def read(self) -> Owner | None:
        try:
            with self.fs.open_input_stream(self.path) as f:
                text = f.read()
        except FileNotFoundError:
            return None
        except NotADirectoryError:
            raise ConfigError(f"--output {self.root} is a file: give a directory") from None
        try:
            return Owner.from_json(text)
        except (ValueError, TypeError, AttributeError) as e:
            raise StateError(
                f"{self.path} is not readable ({e}): restore it, or remove it (the job whose "
                "own records say it wrote the output takes it again at its next run)"
            ) from None

    def create(self, owner: Owner) -> bool:
        body = owner.to_json().encode()
        store = ObjectStoreUri.parse(self.root)
        if store is not None:
            return store.put_if_absent(RECORD, body)
        self.fs.create_dir(self.base, recursive=True)
        if not isinstance(self.fs, pafs.LocalFileSystem):  # HDFS: a check, then a write
            if self.read() is not None:
                return False
            self.replace(owner)
            return True
        tmp = f"{self.path}.{uuid.uuid4().hex}.tmp"
        with open(tmp, "wb") as f:
            f.write(body)
        try:
            os.link(tmp, self.path)  # fails if the record exists: one creator wins
        except FileExistsError:
            return False
        finally:
            os.unlink(tmp)
        return True

    def replace(self, owner: Owner) -> None:
        body = owner.to_json().encode()
        if ObjectStoreUri.parse(self.root) is not None:  # a PUT replaces an object whole
            with self.fs.open_output_stream(self.path) as f:
                f.write(body)
            return
        tmp = f"{self.path}.{uuid.uuid4().hex}.tmp"
        with self.fs.open_output_stream(tmp) as f:
            f.write(body)
        self.fs.move(tmp, self.path)

    def written(self) -> list[str]:
        """The outputs under the root with a committed batch: Parquet's batch directories
        (or, compacted, its view's symlink), an S3 output's commit files, a Delta log, an
        Iceberg table (its metadata, in the namespace's directory of the warehouse)."""
        found = []
        local = isinstance(self.fs, pafs.LocalFileSystem)
        for info in listing(self.fs, self.base):
            name = info.base_name
            if name.startswith(("_", ".")):
                continue
            if local and os.path.islink(info.path):
                found.append(name)  # a compacted output's view
                continue
            if info.type != pafs.FileType.Directory:
                continue
            inside = {i.base_name for i in listing(self.fs, info.path)}
            # A Delta log, S3 commit files, an Iceberg table's metadata, batch directories.
            if {"_delta_log", "_commits", "metadata"} & inside or any(
                n.startswith("batch_id=") for n in inside
            ):
                found.append(name)
        return sorted(found)
