"""The state store contract: one suite that every backend runs (fsspec's tests/abstract).

A backend's test module subclasses `StateBackendContract` and provides one fixture:

    @pytest.fixture
    def make_backend(self, tmp_path):       # or a real service's URI
        def make(spec=None, cache=True):
            ...                             # a new instance on ONE shared, empty store
        return make

`make_backend(cache=False)` must give an instance that shares no in-process cache with the
others (another worker, as far as the store can tell). Every instance made in one test sees
the same storage; each test gets a fresh, empty store. The suite needs
`retention_window` versions or fewer (class attribute) to make maintenance delete version 0.

The class also provides two fixtures that look into the storage itself:

    @pytest.fixture
    def unusable_backend(self):             # an instance whose store cannot be used
        ...                                 # (no server there, no such bucket or directory)

    @pytest.fixture
    def leftovers(self):
        def find(backend, job, partition):  # what the storage still holds of versions the
            ...                             # partition can no longer restore, as a list
        return find
"""

from __future__ import annotations

import concurrent.futures
import datetime as dt
import multiprocessing
import pickle
import threading

import numpy as np
import pyarrow as pa
import pytest

from sessionize import schema
from sessionize.errors import ConfigError, StateError
from sessionize.state import RowSpec, StateBackend, StateMetrics, TxState

from .contract_fence import FenceContract
from .workers import J, commit, commit_versions, content, expected, read_all, rows


