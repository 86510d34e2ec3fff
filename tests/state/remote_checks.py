"""Checks every remote backend (PostgreSQL, Redis, DynamoDB) runs on top of the contract:
round trips that grow by chunk, never per key; a real outage of the server, stopped and
started again with its services/NAME.sh script; no credentials in errors.

A test module subclasses `RemoteBackendChecks` (and `CredentialChecks` where URIs may hold a
password) and provides the fixture `make_backend` (as for the contract) plus the class
attributes below.
"""

from __future__ import annotations

import math
import multiprocessing
import os
import random
import signal
import time
from datetime import UTC, datetime, timedelta

import pytest

from sessionize.errors import StateError
from sessionize.state import open_backend
from tests.helpers import OUTPUTS, generate, read_output

from .services_fixtures import start_service, stop_service
from .workers import J, commit, content, expected, read_all, rows

H0 = datetime(2026, 11, 1, tzinfo=UTC)


@pytest.fixture(scope="session")
def files_runs(spark, tmp_path_factory):
    """One generated input (duplicates, late and invalid lines), run in stream mode and in
    batch mode with the `files` state: what every remote backend must reproduce."""
    root = tmp_path_factory.mktemp("remote-parity")
    inp = generate(
        root / "in", hours=3, users=200, events_per_hour=1500, late_rate=0.01, invalid_rate=0.005
    )
    _stream(spark, inp, root / "files-stream", "files")
    _batch(spark, inp, root / "files-batch", "files")
    return root, inp


def _stream(spark, inp, root, state):
    from sessionize.commands.stream import StreamOptions, run_stream

    opts = StreamOptions(
        input=str(inp),
        output=str(root / "out"),
        checkpoint=str(root / "chk"),
        state=state,
        partitions=3,
        max_files_per_trigger=1,
    )
    return run_stream(opts, spark, on_batch=lambda _: None)


def _batch(spark, inp, root, state):
    from sessionize.commands.batch import BatchOptions, run_batch

    opts = BatchOptions(
        input=str(inp),
        output=str(root / "out"),
        start=H0,
        end=H0 + timedelta(hours=2),
        state=state,
        partitions=3,
    )
    return run_batch(opts, spark, on_hour=lambda _: None)


def _same_outputs(a, b) -> None:
    for name in OUTPUTS:
        assert read_output(a / "out", name).equals(read_output(b / "out", name)), name


