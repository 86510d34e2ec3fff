"""Whether two local paths name one place, whatever their spelling.

Text says nothing about identity: `alias/archive` is inside `out` when `alias` is a symlink
to `out`, `a/../out` is `out`, and `/mnt/out` is `/data/out` through a bind mount. So a path
is compared as the OS resolves it: one that exists by its device and inode (`os.stat`
follows symlinks, and a bind mount shows the inode of the directory it mounts), one that
does not exist yet by `os.path.realpath` (symlinks and `..` of its existing part resolved)
and by the identity of its nearest existing ancestor.

>>> same_place("/tmp", "/tmp/../tmp")
True
"""

from __future__ import annotations

import os


def resolved(path: str) -> str:
    """`path` absolute, with `~`, `..` and the symlinks of its existing part resolved."""
    return os.path.realpath(os.path.expanduser(path))


def identity(path: str) -> tuple[int, int] | None:
    """(device, inode) of what `path` names, following symlinks; None if nothing is there."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino


def same_place(a: str, b: str) -> bool:
    """Whether `a` and `b` name the same file or directory (or would, once created)."""
    ra, rb = resolved(a), resolved(b)
    if ra == rb:
        return True
    ida = identity(ra)
    return ida is not None and ida == identity(rb)


def within(path: str, root: str) -> bool:
    """Whether `path` is `root` or lies below it, through any alias: some ancestor of
    `path` (itself included) is `root`."""
    rp, rr = resolved(path), resolved(root)
    if rp == rr or rp.startswith(rr.rstrip(os.sep) + os.sep):
        return True
    root_id = identity(rr)
    if root_id is None:
        return False
    current = rp
    while True:
        if identity(current) == root_id:
            return True
        parent = os.path.dirname(current)
        if parent == current:
            return False
        current = parent
