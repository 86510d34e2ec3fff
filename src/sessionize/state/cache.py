"""The worker-process cache of loaded partition states.

A Spark executor runs batch after batch on the same partitions; without a cache every batch
would reload the state it committed itself a moment ago. The cache keeps, per
(store location, job, partition), the one full table most recently loaded or committed in
this process (in whatever form the backend reads it fastest), with the version and the
commit token it had.

It is explicit, not hidden: a backend asks for an entry by that key and must validate it
against the token in the version's commit record (one small read) before using it, so the
cache can never serve a stale version -- not after another process re-committed the version
with different data, and not after `truncate_after` removed it. It is bounded by bytes and
evicts the least recently used partitions first. Entries are immutable, so an entry shares
its buffers with the transactions that use it; a state may still grow an index it builds
when first asked (the `files` store's expiry index of a lazy snapshot): the cache accounts
each entry at the size it had when put (so that dropping it takes back exactly that), and
`reaccount` puts it again at its size now.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

CacheKey = tuple[str, str, int]  # (store location, job, partition)

DEFAULT_CACHE_BYTES = 256 * 1024 * 1024


@dataclass(frozen=True)
class CacheEntry:
    version: int
    token: str
    state: Any  # the backend's in-memory form of the version: anything with `nbytes`

    @property
    def nbytes(self) -> int:
        return int(self.state.nbytes)


class PartitionCache:
    """Bounded, thread-safe map (location, job, partition) -> the latest CacheEntry."""

    def __init__(self, max_bytes: int = DEFAULT_CACHE_BYTES):
        self._lock = threading.Lock()
        self._entries: OrderedDict[CacheKey, CacheEntry] = OrderedDict()
        self._sizes: dict[CacheKey, int] = {}  # what each entry was accounted at
        self._bytes = 0
        self.max_bytes = max_bytes

    def get(self, key: CacheKey) -> CacheEntry | None:
        """The entry of `key` (unvalidated: compare its version and token with storage)."""
        with self._lock:
            entry = self._entries.get(key)
            if entry is not None:
                self._entries.move_to_end(key)
            return entry

    def put(self, key: CacheKey, entry: CacheEntry) -> None:
        with self._lock:
            self._put(key, entry)

    def reaccount(self, key: CacheKey) -> None:
        """Account the entry of `key` (if any) at its size now: its state grew since it
        was put (it may be a later version than the one that grew, sharing its index)."""
        with self._lock:
            entry = self._entries.get(key)
            if entry is not None:
                self._put(key, entry)

    def _put(self, key: CacheKey, entry: CacheEntry) -> None:
        self._pop(key)
        size = entry.nbytes
        if size > self.max_bytes:
            return
        self._entries[key] = entry
        self._sizes[key] = size
        self._bytes += size
        self._evict()

    def drop(self, key: CacheKey) -> None:
        with self._lock:
            self._pop(key)

    def resize(self, max_bytes: int) -> None:
        with self._lock:
            self.max_bytes = max_bytes
            self._evict()

    @property
    def nbytes(self) -> int:
        return self._bytes

    def __len__(self) -> int:
        return len(self._entries)

    def _pop(self, key: CacheKey) -> None:
        if self._entries.pop(key, None) is not None:
            self._bytes -= self._sizes.pop(key)

    def _evict(self) -> None:
        while self._entries and self._bytes > self.max_bytes:
            key, _ = self._entries.popitem(last=False)
            self._bytes -= self._sizes.pop(key)


_PROCESS_CACHE = PartitionCache()


def process_cache() -> PartitionCache:
    """The one cache of this process, shared by every backend instance that enables caching
    (a pickled backend arrives on an executor as a new instance, so the cache cannot live on
    the instance). Its bound is the `cache_mb` of the last backend that set it."""
    return _PROCESS_CACHE
