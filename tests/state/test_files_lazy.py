"""The `files` store's lazy snapshots: a partition larger than `lazy_mb` is read by row group.

References are plain: the whole snapshot read with pyarrow and filtered with `pc.is_in`, or
the same commits made on a store that loads every version whole.
"""

from __future__ import annotations

import random

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from sessionize import schema
from sessionize.errors import StateError
from sessionize.state.backends.files import FilesBackend
from sessionize.state.backends.files_snapshot import SnapshotLayer
from sessionize.state.cache import CacheEntry, PartitionCache, process_cache

from .contract import StateBackendContract
from .test_files import files_leftovers
from .workers import J, commit, content, rows

T0 = 1_790_000_000_000_000  # microseconds


def lazy_store(root, **options) -> FilesBackend:
    """A store that reads every snapshot of more than one row group lazily."""
    group_rows = options.pop("group_rows", None)
    backend = FilesBackend(str(root), lazy_mb=0, **options)
    backend.group_rows = group_rows or backend.group_rows
    return backend


def whole_store(root, **options) -> FilesBackend:
    return FilesBackend(str(root), lazy_mb=1 << 20, **options)


class TestFilesLazyContract(StateBackendContract):
    """The whole contract with every snapshot read lazily (row groups of 3 rows, so that
    the contract's small states have many)."""

    @pytest.fixture
    def make_backend(self, tmp_path):
        root = str(tmp_path / "store")

        def make(spec=None, cache=True):
            backend = FilesBackend(
                root, snapshot_every=3, cache_mb=64 if cache else 0, lazy_mb=0, spec=spec
            )
            backend.group_rows = 3
            return backend

        return make

    @pytest.fixture
    def unusable_backend(self, tmp_path):
        (tmp_path / "file").write_text("not a directory")
        return FilesBackend(str(tmp_path / "file" / "store"), lazy_mb=0)

    @pytest.fixture
    def leftovers(self):
        return files_leftovers


def _big(n: int, seed: int) -> dict[int, list[int]]:
    """n keys (sparse, random), 1-3 rows each, random expiries within an hour."""
    rng = random.Random(seed)
    keys = rng.sample(range(10 * n), n)
    hour = 3_600_000_000
    return {k: [T0 + rng.randrange(hour) for _ in range(rng.choice((1, 1, 2, 3)))] for k in keys}


def _snapshot_file(root, version: int = 0):
    (path,) = (root / J / "partition=0").glob(f"{version:020d}-*.snapshot.parquet")
    return path


def test_a_read_of_a_few_keys_opens_only_their_row_groups(tmp_path):
    root = tmp_path / "store"
    big = _big(200_000, 1)
    commit(lazy_store(root, cache_mb=0), J, 0, -1, 0, big)
    path = _snapshot_file(root)
    meta = pq.read_metadata(path)
    assert meta.num_row_groups > 500  # written for lazy reading

    whole = pq.read_table(path)
    rng = random.Random(2)
    wanted = rng.sample(sorted(big), 20) + [-5, 10 * 200_000 + 7]  # two keys it lacks
    reference = whole.filter(pc.is_in(whole[schema.STATE_KEY], pa.array(wanted, pa.int64())))

    with lazy_store(root, cache_mb=0).open(J, 0, 0) as ps:
        assert isinstance(ps._stored.state.base, SnapshotLayer)
        opened = ps.metrics()
        got = ps.get_many(wanted)
        metrics = ps.metrics()
    assert content(got) == content(reference)
    # the load read the footer only; the read, at most the 20 keys' row groups (a key's rows
    # may span two), each once
    assert opened.rows_loaded == 0 and opened.bytes_read < path.stat().st_size / 4
    groups = metrics.extra["row_groups_read"]
    assert 20 <= groups <= 40
    assert metrics.rows_loaded <= 40 * FilesBackend(str(root)).group_rows + 300
    read = metrics.bytes_read - opened.bytes_read
    assert 0 < read < path.stat().st_size * 50 / meta.num_row_groups


def test_old_single_group_snapshots_load_whole(tmp_path):
    root = tmp_path / "store"
    big = _big(5_000, 3)
    commit(whole_store(root, cache_mb=0), J, 0, -1, 0, big)  # one row group, as before
    assert pq.read_metadata(_snapshot_file(root)).num_row_groups == 1
    with lazy_store(root, cache_mb=0).open(J, 0, 0) as ps:
        assert not ps._stored.state.is_lazy
        assert ps.metrics().rows_loaded == sum(len(v) for v in big.values())
        assert content(ps.get_many(list(big))) == content(rows(big))


