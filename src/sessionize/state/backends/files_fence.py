"""The `files` store's fence: one empty file `<job>/_fence/<epoch>` per lease epoch that
fenced the job (`files_layout.py`).

Raising the fence creates the file of its epoch, so the fence -- the largest epoch present
-- only moves up, whatever the order in which two drivers raise it. A commit reads the fence
just before it supersedes later versions and again just before it publishes its record, and
a job record just before it is written. A file system has no write conditional on another
file, so a driver stalled exactly between that read and its write could still write once
more; the newer driver raised the fence before it opened any state, so its own commit of
that version, which comes later, replaces such a write (as it replaces a re-executed batch).
"""

from __future__ import annotations

from typing import Protocol

import pyarrow.fs as pafs

from sessionize.state.backends.files_layout import FENCE_MARK, fence_dir, version_name
from sessionize.state.base import fenced_error
from sessionize.state.metrics import StateMetrics

KEEP_MARKS = 3  # older marks are deleted when the fence is raised


class FencedFiles(Protocol):
    """The file operations of `files.FilesBackend` the fence uses."""

    _root: str
    _fs: pafs.FileSystem

    def _make_dir(self, directory: str, io: StateMetrics | None = None) -> None: ...
    def _list(self, directory: str, io: StateMetrics | None = None) -> list[pafs.FileInfo]: ...
    def _write(self, path: str, data: bytes, io: StateMetrics | None = None) -> None: ...
    def _delete(self, path: str, io: StateMetrics | None = None) -> None: ...


def read_fence(backend: FencedFiles, job: str, io: StateMetrics | None = None) -> int:
    listing = backend._list(fence_dir(backend._root, job), io)
    return max(
        (int(m.group(1)) for i in listing if (m := FENCE_MARK.match(i.base_name))), default=0
    )


def raise_fence(backend: FencedFiles, job: str, epoch: int) -> int:
    directory = fence_dir(backend._root, job)
    backend._make_dir(directory)
    backend._write(f"{directory}/{version_name(epoch)}", b"")
    marks = sorted(
        int(m.group(1)) for i in backend._list(directory) if (m := FENCE_MARK.match(i.base_name))
    )
    for old in marks[:-KEEP_MARKS]:
        backend._delete(f"{directory}/{version_name(old)}")
    return marks[-1]


def check_fence(
    backend: FencedFiles, job: str, epoch: int | None, io: StateMetrics | None = None
) -> None:
    """fenced_error if `epoch` (None: unfenced) is below the job's fence."""
    if epoch is None:
        return
    fence = read_fence(backend, job, io)
    if fence > epoch:
        raise fenced_error(job, epoch, fence)
