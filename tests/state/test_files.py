"""The `files` backend: the contract suite, plus its layout, crash safety and process cache."""

from __future__ import annotations

import json
import multiprocessing
import os
import pickle
import random
import signal
import time
from pathlib import Path

import pyarrow as pa
import pytest

from sessionize.errors import ConfigError, EnvironmentProblem, StateError
from sessionize.state import open_backend, registry
from sessionize.state.backends import files
from sessionize.state.backends.files import FilesBackend
from sessionize.state.cache import CacheEntry, PartitionCache, process_cache

from .contract import StateBackendContract
from .workers import J, commit, content, expected, read_all, rows


def files_leftovers(backend: FilesBackend, job: str, partition: int) -> list[str]:
    """The files of a partition's directory that no restorable version needs: anything but
    the commit records of its versions and the data files those records name."""
    needed = set()
    for v in backend.versions(job, partition):
        record = backend._read_record(job, partition, v)
        needed |= {backend._record_path(job, partition, v).rsplit("/", 1)[1], record.file}
    listing = backend._list(backend._partition_dir(job, partition))
    return sorted({info.base_name for info in listing} - needed)


class TestFilesContract(StateBackendContract):
    @pytest.fixture
    def make_backend(self, tmp_path):
        root = str(tmp_path / "store")

        def make(spec=None, cache=True):
            return FilesBackend(root, snapshot_every=3, cache_mb=64 if cache else 0, spec=spec)

        return make

    @pytest.fixture
    def unusable_backend(self, tmp_path):
        (tmp_path / "file").write_text("not a directory")
        return FilesBackend(str(tmp_path / "file" / "store"))

    @pytest.fixture
    def leftovers(self):
        return files_leftovers


@pytest.fixture
def root(tmp_path) -> Path:
    return tmp_path / "store"


def store(root: Path, **options) -> FilesBackend:
    return FilesBackend(str(root), **options)


def pdir(root: Path, job: str = J, partition: int = 0) -> Path:
    return root / job / f"partition={partition}"


def names(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir())


def record(root: Path, version: int, partition: int = 0) -> dict:
    return json.loads((pdir(root, J, partition) / f"{version:020d}.commit.json").read_text())


# ----- URIs and configuration ------------------------------------------------------------


def test_uri_forms(root, monkeypatch, tmp_path):
    a = str(root)
    for uri in (f"files:{a}", a, f"file://{a}", f"files://{a}", f"files:{a}/"):
        backend = open_backend(uri)
        assert isinstance(backend, FilesBackend) and backend.uri == f"files:{a}", uri
    monkeypatch.chdir(tmp_path)
    assert open_backend("files:store").uri == f"files:{a}"
    assert open_backend("store").uri == f"files:{a}"
    b = open_backend(f"files:{a}?snapshot_every=4&cache_mb=0&compression=lz4")
    assert (b.snapshot_every, b.cache_mb, b.compression) == (4, 0, "lz4")
    assert (
        pickle.loads(pickle.dumps(b)).uri
        == b.uri
        == f"files:{a}?snapshot_every=4&cache_mb=0&compression=lz4"
    )  # noqa: E501


def test_bad_uris():
    with pytest.raises(ConfigError, match="unknown option 'snapshots'"):
        open_backend("files:/x?snapshots=3")
    with pytest.raises(ConfigError, match="not valid"):
        open_backend("files:/x?snapshot_every=often")
    with pytest.raises(ConfigError, match="positive"):
        open_backend("files:/x?snapshot_every=0")
    with pytest.raises(ConfigError, match="unknown state store scheme 'ftp:'"):
        open_backend("ftp://host/x")
    with pytest.raises(ConfigError, match="empty"):
        open_backend(" ")