@pytest.mark.parametrize("seed", [4, 5, 6])
def test_expiry_over_a_lazy_snapshot_equals_the_whole_loads(tmp_path, seed):
    root = tmp_path / "store"
    big = _big(30_000, seed)
    commit(lazy_store(root, cache_mb=0, group_rows=64), J, 0, -1, 0, big)
    # a delta on top: some keys removed, some moved earlier or later
    rng = random.Random(seed)
    moved = {
        k: [T0 + rng.randrange(-600_000_000, 7_200_000_000)] for k in rng.sample(list(big), 500)
    }
    gone = rng.sample(sorted(set(big) - set(moved)), 300)
    commit(lazy_store(root, cache_mb=0), J, 0, 0, 1, moved, gone)
    lazy, whole = lazy_store(root, cache_mb=0), whole_store(root, cache_mb=0)
    for upto in [T0 - 1, T0 + 1, *(T0 + rng.randrange(3_600_000_000) for _ in range(5)), T0 * 2]:
        with lazy.open(J, 0, 1) as a, whole.open(J, 0, 1) as b:
            assert a._stored.state.is_lazy and not b._stored.state.is_lazy
            due = a.expiring(upto)
            assert due.to_pylist() == sorted(due.to_pylist())
            assert due.equals(b.expiring(upto))
            if upto == T0 - 1:  # nothing due: no row group is read
                assert a.metrics().extra.get("row_groups_read", 0) == 0


def _random_commits(backend: FilesBackend, versions: int, seed: int) -> dict[int, list[int]]:
    """Random puts and removes over `versions` versions on a 3k-key state; the state as a
    dict after them."""
    rng = random.Random(seed)
    state = _big(3_000, seed)
    commit(backend, J, 0, -1, 0, state)
    for v in range(1, versions):
        puts = {
            rng.randrange(40_000): [T0 + rng.randrange(10**9)] for _ in range(rng.randrange(300))
        }
        puts |= {k: [T0 + v, T0 + v + 1] for k in rng.sample(sorted(state), 20)}  # two rows
        removes = rng.sample(sorted(set(state) - set(puts)), rng.randrange(200))
        with backend.open(J, 0, v - 1) as ps:
            if v % 2:  # read first, as a batch does (the store's counts reuse the read)
                ps.get_many([*puts, *removes, *rng.sample(sorted(state), 50)])
            ps.put_many(rows(puts))
            ps.remove_many(removes)
            ps.commit(v)
        state.update(puts)
        for k in removes:
            del state[k]
    return state


@pytest.mark.parametrize("seed", [7, 8])
def test_commits_over_a_lazy_version_reload_as_over_a_whole_one(tmp_path, seed):
    """The same commits through the lazy path (cached and not) and the whole one give the
    same state, with snapshots in between (snapshot_every=4)."""
    lazy_root, whole_root = tmp_path / "lazy", tmp_path / "whole"
    versions = 11
    for cache_mb in (64, 0):
        lazy = lazy_store(lazy_root / str(cache_mb), snapshot_every=4, cache_mb=cache_mb)
        lazy.group_rows = 50
        state = _random_commits(lazy, versions, seed)
    expected = _random_commits(
        whole_store(whole_root, snapshot_every=4, cache_mb=0), versions, seed
    )
    assert state == expected
    keys = list(range(-1, 40_001))
    want = content(rows(expected))
    for root in (lazy_root / "64", lazy_root / "0"):
        snapshots = sorted((root / J / "partition=0").glob("*.snapshot.parquet"))
        assert len(snapshots) >= 1 and pq.read_metadata(snapshots[-1]).num_row_groups > 1
        with lazy_store(root, cache_mb=0).open(J, 0, versions - 1) as ps:  # cold
            assert ps._stored.state.is_lazy
            assert content(ps.get_many(keys)) == want
            metrics = ps.metrics()
        assert (metrics.keys, metrics.bytes > 0) == (len(expected), True)
        with whole_store(root, cache_mb=0).open(J, 0, versions - 1) as ps:
            assert content(ps.get_many(keys)) == want
            assert ps.metrics().keys == len(expected)
    # the committed counts (rows, keys) agree with the whole store's records
    for v in range(versions):
        whole, lazy = whole_store(whole_root, cache_mb=0), lazy_store(lazy_root / "64", cache_mb=0)
        with whole.open(J, 0, v) as w, lazy.open(J, 0, v) as lz:
            got = (lz.metrics().keys, lz._stored.state.rows)
            assert got == (w.metrics().keys, w._stored.state.rows)


def test_a_lazy_version_costs_the_cache_its_deltas_and_footer(tmp_path):
    root = tmp_path / "store"
    commit(lazy_store(root, cache_mb=64), J, 0, -1, 0, _big(50_000, 9))
    with lazy_store(root, cache_mb=64).open(J, 0, 0) as ps:
        state = ps._stored.state
        assert state.is_lazy
        assert state.nbytes < state.state_bytes / 5
        assert np.isclose(state.state_bytes, ps.metrics().bytes, rtol=0.01)


def test_a_lost_lazy_snapshot_is_a_state_error_naming_it(tmp_path):
    root = tmp_path / "store"
    commit(lazy_store(root, cache_mb=0, group_rows=8), J, 0, -1, 0, _big(100, 10))
    path = _snapshot_file(root)
    path.unlink()
    with pytest.raises(StateError, match=rf"file {path.name} of version 0 is missing"):
        lazy_store(root, cache_mb=0).open(J, 0, 0)