class StateBackendContract(FenceContract):
    retention_window = 25  # versions committed before maintenance must be able to drop 0

    @pytest.fixture
    def backend(self, make_backend) -> StateBackend:
        return make_backend()

    # ----- empty state, opening --------------------------------------------------------

    def test_empty_state(self, backend):
        ps = backend.open(J, 0, -1)
        assert ps.version == -1 and ps.meta == {}
        got = ps.get_many(pa.array([1, 2], pa.int64()))
        assert got.num_rows == 0 and got.schema == schema.STATE
        assert ps.expiring(10**18).to_pylist() == []
        assert backend.versions(J, 0) == []
        ps.abort()

    def test_open_uncommitted_version_is_a_state_error(self, backend):
        with pytest.raises(StateError, match="not committed"):
            backend.open(J, 0, 0)
        commit(backend, J, 0, -1, 0)
        commit(backend, J, 0, 0, 1)
        with pytest.raises(StateError, match="version 7"):
            backend.open(J, 0, 7)

    def test_arguments_are_checked(self, backend):
        with pytest.raises(ConfigError):
            backend.open("../escape", 0, -1)
        with pytest.raises(ConfigError):
            backend.open(J, -1, -1)
        with pytest.raises(StateError):
            backend.open(J, 0, -2)
        with pytest.raises(ConfigError):
            backend.maintenance(J, 0, 0)

    # ----- reads and writes ------------------------------------------------------------

    def test_put_get_remove(self, backend):
        commit(backend, J, 0, -1, 0, {1: [10, 11, 12], 2: [20], 3: [30]})
        ps = backend.open(J, 0, 0)
        assert content(ps.get_many([1, 2, 3, 4])) == expected({1: [10, 11, 12], 2: [20], 3: [30]})
        ps.put_many(rows({1: [15]}, "n"))  # replaces all three rows of key 1
        ps.remove_many([2])
        assert content(ps.get_many([1, 2, 3])) == expected({1: [15]}, "n") | expected({3: [30]})
        ps.commit(1)
        assert read_all(backend, J, 0, 1) == expected({1: [15]}, "n") | expected({3: [30]})
        assert read_all(backend, J, 0, 0) == expected({1: [10, 11, 12], 2: [20], 3: [30]})

    def test_read_your_writes(self, backend):
        commit(backend, J, 0, -1, 0, {1: [10], 2: [20]})
        ps = backend.open(J, 0, 0)
        ps.remove_many([1])
        assert ps.get_many([1]).num_rows == 0  # removed: storage is not consulted
        ps.put_many(rows({1: [11, 12]}, "a"))  # a put after a remove wins
        assert content(ps.get_many([1])) == expected({1: [11, 12]}, "a")
        ps.put_many(rows({1: [13]}, "b"))  # a second put replaces the first
        assert content(ps.get_many([1])) == expected({1: [13]}, "b")
        ps.remove_many([1, 9])  # a remove after a put wins; unknown keys are fine
        assert ps.get_many([1, 9]).num_rows == 0
        ps.put_many(rows({3: [30]}))
        assert content(ps.get_many([3, 2])) == expected({3: [30], 2: [20]})
        ps.commit(1)
        assert read_all(backend, J, 0, 1) == expected({2: [20], 3: [30]})

    def test_key_inputs(self, backend):
        commit(backend, J, 0, -1, 0, {1: [10], 2: [20], 3: [30]})
        ps = backend.open(J, 0, 0)
        want = expected({1: [10], 2: [20]})
        assert content(ps.get_many([1, 2, 2, 1])) == want  # duplicates asked once
        assert content(ps.get_many(np.array([1, 2], dtype=np.int64))) == want
        assert content(ps.get_many(pa.chunked_array([[1], [2]]))) == want
        assert content(ps.get_many(pa.array([1, 2], pa.int32()))) == want
        assert ps.get_many([]).num_rows == 0
        with pytest.raises(StateError, match="null"):
            ps.get_many(pa.array([1, None], pa.int64()))

    def test_rows_are_validated(self, backend):
        ps = backend.open(J, 0, -1)
        with pytest.raises(StateError, match="lack"):
            ps.put_many(rows({1: [1]}).drop_columns(["page"]))
        assert ps.state is TxState.FAILED  # any exception fails the transaction for good
        with pytest.raises(StateError, match="failed"):
            ps.commit(0)
        ps.abort()  # a no-op now
        ps = backend.open(J, 0, -1)
        bad = rows({1: [1]}).set_column(
            0, schema.STATE.field(0).with_nullable(True), pa.array([None], pa.int64())
        )
        with pytest.raises(StateError, match="null"):
            ps.put_many(bad)
        ps = backend.open(J, 0, -1)
        ps.put_many(rows({1: [1]}).select(list(reversed(schema.STATE.names))))  # any order
        ps.commit(0)
        assert read_all(backend, J, 0, 0) == expected({1: [1]})

    def test_expiring(self, backend):
        commit(backend, J, 0, -1, 0, {1: [5], 2: [10], 3: [15], 4: [20, 3], 5: [8]})
        ps = backend.open(J, 0, 0)
        assert ps.expiring(10).to_pylist() == [1, 4, 5]  # strictly before; earliest row counts
        assert ps.expiring(11).to_pylist() == [1, 2, 4, 5]
        ps.put_many(rows({1: [100], 6: [1]}))  # 1 no longer expires, 6 does
        ps.remove_many([5])
        assert ps.expiring(11).to_pylist() == [2, 4, 6]
        assert ps.expiring(dt.datetime(1970, 1, 1, tzinfo=dt.UTC)).to_pylist() == []
        assert ps.expiring(0).type == pa.int64()
        ps.commit(1)
        with backend.open(J, 0, 1) as ps:
            assert ps.expiring(11).to_pylist() == [2, 4, 6]
            assert ps.expiring(10**18).to_pylist() == [1, 2, 3, 4, 6]

    # ----- commit, abort, versions -----------------------------------------------------

    def test_meta_round_trip(self, backend):
        meta = {"watermark": 1_700_000_000_000_000, "rules": {"gap": "10m"}, "ñ": [1, None]}
        commit(backend, J, 0, -1, 0, {1: [1]}, meta=meta)
        with backend.open(J, 0, 0) as ps:
            assert ps.meta == meta
        with pytest.raises(StateError, match="JSON"):
            backend.open(J, 0, 0).commit(1, {"x": object()})
        assert backend.versions(J, 0) == [0]

    def test_empty_transaction_commits_the_version(self, backend):
        commit(backend, J, 0, -1, 0, {1: [1]})
        commit(backend, J, 0, 0, 1)
        commit(backend, J, 0, 1, 2)
        assert backend.versions(J, 0) == [0, 1, 2]
        assert read_all(backend, J, 0, 2) == expected({1: [1]})

    def test_versions_may_skip(self, backend):
        commit(backend, J, 0, -1, 100, {1: [1]})
        commit(backend, J, 0, 100, 103, {2: [2]})
        assert backend.versions(J, 0) == [100, 103]
        assert read_all(backend, J, 0, 103) == expected({1: [1], 2: [2]})

    def test_commit_must_advance(self, backend):
        commit(backend, J, 0, -1, 0)
        ps = backend.open(J, 0, 0)
        with pytest.raises(StateError, match="greater"):
            ps.commit(0)
        assert ps.state is TxState.FAILED
        assert backend.versions(J, 0) == [0]

    def test_abort_leaves_no_trace(self, backend):
        commit(backend, J, 0, -1, 0, {1: [1]})
        ps = backend.open(J, 0, 0)
        ps.put_many(rows({2: [2]}))
        ps.remove_many([1])
        ps.abort()
        ps.abort()
        assert ps.state is TxState.ABORTED
        with pytest.raises(StateError, match="aborted"):
            ps.get_many([1])
        with pytest.raises(StateError, match="aborted"):
            ps.commit(1)
        assert backend.versions(J, 0) == [0]
        assert read_all(backend, J, 0, 0) == expected({1: [1]})
        with pytest.raises(RuntimeError), backend.open(J, 0, 0) as ps:
            ps.put_many(rows({3: [3]}))
            raise RuntimeError("task failed")
        assert ps.state is TxState.ABORTED
        assert backend.versions(J, 0) == [0]

    def test_committed_transaction_is_closed(self, backend):
        ps = commit(backend, J, 0, -1, 0, {1: [1]})
        assert ps.state is TxState.COMMITTED
        with pytest.raises(StateError, match="committed"):
            ps.put_many(rows({2: [2]}))
        ps.abort()  # a no-op after the commit (safe in an except block)
        assert ps.state is TxState.COMMITTED and backend.versions(J, 0) == [0]

    def test_recommit_overwrites_never_doubles(self, backend):
        commit(backend, J, 0, -1, 0, {1: [1]})
        commit(backend, J, 0, 0, 1, {2: [2], 3: [3]}, removes=[1], meta={"try": 1})
        # the batch is re-executed: same version, different writes
        commit(backend, J, 0, 0, 1, {2: [22]}, meta={"try": 2}, page="q")
        assert backend.versions(J, 0) == [0, 1]
        assert read_all(backend, J, 0, 1) == expected({1: [1]}) | expected({2: [22]}, "q")
        with backend.open(J, 0, 1) as ps:
            assert ps.meta == {"try": 2}
            assert ps.metrics().keys in (2, None)
        # and identically once more
        commit(backend, J, 0, 0, 1, {2: [22]}, meta={"try": 2}, page="q")
        assert read_all(backend, J, 0, 1) == expected({1: [1]}) | expected({2: [22]}, "q")

    def test_recommit_supersedes_later_versions(self, backend):
        for v in range(5):
            commit(backend, J, 0, v - 1, v, {v: [v]})
        commit(backend, J, 0, 1, 2, {20: [20]})  # history goes 0, 1, 2' now
        assert backend.versions(J, 0) == [0, 1, 2]
        for v in (3, 4):
            with pytest.raises(StateError):
                backend.open(J, 0, v)
        commit(backend, J, 0, 2, 3, {30: [30]})
        assert read_all(backend, J, 0, 3) == expected({0: [0], 1: [1], 20: [20], 30: [30]})
        commit(backend, J, 0, -1, 0, {7: [7]})  # back to the start
        assert backend.versions(J, 0) == [0]
        assert read_all(backend, J, 0, 0) == expected({7: [7]})

    def test_every_version_restorable(self, backend):
        model: dict[int, dict] = {}
        state: dict[int, list[int]] = {}
        for v in range(13):
            removes = [v - 3] if v >= 3 and v % 2 else []
            commit(backend, J, 0, v - 1, v, {v: [v, v + 1]}, removes=removes, meta={"v": v})
            state = {k: e for k, e in state.items() if k not in removes} | {v: [v, v + 1]}
            model[v] = dict(state)
        for v in range(13):
            assert read_all(backend, J, 0, v) == expected(model[v])
            with backend.open(J, 0, v) as ps:
                assert ps.meta == {"v": v}

    def test_maintenance_keeps_the_last_versions(self, backend, make_backend, leftovers):
        n = self.retention_window
        model: dict[int, dict] = {}
        state: dict[int, list[int]] = {}
        for v in range(n):  # every version adds a key, replaces key 99 and removes a key
            removes = [v - 2] if v >= 2 else []
            commit(backend, J, 0, v - 1, v, {v: [v], 99: [v]}, removes=removes)
            state = {k: e for k, e in state.items() if k not in removes} | {v: [v], 99: [v]}
            model[v] = dict(state)
        left = leftovers(backend, J, 0)
        assert left == [], left
        backend.maintenance(J, 0, retain=2)
        kept = backend.versions(J, 0)
        assert kept[-2:] == [n - 2, n - 1]
        assert 0 not in kept
        # nothing of a version no longer restorable stays behind (files, rows, items, keys)
        left = leftovers(backend, J, 0)
        assert left == [], left
        fresh = make_backend(cache=False)
        for v in kept:
            assert read_all(fresh, J, 0, v) == expected(model[v])
        with pytest.raises(StateError):
            fresh.open(J, 0, 0)
        backend.maintenance(J, 0, retain=100)  # more than exist: nothing to do
        assert backend.versions(J, 0) == kept
        commit(backend, J, 0, n - 1, n, {n: [n]})
        assert read_all(fresh, J, 0, n) == expected(model[n - 1] | {n: [n]})

    def test_isolation_between_jobs_and_partitions(self, backend):
        commit(backend, "job-a", 0, -1, 0, {1: [1]})
        commit(backend, "job-a", 1, -1, 5, {2: [2]})
        commit(backend, "job-b", 0, -1, 0, {3: [3]})
        assert read_all(backend, "job-a", 0, 0) == expected({1: [1]})
        assert read_all(backend, "job-a", 1, 5) == expected({2: [2]})
        assert read_all(backend, "job-b", 0, 0) == expected({3: [3]})
        assert backend.versions("job-a", 1) == [5]
        assert backend.partitions("job-a") == [0, 1]
        backend.truncate_after("job-b", -1)
        assert backend.versions("job-b", 0) == []
        assert backend.versions("job-a", 0) == [0]

    # ----- metrics ---------------------------------------------------------------------

    def test_metrics(self, backend):
        ps = commit(backend, J, 0, -1, 0, {1: [1, 2], 2: [3]}, removes=[9])
        m = ps.metrics()
        assert isinstance(m, StateMetrics)
        assert (m.version, m.committed_version) == (-1, 0)
        assert (m.rows_put, m.keys_removed) == (3, 1)
        assert m.keys in (2, None) and m.commit_ms > 0 and m.round_trips > 0
        assert m.rows_written >= 3 and m.bytes_written > 0
        ps = backend.open(J, 0, 0)
        ps.get_many([1, 2, 3])
        m2 = ps.metrics()
        assert m2.version == 0 and m2.load_ms >= 0 and m2.rows_returned == 3
        assert m2.committed_version is None
        total = m + m2
        assert total.rows_put == 3 and total.round_trips == m.round_trips + m2.round_trips
        assert total.as_dict()["committed_version"] == 0
        ps.abort()

    def test_metrics_count_a_fresh_load(self, make_backend):
        backend = make_backend()
        commit(backend, J, 0, -1, 0, {k: [k] for k in range(50)})
        fresh = make_backend(cache=False)
        with fresh.open(J, 0, 0) as ps:
            m = ps.metrics()
            assert m.round_trips >= 1 and m.cache_hits == 0
            assert m.keys in (50, None)

    # ----- concurrency -----------------------------------------------------------------

    def test_concurrent_partitions_threads(self, backend):
        errors = []

        def work(p: int) -> None:
            try:
                commit_versions(backend, p, 6)
            except BaseException as e:  # pragma: no cover - reported below
                errors.append(e)

        threads = [threading.Thread(target=work, args=(p,)) for p in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not errors
        for p in range(8):
            assert backend.versions(J, p) == list(range(6))
            keys = [p * 1000 + v for v in range(6)]
            assert read_all(backend, J, p, 5, keys) == expected({k: [k % 1000] for k in keys})

    def test_concurrent_partitions_processes(self, backend):
        # fork where there is one (PySpark's worker daemon forks too); arguments are pickled
        method = "fork" if "fork" in multiprocessing.get_all_start_methods() else "spawn"
        ctx = multiprocessing.get_context(method)
        with concurrent.futures.ProcessPoolExecutor(2, mp_context=ctx) as pool:
            done = list(pool.map(commit_versions, [backend] * 3, [0, 1, 2], [3] * 3))
        assert done == [0, 1, 2]
        for p in range(3):
            keys = [p * 1000 + v for v in range(3)]
            assert read_all(backend, J, p, 2, keys) == expected({k: [k % 1000] for k in keys})

    # ----- the job commit log, rewind ----------------------------------------------------

    def test_job_records(self, backend):
        assert backend.job_versions(J) == []
        assert backend.read_job_record(J, 0) is None
        backend.write_job_record(J, 0, {"watermark": 5, "config": {"gap": "10m"}})
        backend.write_job_record(J, 1, {"watermark": 6})
        backend.write_job_record(J, 1, {"watermark": 7})  # idempotent overwrite
        backend.write_job_record("job-b", 9, {"x": 1})
        assert backend.job_versions(J) == [0, 1]
        assert backend.read_job_record(J, 1) == {"watermark": 7}
        assert backend.read_job_record(J, 0) == {"watermark": 5, "config": {"gap": "10m"}}
        assert backend.job_versions("job-b") == [9]
        with pytest.raises(StateError, match="JSON"):
            backend.write_job_record(J, 2, {"x": {1, 2}})

    def test_job_settings(self, backend, make_backend):
        """One entry per job: written, read back by every instance, overwritten, kept by a
        rewind; absent for an unknown job."""
        assert backend.read_job_settings(J) is None and backend.recorded_settings(J) is None
        backend.write_job_settings(J, {"gap": "10m", "partitions": 2})
        backend.write_job_settings("job-b", {"gap": "5m"})
        backend.write_job_record(J, 0, {"watermark": 5})
        other = make_backend(cache=False)
        assert other.read_job_settings(J) == {"gap": "10m", "partitions": 2}
        backend.write_job_settings(J, {"gap": "30m", "partitions": 4})
        assert other.read_job_settings(J) == {"gap": "30m", "partitions": 4}
        assert other.read_job_settings("job-b") == {"gap": "5m"}
        assert other.read_job_settings("job-c") is None
        assert other.job_versions(J) == [0] and other.read_job_record(J, 0) == {"watermark": 5}
        backend.truncate_after(J, -1)
        assert other.recorded_settings(J) == {"gap": "30m", "partitions": 4}
        with pytest.raises(StateError, match="JSON"):
            backend.write_job_settings(J, {"x": {1, 2}})

    def test_recorded_settings_of_a_store_whose_records_carry_them(self, backend):
        """A store written before the job's settings had an entry of their own: the newest
        job record's settings stand in, until an entry is written."""
        backend.write_job_record(J, 3, {"watermark": 1, "settings": {"gap": "10m"}})
        backend.write_job_record(J, 4, {"watermark": 2, "settings": {"gap": "20m"}})
        assert backend.read_job_settings(J) is None
        assert backend.recorded_settings(J) == {"gap": "20m"}
        backend.write_job_settings(J, {"gap": "30m"})
        assert backend.recorded_settings(J) == {"gap": "30m"}

    def test_trim_job_records_keeps_the_newest(self, backend):
        for v in (3, 4, 7, 8, 9):
            backend.write_job_record(J, v, {"v": v})
        backend.write_job_record("job-b", 1, {"v": 1})
        backend.trim_job_records(J, 2)
        assert backend.job_versions(J) == [8, 9]
        assert backend.read_job_record(J, 9) == {"v": 9}
        assert backend.job_versions("job-b") == [1]

    def test_truncate_after(self, backend, make_backend):
        for v in range(6):
            for p in range(2):
                commit(backend, J, p, v - 1, v, {v: [v]})
            backend.write_job_record(J, v, {"v": v})
        backend.truncate_after(J, 2)
        assert backend.job_versions(J) == [0, 1, 2]
        assert backend.versions(J, 0) == backend.versions(J, 1) == [0, 1, 2]
        with pytest.raises(StateError):
            backend.open(J, 0, 3)
        # reprocessing: a different batch 3 on top of 2, seen by every instance
        other = make_backend(cache=False)
        commit(other, J, 0, 2, 3, {33: [33]})
        assert read_all(backend, J, 0, 3) == expected({0: [0], 1: [1], 2: [2], 33: [33]})
        backend.truncate_after(J, 2)  # idempotent
        backend.truncate_after(J, 2)
        backend.truncate_after(J, -1)
        assert backend.job_versions(J) == []
        assert backend.versions(J, 0) == backend.versions(J, 1) == []
        assert read_all(backend, J, 0, -1) == {}

    # ----- configuration ---------------------------------------------------------------

    def test_pickles_as_configuration(self, backend):
        commit(backend, J, 0, -1, 0, {1: [1]})
        data = pickle.dumps(backend)
        assert len(data) < 2000
        # rebuilt by its own class from its URI, never through the registry
        assert type(backend).__name__.encode() in data and b"registry" not in data
        clone = pickle.loads(data)
        assert type(clone) is type(backend) and clone.uri == backend.uri
        assert read_all(clone, J, 0, 0) == expected({1: [1]})

    def test_check(self, backend, make_backend, unusable_backend):
        commit(backend, J, 0, -1, 0, {1: [1]})
        backend.write_job_record(J, 0, {"v": 0})
        assert backend.check() is None
        assert make_backend(cache=False).check() is None  # idempotent, nothing cached
        # it changes nothing that is stored
        assert backend.partitions(J) == [0] and backend.versions(J, 0) == [0]
        assert backend.job_versions(J) == [0]
        assert read_all(make_backend(cache=False), J, 0, 0) == expected({1: [1]})
        with pytest.raises(StateError) as info:
            unusable_backend.check()
        assert "\n" not in str(info.value)

    def test_custom_row_spec(self, make_backend):
        spec = RowSpec(
            pa.schema(
                [
                    pa.field("k", pa.int64(), nullable=False),
                    pa.field("until", schema.TS, nullable=False),
                    pa.field("payload", pa.binary()),
                ]
            ),
            key="k",
            expiry="until",
        )
        backend = make_backend(spec=spec)
        until = pa.array([5, 5, 50], schema.TS)
        table = pa.table(
            {"k": [1, 1, 2], "until": until, "payload": [b"a", b"", None]}, schema=spec.schema
        )
        ps = backend.open(J, 0, -1)
        ps.put_many(table)
        ps.commit(0)
        ps = backend.open(J, 0, 0)
        assert ps.get_many([1]).column("payload").to_pylist() == [b"a", b""]
        assert ps.expiring(6).to_pylist() == [1]
        ps.remove_many([1])
        ps.commit(1)
        clone = pickle.loads(pickle.dumps(backend))
        assert clone.spec == spec
        with clone.open(J, 0, 1) as ps:
            assert ps.get_many([1, 2]).column("k").to_pylist() == [2]
        with pytest.raises(ConfigError):
            RowSpec(spec.schema, key="payload", expiry="until")
