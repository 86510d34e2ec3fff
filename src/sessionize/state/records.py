"""Where a job keeps its own records: JSON records by name and its lease's epochs.

A stream keeps them in its checkpoint (`sessionize.json`, `sessionize-paths.json`,
`_lease/`, ...); a batch job with its output (`_sessionize.json`, `_lease/`). A directory
on any pyarrow filesystem is `FileRecords`; an output that keeps them in its own storage
gives its own (PostgreSQL's tables: sinks/postgres_records.py).
"""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from typing import Any, cast

from sessionize.fs import child, resolve_fs, without_options
from sessionize.state.lease import Lease, LeaseRecords, lease_records

LEASE_DIR = "_lease"  # under a checkpoint, or a batch job's output


class Records(ABC):
    """A job's records in one place.

    Args (of the implementations): the place, as a path or URI.
    """

    place: str  # as given (with the options that reach it)

    @abstractmethod
    def read(self, name: str) -> dict[str, Any]:
        """The record `name`; {} when there is none."""

    @abstractmethod
    def write(self, name: str, record: dict[str, Any]) -> None:
        """Replace the record `name` whole (a reader sees the old one or the new one)."""

    @abstractmethod
    def lease_records(self) -> LeaseRecords:
        """Where the epochs of the place's lease are kept."""

    def lease(self, what: str) -> Lease:
        """The lease of this place: one driver at a time (state/lease.py)."""
        return Lease(self.lease_records(), f"{what} {self.shown}")

    @property
    def shown(self) -> str:
        """The place as messages name it (no options, no secrets)."""
        return without_options(self.place)


class FileRecords(Records):
    """Records as files `PLACE/NAME`, written aside and renamed into place; the lease's
    epochs under `PLACE/_lease/`."""

    def __init__(self, place: str):
        self.place = place
        self.fs, self.base = resolve_fs(place)

    def read(self, name: str) -> dict[str, Any]:
        try:
            with self.fs.open_input_stream(f"{self.base}/{name}") as f:
                return cast(dict[str, Any], json.loads(f.read()))
        except FileNotFoundError:
            return {}

    def write(self, name: str, record: dict[str, Any]) -> None:
        self.fs.create_dir(self.base, recursive=True)
        tmp = f"{self.base}/.{name}.tmp"
        with self.fs.open_output_stream(tmp) as f:
            f.write(json.dumps(record, indent=2, sort_keys=True).encode())
        self.fs.move(tmp, f"{self.base}/{name}")

    def lease_records(self) -> LeaseRecords:
        return lease_records(child(self.place, LEASE_DIR))