@pytest.fixture
def empty_process_cache():
    """The process cache emptied (its bound is set again by the next backend)."""
    cache = process_cache()
    bound = cache.max_bytes
    cache.resize(0)
    yield cache
    cache.resize(bound)


def _due(table: pa.Table, upto: int) -> list[int]:
    """The reference: the keys of `table` with a row expiring before `upto`, by a plain
    filter of the whole table."""
    expiry = table[schema.STATE_EXPIRY].cast(pa.int64())
    return sorted(set(table.filter(pc.less(expiry, upto))[schema.STATE_KEY].to_pylist()))


@pytest.mark.parametrize("seed", [11, 12])
def test_expiry_reads_a_lazy_snapshot_once_then_searches_its_index(
    tmp_path, seed, empty_process_cache
):
    """Expiry checks at increasing times, each followed by a commit removing some of the
    due keys (as a batch closes sessions), give the reference's keys; the first check with
    a due group reads the snapshot's key and expiry columns, the later ones read nothing."""
    root = tmp_path / "store"
    big = _big(20_000, seed)
    store = lazy_store(root, cache_mb=64, group_rows=64)
    commit(store, J, 0, -1, 0, big)
    live = pq.read_table(_snapshot_file(root))
    groups = pq.read_metadata(_snapshot_file(root)).num_row_groups
    rng = random.Random(seed)
    expiries = sorted(e for es in big.values() for e in es)
    # increasing times: before anything, then some exactly at a row's expiry (a strict bound)
    times = [T0 - 1, *sorted(rng.sample(expiries, 12)), T0 * 2]
    reads = []
    for version, upto in enumerate(times):
        with store.open(J, 0, version) as ps:
            assert isinstance(ps._stored.state.base, SnapshotLayer)
            before = ps.metrics()
            due = ps.expiring(upto)
            after = ps.metrics()
            assert due.to_pylist() == _due(live, upto)
            reads.append(
                (
                    after.bytes_read - before.bytes_read,
                    after.extra.get("row_groups_read", 0) - before.extra.get("row_groups_read", 0),
                )
            )
            gone = rng.sample(due.to_pylist(), len(due) // 2)
            ps.remove_many(gone)
            ps.commit(version + 1)
        live = live.filter(pc.invert(pc.is_in(live[schema.STATE_KEY], pa.array(gone, pa.int64()))))
    assert len(list((root / J / "partition=0").glob("*.snapshot.parquet"))) == 1  # one base
    assert reads[0] == (0, 0)  # nothing due yet
    assert reads[1][0] > 0 and reads[1][1] == groups  # the whole snapshot's two columns, once
    assert reads[2:] == [(0, 0)] * (len(times) - 2)
    # a cold open of the last version (its own index) agrees
    with lazy_store(root, cache_mb=0).open(J, 0, len(times)) as ps:
        for upto in times:
            assert ps.expiring(upto).to_pylist() == _due(live, upto)


def test_the_cache_accounts_the_expiry_index_once_built(tmp_path, empty_process_cache):
    cache = empty_process_cache
    root = tmp_path / "store"
    big = _big(20_000, 13)
    store = lazy_store(root, cache_mb=64, group_rows=64)
    commit(store, J, 0, -1, 0, big)
    with store.open(J, 0, 0) as ps:
        state = ps._stored.state
        held = cache.nbytes
        assert held == state.nbytes > 0
        ps.expiring(T0 - 1)  # nothing due: no index
        assert cache.nbytes == held
        ps.expiring(T0 + 60_000_000)
        # 16 bytes a key: its earliest expiry and the key
        assert cache.nbytes == held + 16 * len(big) == state.nbytes
        ps.expiring(T0 + 120_000_000)
        assert cache.nbytes == held + 16 * len(big)
        ps.commit(1)  # the next version shares the snapshot and its index
    assert cache.nbytes == held + 16 * len(big)
    cache.drop(store._cache_key(J, 0))
    assert cache.nbytes == 0


def test_the_cache_takes_back_what_it_accounted_when_an_entry_grew():
    class Growing:
        nbytes = 100

    cache, state = PartitionCache(max_bytes=1000), Growing()
    cache.put(("s", J, 0), CacheEntry(0, "t", state))
    cache.put(("s", J, 1), CacheEntry(0, "t", Growing()))
    state.nbytes = 300  # grew after it was put: not accounted until told
    assert cache.nbytes == 200
    cache.reaccount(("s", J, 0))
    cache.reaccount(("s", J, 2))  # no entry: nothing
    assert cache.nbytes == 400
    state.nbytes = 500  # grew again, unaccounted: dropping it takes back what was accounted
    cache.drop(("s", J, 0))
    assert cache.nbytes == 100
    state.nbytes = 950
    cache.put(("s", J, 0), CacheEntry(1, "u", state))  # over the bound with the other: evicts it
    assert (cache.nbytes, len(cache)) == (950, 1)