class RemoteBackendChecks:
    service: str  # services/<service>.sh
    read_chunk: int | None = None  # keys per round trip of get_many (None: any number)

    def commit_trip_bound(self, keys: int) -> int:
        """The most round trips a transaction that opens a version and commits `keys` new
        keys may take."""
        raise NotImplementedError

    # ----- batching ------------------------------------------------------------------------

    def read_trips(self, keys: int) -> int:
        return 1 if self.read_chunk is None else math.ceil(keys / self.read_chunk)

    def test_reads_take_round_trips_per_chunk_not_per_key(self, make_backend):
        backend = make_backend()
        n = 3000
        commit(backend, J, 0, -1, 0, {k: [10_000 + k] for k in range(n)})
        for asked in (1, 10, 1000, n):
            with backend.open(J, 0, 0) as ps:
                before = ps.metrics().round_trips
                got = ps.get_many(list(range(asked)))
                assert got.num_rows == asked
                trips = ps.metrics().round_trips - before
                assert trips == self.read_trips(asked), (asked, trips)
                ps.get_many([])  # nothing asked, nothing sent
                assert ps.metrics().round_trips - before == trips

    def test_expiring_and_the_batch_keys_in_few_round_trips(self, make_backend):
        backend = make_backend()
        n = 3000
        commit(backend, J, 0, -1, 0, {k: [10_000 + k] for k in range(n)})
        for due in (0, 5, 1000):
            with backend.open(J, 0, 0) as ps:
                before = ps.metrics().round_trips
                expiring = ps.expiring(10_000 + due)
                assert expiring.to_pylist() == list(range(due))
                batch = list(range(n - 50, n))  # the users of the micro-batch
                ps.get_many(sorted(set(batch) | set(expiring.to_pylist())))
                trips = ps.metrics().round_trips - before
                assert trips <= self.expiring_trip_bound(due + len(batch)), (due, trips)

    def expiring_trip_bound(self, keys: int) -> int:
        return 1 + self.read_trips(keys)

    def test_commit_round_trips_grow_by_chunk(self, make_backend):
        backend = make_backend()
        commit(backend, J, 0, -1, 0)
        trips = {}
        for v, n in enumerate((1, 10, 2000), start=1):
            ps = commit(backend, J, 0, v - 1, v, {v * 10_000 + k: [k] for k in range(n)})
            trips[n] = ps.metrics().round_trips
            assert trips[n] <= self.commit_trip_bound(n), (n, trips[n])
        assert read_all(backend, J, 0, 3, [10_000, 20_000, 30_000, 31_999]) == expected(
            {10_000: [0], 20_000: [0], 30_000: [0], 31_999: [1999]}
        )

    # ----- outages -------------------------------------------------------------------------

    def test_down_at_start_is_one_clear_line(self, make_backend, restartable):
        restartable(self.service)
        backend = make_backend()
        stop_service(self.service)
        try:
            with pytest.raises(StateError) as info:
                make_backend().check()
        finally:
            start_service(self.service)
        message = str(info.value)
        assert "\n" not in message and len(message) < 600
        backend.check()  # and fine again once the server is back

    def test_lost_mid_batch_then_a_restart_completes(self, make_backend, restartable):
        """The server goes away during a batch: the batch fails with a StateError. It comes
        back; the batch is run again from the same version and the state holds every key
        once, as if nothing had happened."""
        restartable(self.service)
        backend = make_backend()
        for v in range(3):
            commit(backend, J, 0, v - 1, v, {k: [100 * v + k] for k in range(v * 10, v * 10 + 10)})
        ps = backend.open(J, 0, 2)
        ps.get_many(list(range(40)))
        ps.put_many(rows({k: [300 + k] for k in range(25, 35)}))
        ps.remove_many([0, 1])
        stop_service(self.service)
        try:
            with pytest.raises(StateError):
                ps.commit(3)
            with pytest.raises(StateError):
                make_backend().open(J, 0, 2).get_many([1, 2, 3])
        finally:
            start_service(self.service)
        # the restarted batch: a new instance (another task), from version 2 again
        again = make_backend()
        assert again.versions(J, 0) == [0, 1, 2]
        commit(again, J, 0, 2, 3, {k: [300 + k] for k in range(25, 35)}, removes=[0, 1])
        want = {k: [k] for k in range(2, 10)} | {k: [100 + k] for k in range(10, 20)}
        want |= {k: [200 + k] for k in range(20, 25)} | {k: [300 + k] for k in range(25, 35)}
        got = read_all(make_backend(), J, 0, 3, range(40))
        assert got == expected(want)
        assert sum(len(v) for v in got.values()) == 33  # every key once, no duplicates
        assert again.versions(J, 0) == [0, 1, 2, 3]

    # ----- kill -9 ----------------------------------------------------------------------------

    def before_kills(self, need) -> None:
        """Called before the kill -9 test starts."""

    def after_kill(self) -> None:
        """Called after each kill -9 of a client (a hook for servers that mind it)."""

    def test_kill_9_mid_commit_never_leaves_a_partial_version(self, make_backend, restartable):
        """A real process commits big versions in a loop and is killed (SIGKILL) at arbitrary
        moments; every version left is whole, the next process carries on from the newest,
        and maintenance afterwards changes no retained version."""
        self.before_kills(restartable)
        uri = make_backend().uri
        ctx = multiprocessing.get_context("fork")
        rng = random.Random(5)
        start = 0
        for _ in range(4):
            child = ctx.Process(target=_commit_forever, args=(uri, start))
            child.start()
            deadline = time.monotonic() + 120
            while len(open_backend(uri).versions(J, 0)) < start + 2:
                assert time.monotonic() < deadline and child.is_alive()
                time.sleep(0.01)
            time.sleep(rng.uniform(0, 0.3))
            os.kill(child.pid, signal.SIGKILL)
            child.join()
            self.after_kill()
            versions = open_backend(uri).versions(J, 0)
            assert versions == list(range(len(versions)))
            for v in versions[-3:]:
                assert _content(open_backend(uri), v) == _whole(v)
            start = versions[-1] + 1
        backend = open_backend(uri)
        backend.maintenance(J, 0, retain=3)
        for v in backend.versions(J, 0):
            assert _content(open_backend(uri), v) == _whole(v)

    # ----- end to end ------------------------------------------------------------------------

    def test_stream_outputs_equal_the_files_state(self, files_runs, make_backend, spark):
        root, inp = files_runs
        name = f"{self.service}-stream"
        records = _stream(spark, inp, root / name, make_backend().uri)
        assert records[-1]["totals"]["sessions_out"] > 0
        _same_outputs(root / "files-stream", root / name)

    def test_batch_outputs_equal_the_files_state(self, files_runs, make_backend, spark):
        root, inp = files_runs
        name = f"{self.service}-batch"
        _batch(spark, inp, root / name, make_backend().uri)
        _same_outputs(root / "files-batch", root / name)


class CredentialChecks:
    """For backends whose URIs may carry a password (DynamoDB's never do: AWS chain)."""

    def secret_uri(self) -> str:
        """A URI of this backend with the password `s3cret-pw`, for a server that refuses
        connections."""
        raise NotImplementedError

    def test_credentials_never_in_errors_or_repr(self):
        backend = open_backend(self.secret_uri())
        assert "s3cret-pw" not in repr(backend)
        with pytest.raises(StateError) as info:
            backend.check()
        assert "s3cret-pw" not in str(info.value)
        assert "\n" not in str(info.value)
        with pytest.raises(StateError) as info:
            backend.open(J, 0, 0)
        assert "s3cret-pw" not in str(info.value)


_WIDE = 150  # keys rewritten by every version of the kill -9 test


def _whole(v: int) -> dict:
    """Version v of the kill -9 test: every wide key at expiry v, and one marker key."""
    return expected({k: [v] for k in range(_WIDE)} | {10_000 + v: [v]})


def _content(backend, v: int) -> dict:
    with backend.open(J, 0, v) as ps:
        keys = [*range(_WIDE), *range(10_000, 10_000 + v + 2)]
        return content(ps.get_many(keys))


def _commit_forever(uri: str, start: int) -> None:
    backend = open_backend(uri)
    for v in range(start, start + 100_000):
        puts = {k: [v] for k in range(_WIDE)} | {10_000 + v: [v]}
        commit(backend, J, 0, v - 1, v, puts, removes=[10_000 + v - 1] if v else [])