def test_registry_names_the_extra_to_install(monkeypatch, tmp_path):
    (tmp_path / "fake_store_mod.py").write_text("import not_installed_client_xyz\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setitem(registry._REGISTRY, "fakestore", ("fake_store_mod:Store", "fake"))
    monkeypatch.setitem(registry._REGISTRY, "gone", ("sessionize.state.backends.gone:B", "x"))
    with pytest.raises(EnvironmentProblem, match=r"pip install 'sessionize\[fake\]'"):
        open_backend("fakestore://host/db")
    with pytest.raises(EnvironmentProblem, match="'gone' state store is not available"):
        open_backend("gone://host")
    assert registry.scheme_of("C:/state") == "files" and registry.scheme_of("/x") == "files"


def test_check_reports_an_unusable_root(tmp_path):
    (tmp_path / "file").write_text("not a directory")
    with pytest.raises(StateError, match="not usable"):
        store(tmp_path / "file" / "store").check()
    store(tmp_path / "ok").check()
    assert list((tmp_path / "ok").iterdir()) == []


# ----- layout ----------------------------------------------------------------------------


def test_layout_deltas_snapshots_and_records(root):
    backend = store(root, snapshot_every=3)
    for v in range(7):
        commit(backend, J, 0, v - 1, v, {v: [v]}, removes=[v - 1] if v else [], meta={"v": v})
    backend.write_job_record(J, 6, {"watermark": 1})
    listing = names(pdir(root))
    kinds = {}
    for v in range(7):
        rec = record(root, v)
        kinds[v] = rec["kind"]
        assert rec["file"] in listing and rec["file"].startswith(f"{v:020d}-{rec['token']}")
        assert rec["meta"] == {"v": v} and rec["version"] == v and rec["parent_version"] == v - 1
        assert rec["rows"] == rec["keys"] == 1
        if v:
            assert rec["parent_token"] == record(root, v - 1)["token"]
    # the first commit and every third version after a snapshot are snapshots
    assert kinds == {
        0: "snapshot",
        1: "delta",
        2: "delta",
        3: "snapshot",
        4: "delta",
        5: "delta",
        6: "snapshot",
    }
    assert len(listing) == 14  # one data file and one record per version, nothing else
    assert names(root / J / "_job") == [f"{6:020d}.json"]


def test_snapshot_and_delta_loading(root):
    backend = store(root, snapshot_every=4)
    model: dict[int, list[int]] = {}
    states = {}
    for v in range(11):
        removes = [k for k in model if k % 3 == v % 3][:2]
        puts = {v: [v], (v * 7) % 5: [100 + v, 200 + v]}
        commit(backend, J, 0, v - 1, v, puts, removes=removes)
        model = {k: e for k, e in (model | puts).items() if k not in removes}  # remove wins
        states[v] = dict(model)
    fresh = store(root, snapshot_every=4, cache_mb=0)
    for v in range(11):
        with fresh.open(J, 0, v) as ps:
            assert content(ps.get_many(list(range(20)))) == expected(states[v])
            m = ps.metrics()
            assert 1 <= m.extra["chain"] <= 4
            assert m.rows_loaded > 0 and m.cache_hits == 0


def test_a_snapshot_comes_when_the_deltas_reach_the_state_size(root, monkeypatch):
    monkeypatch.setattr(files, "SNAPSHOT_MIN_ROWS", 0)
    backend = store(root, snapshot_every=1000)
    model = {k: [2 * k] for k in range(24)}  # 24 rows, keys 0-4 expiring before 10
    commit(backend, J, 0, -1, 0, model)
    states = {0: dict(model)}
    for v in range(1, 9):  # 24 rows at each version; 5 in each delta: 3 put, 2 removed
        puts = {100 + v: [v, 3000 + v], 19: [4000 + v]}
        removes = sorted((k for k in model if 4 < k < 24 and k != 19), reverse=True)[:2]
        commit(backend, J, 0, v - 1, v, puts, removes=removes)
        model = {k: e for k, e in (model | puts).items() if k not in removes}
        states[v] = dict(model)
    kinds = {v: record(root, v)["kind"] for v in range(9)}
    assert [v for v, kind in kinds.items() if kind == "snapshot"] == [0, 5]
    assert [record(root, v)["chain_rows"] for v in (4, 5, 6)] == [20, 0, 5]
    fresh = store(root, cache_mb=0)
    for v, state in states.items():  # cold loads, the cached versions and the model agree
        for b in (fresh, backend):
            assert read_all(b, J, 0, v, keys=range(200)) == expected(state)
            with b.open(J, 0, v) as ps:
                soonest = {k for k, es in state.items() if min(es) < 10}
                assert ps.expiring(10).to_pylist() == sorted(soonest)
        assert record(root, v)["keys"] == len(state)
        assert record(root, v)["rows"] == sum(len(es) for es in state.values())


def test_recommit_replaces_the_files_of_the_old_commit(root):
    backend = store(root)
    commit(backend, J, 0, -1, 0, {1: [1]})
    commit(backend, J, 0, 0, 1, {2: [2]})
    commit(backend, J, 0, 1, 2, {3: [3]})
    old = record(root, 1)["file"], record(root, 2)["file"]
    commit(backend, J, 0, 0, 1, {4: [4]})  # supersedes 2 as well
    listing = names(pdir(root))
    assert not set(old) & set(listing) and record(root, 1)["file"] in listing
    assert len(listing) == 4  # versions 0 and 1, a data file and a record each


# ----- crash safety ----------------------------------------------------------------------


def test_leftover_temp_and_orphan_files_are_invisible(root, monkeypatch):
    backend = store(root)
    for v in range(3):
        commit(backend, J, 0, v - 1, v, {v: [v]})
    d = pdir(root)
    # a commit of version 3 that crashed after its data file, and one mid-way through writing
    (d / f"{3:020d}-{'a' * 32}.delta.parquet").write_bytes(b"partial")
    (d / f"{3:020d}.commit.json.tmp-0123abcd").write_text("{")
    (d / f"{0:020d}-{'b' * 32}.snapshot.parquet.tmp-0123abcd").write_bytes(b"x")
    assert backend.versions(J, 0) == [0, 1, 2]
    with pytest.raises(StateError, match="not committed"):
        backend.open(J, 0, 3)
    assert read_all(store(root, cache_mb=0), J, 0, 2) == expected({0: [0], 1: [1], 2: [2]})
    commit(backend, J, 0, 2, 3, {3: [3]})  # the retried batch
    backend.maintenance(J, 0, retain=10)  # young orphans of retained versions stay ...
    assert f"{3:020d}-{'a' * 32}.delta.parquet" in names(d)
    assert f"{0:020d}-{'b' * 32}.snapshot.parquet.tmp-0123abcd" in names(d)
    monkeypatch.setattr(files, "ORPHAN_GRACE_S", 0.0)
    backend.maintenance(J, 0, retain=10)  # ... until they are old
    assert len(names(d)) == 8
    assert read_all(store(root, cache_mb=0), J, 0, 3) == expected({k: [k] for k in range(4)})


def test_crash_before_the_commit_record_keeps_the_old_version(root, monkeypatch):
    backend = store(root)
    for v in range(3):
        commit(backend, J, 0, v - 1, v, {v: [v]}, meta={"v": v})
    real_write = FilesBackend._write

    def crash_on_record(self, path, *args):
        if path.endswith(".commit.json"):
            raise OSError("disk gone")
        real_write(self, path, *args)

    monkeypatch.setattr(FilesBackend, "_write", crash_on_record)
    ps = backend.open(J, 0, 0)
    ps.put_many(rows({9: [9]}))
    with pytest.raises(StateError, match="disk gone"):
        ps.commit(1)  # re-execution of batch 1 dies before publishing
    with pytest.raises(StateError, match="failed"):
        ps.commit(1)
    monkeypatch.undo()
    # version 2 was superseded before the publish; version 1 is still the old one, whole
    assert backend.versions(J, 0) == [0, 1]
    fresh = store(root, cache_mb=0)
    assert read_all(fresh, J, 0, 1) == expected({0: [0], 1: [1]})
    assert read_all(backend, J, 0, 1) == expected({0: [0], 1: [1]})
    commit(backend, J, 0, 0, 1, {9: [9]})
    assert read_all(fresh, J, 0, 1) == expected({0: [0], 9: [9]})


def _commit_forever(root: str, start: int) -> None:
    backend = FilesBackend(root, snapshot_every=3)
    for v in range(start, start + 100_000):
        commit(backend, J, 0, v - 1, v, {v: [v]}, removes=[v - 2] if v >= 2 else [])


def test_kill_9_mid_commit_never_leaves_a_partial_version(root):
    """A real process committing in a loop is killed (SIGKILL) at arbitrary moments; every
    version it left is whole, and the next run continues from the newest one."""
    ctx = multiprocessing.get_context("fork")  # what PySpark's worker daemon does
    rng = random.Random(7)
    start = 0
    for _ in range(4):
        child = ctx.Process(target=_commit_forever, args=(str(root), start))
        child.start()
        deadline = time.monotonic() + 30
        while len(store(root, cache_mb=0).versions(J, 0)) < start + 3:
            assert time.monotonic() < deadline and child.is_alive()
            time.sleep(0.002)
        time.sleep(rng.uniform(0, 0.02))
        os.kill(child.pid, signal.SIGKILL)
        child.join()
        versions = store(root, cache_mb=0).versions(J, 0)
        assert versions == list(range(len(versions)))
        fresh = store(root, cache_mb=0, snapshot_every=3)
        for v in versions[-4:]:
            want = {k: [k] for k in (v - 1, v) if k >= 0}
            assert read_all(fresh, J, 0, v, range(v + 1)) == expected(want)
        start = versions[-1] + 1


def _first_commits(root: str, partitions: int) -> None:
    backend = FilesBackend(root)
    for p in range(partitions):
        commit(backend, J, p, -1, 0, {p: [p]})


def test_listing_a_partition_while_another_process_creates_it(root):
    """A reader polling partitions that a writer in another process is committing for the
    first time sees no versions, then version 0: never an error from listing a directory at
    the moment it comes into existence."""
    ctx = multiprocessing.get_context("fork")
    partitions = 300
    child = ctx.Process(target=_first_commits, args=(str(root), partitions))
    child.start()
    reader = store(root, cache_mb=0)
    try:
        for p in range(partitions):
            deadline = time.monotonic() + 30
            while not reader.versions(J, p):
                assert time.monotonic() < deadline and child.exitcode in (None, 0)
    finally:
        child.join()
    assert child.exitcode == 0


def test_a_missing_piece_is_a_clear_error(root):
    backend = store(root, snapshot_every=10, cache_mb=0)
    for v in range(5):
        commit(backend, J, 0, v - 1, v, {v: [v]})
    (pdir(root) / record(root, 2)["file"]).unlink()
    with pytest.raises(StateError, match=r"file .*delta.parquet of version 2 is missing"):
        backend.open(J, 0, 4)
    assert read_all(backend, J, 0, 1) == expected({0: [0], 1: [1]})
    (pdir(root) / f"{1:020d}.commit.json").unlink()
    with pytest.raises(StateError, match="needs version 1, which is gone"):
        backend.open(J, 0, 3)


def test_a_version_built_on_a_replaced_parent_is_refused(root):
    backend = store(root, cache_mb=0)
    for v in range(3):
        commit(backend, J, 0, v - 1, v, {v: [v]})
    stale = (pdir(root) / f"{2:020d}.commit.json").read_bytes()
    stale_file = record(root, 2)["file"]
    data = (pdir(root) / stale_file).read_bytes()
    commit(backend, J, 0, 0, 1, {5: [5]})  # re-commit 1: 2 is superseded
    # even if the old 2 came back (a lagging copy, a zombie writer), it is not used
    (pdir(root) / f"{2:020d}.commit.json").write_bytes(stale)
    (pdir(root) / stale_file).write_bytes(data)
    with pytest.raises(StateError, match="re-committed since"):
        backend.open(J, 0, 2)


# ----- the process cache -----------------------------------------------------------------


def test_cache_serves_consecutive_batches(root):
    backend = store(root)
    commit(backend, J, 0, -1, 0, {k: [k] for k in range(100)})
    for v in range(1, 6):
        ps = backend.open(J, 0, v - 1)
        m = ps.metrics()
        assert (m.cache_hits, m.rows_loaded, m.round_trips) == (1, 0, 1)  # one record read
        assert m.keys == 100 + v - 1
        assert ps.get_many([0, 99]).num_rows == 2
        ps.put_many(rows({100 + v: [v]}))
        ps.commit(v)
    # a new instance in the same process (a task of the next batch) shares the cache
    clone = pickle.loads(pickle.dumps(backend))
    with clone.open(J, 0, 5) as ps:
        assert (ps.metrics().cache_hits, ps.metrics().rows_loaded) == (1, 0)


def test_cache_never_serves_a_version_another_worker_recommitted(root):
    a = store(root)
    b = store(root, cache_mb=0)  # another executor: nothing shared in memory
    commit(a, J, 0, -1, 0, {1: [1]})
    commit(a, J, 0, 0, 1, {2: [2]})
    commit(b, J, 0, 0, 1, {3: [3]})  # the batch re-executed elsewhere
    with a.open(J, 0, 1) as ps:
        assert content(ps.get_many([1, 2, 3])) == expected({1: [1], 3: [3]})
        assert ps.metrics().rows_loaded > 0
    commit(b, J, 0, 0, 1, {4: [4]})  # and once more, now that a has cached the previous one
    assert read_all(a, J, 0, 1, [1, 2, 3, 4]) == expected({1: [1], 4: [4]})


def _recommit_elsewhere(uri: str) -> None:
    backend = open_backend(uri)  # the process cache here is this child's own
    commit(backend, J, 0, 0, 1, {7: [7]})


def test_cache_never_serves_a_version_another_process_recommitted(root):
    a = store(root)
    commit(a, J, 0, -1, 0, {1: [1]})
    commit(a, J, 0, 0, 1, {2: [2]})  # cached here as version 1
    child = multiprocessing.get_context("fork").Process(target=_recommit_elsewhere, args=(a.uri,))
    child.start()
    child.join()
    assert child.exitcode == 0
    with a.open(J, 0, 1) as ps:
        assert content(ps.get_many([1, 2, 7])) == expected({1: [1], 7: [7]})
        assert ps.metrics().cache_hits == 0 and ps.metrics().rows_loaded == 2  # reloaded


def test_cache_after_truncate_after(root):
    a = store(root)
    b = store(root, cache_mb=0)
    for v in range(4):
        commit(a, J, 0, v - 1, v, {v: [v]})
    b.truncate_after(J, 1)
    with pytest.raises(StateError):
        a.open(J, 0, 3)
    commit(b, J, 0, 1, 2, {20: [20]})
    commit(b, J, 0, 2, 3, {30: [30]})
    assert read_all(a, J, 0, 3) == expected({0: [0], 1: [1], 20: [20], 30: [30]})


def test_cache_applies_only_the_deltas_after_the_cached_version(root):
    a = store(root)
    b = store(root, cache_mb=0)
    commit(a, J, 0, -1, 0, {k: [k] for k in range(1000)})
    commit(b, J, 0, 0, 1, {1000: [1]})
    commit(b, J, 0, 1, 2, {1001: [2]}, removes=[0])
    with a.open(J, 0, 2) as ps:
        m = ps.metrics()
        assert m.cache_hits == 1 and m.rows_loaded == 3  # two deltas, not the snapshot
        assert ps.get_many([0, 1, 1000, 1001]).num_rows == 3


def test_cache_is_bounded_by_bytes():
    cache = PartitionCache(max_bytes=1000)
    t = pa.table({"x": pa.array(range(50), pa.int64())})  # 400 bytes
    cache.put(("r", J, 0), CacheEntry(0, "a", t))
    cache.put(("r", J, 1), CacheEntry(0, "b", t))
    assert cache.get(("r", J, 0)) is not None  # now the most recently used
    cache.put(("r", J, 2), CacheEntry(0, "c", t))
    assert cache.get(("r", J, 1)) is None and len(cache) == 2 and cache.nbytes == 800
    cache.put(("r", J, 3), CacheEntry(0, "d", pa.concat_tables([t] * 3)))  # too big
    assert cache.get(("r", J, 3)) is None and len(cache) == 2
    cache.resize(500)
    assert len(cache) == 1


def test_cache_bound_applies_to_backends(root):
    backend = store(root, cache_mb=1)
    assert process_cache().max_bytes == 1024 * 1024
    big = {k: [k] for k in range(20_000)}  # a few MB in memory
    commit(backend, J, 0, -1, 0, big)
    with backend.open(J, 0, 0) as ps:
        assert ps.metrics().cache_hits == 0 and ps.metrics().rows_loaded == 20_000
    store(root)  # back to the default bound for the other tests


def test_a_state_that_fits_the_cache_stays_cached_as_it_changes(root):
    backend = store(root, cache_mb=1)
    page = "x" * 250
    commit(backend, J, 0, -1, 0, {k: [k] for k in range(2800)}, page=page)  # ~0.9 MB
    for v in range(1, 5):  # each version replaces 200 keys: the state keeps its size
        commit(backend, J, 0, v - 1, v, {k: [v] for k in range(v * 200, v * 200 + 200)}, page=page)
        with backend.open(J, 0, v) as ps:
            assert ps.metrics().cache_hits == 1
    store(root)  # back to the default bound for the other tests


# ----- other pyarrow filesystems ---------------------------------------------------------


@pytest.mark.parametrize("single_put", [False, True], ids=["rename", "object-store-put"])
def test_any_pyarrow_filesystem(single_put):
    """pyarrow's in-memory filesystem stands in for a remote one (it lives in this instance
    only, so no pickling here); object stores write each file with one PUT, no rename."""
    backend = open_backend("files:mock:///state/root?snapshot_every=2&cache_mb=0")
    assert backend.uri == "files:mock:///state/root?snapshot_every=2&cache_mb=0"
    backend._atomic_put = single_put
    backend.check()
    for v in range(5):
        commit(backend, J, 0, v - 1, v, {v: [v]}, removes=[v - 2] if v >= 2 else [])
    backend.write_job_record(J, 4, {"w": 4})
    assert read_all(backend, J, 0, 4) == expected({3: [3], 4: [4]})
    assert read_all(backend, J, 0, 1) == expected({0: [0], 1: [1]})
    backend.maintenance(J, 0, retain=2)
    assert backend.versions(J, 0)[-2:] == [3, 4] and 0 not in backend.versions(J, 0)
    backend.truncate_after(J, 3)
    assert backend.versions(J, 0)[-1] == 3 and backend.job_versions(J) == []


def test_remote_uri_options_pass_through():
    backend = open_backend("files:mock:///state?endpoint=x&snapshot_every=4")
    assert backend.snapshot_every == 4
    assert backend.uri == "files:mock:///state?endpoint=x&snapshot_every=4"
    assert pickle.loads(pickle.dumps(backend)).uri == backend.uri
