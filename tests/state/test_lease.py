"""Leases over a directory: one holder, takeover of a dead one, a lost lease is noticed."""

from __future__ import annotations

import subprocess
import sys
import threading
import time

import pytest

from sessionize.errors import LeaseHeld, LeaseLost
from sessionize.state.lease import KEPT_EPOCHS, DirectoryLeaseRecords, Holder, Lease


def _lease(tmp_path, ttl_s=30.0) -> Lease:
    return Lease(DirectoryLeaseRecords(str(tmp_path / "lease")), "checkpoint chk", ttl_s)


def test_a_second_driver_is_refused_naming_the_first(tmp_path):
    first = _lease(tmp_path)
    assert first.acquire() == 1
    with pytest.raises(LeaseHeld, match=r"checkpoint chk is in use by the driver on .*pid \d+"):
        _lease(tmp_path).acquire()
    first.check()
    first.release()
    second = _lease(tmp_path)
    assert second.acquire() == 2
    second.release()


def test_a_killed_driver_on_this_host_is_taken_over_at_once(tmp_path):
    code = (
        "import sys, time; from sessionize.state.lease import DirectoryLeaseRecords, Lease;"
        f"Lease(DirectoryLeaseRecords({str(tmp_path / 'lease')!r}), 'c').acquire();"
        "print('held', flush=True); time.sleep(600)"
    )
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "held"
        with pytest.raises(LeaseHeld):
            _lease(tmp_path).acquire()
        proc.kill()
        proc.wait()
        assert _lease(tmp_path).acquire() == 2
    finally:
        proc.kill()


def test_a_silent_holder_elsewhere_expires_after_its_ttl(tmp_path):
    records = DirectoryLeaseRecords(str(tmp_path / "lease"))
    other = Holder(1, "another-host", 1, "2026-11-01T00:00:00+00:00", "t", time.time(), 2.0)
    assert records.create(other)
    with pytest.raises(LeaseHeld, match="another-host"):
        _lease(tmp_path).acquire()
    records.update(Holder(**{**other.__dict__, "heartbeat": time.time() - 3}))
    assert _lease(tmp_path).acquire() == 2


def test_the_old_holder_notices_it_lost_the_lease(tmp_path):
    old = _lease(tmp_path)
    old.acquire()
    records = DirectoryLeaseRecords(str(tmp_path / "lease"))
    assert records.create(Holder(2, "elsewhere", 1, "now", "t", time.time(), 30.0))
    with pytest.raises(LeaseLost, match="lost its lease on checkpoint chk: the driver on elsew"):
        old.check()
    old.release()  # does not touch the new holder's record
    assert records.latest().epoch == 2 and not records.latest().released


def test_exactly_one_of_racing_creators_wins_and_readers_see_whole_records(tmp_path):
    for attempt in range(30):
        _race(DirectoryLeaseRecords(str(tmp_path / f"lease{attempt}")))


def _race(records: DirectoryLeaseRecords) -> None:
    wins, seen, errors, done = [], [], [], threading.Event()

    def race(i):
        wins.append(records.create(Holder(1, "h", i, "now", str(i), time.time(), 30.0)))

    def read():
        while not done.is_set():
            try:
                seen.append(records.latest())
            except ValueError as e:  # a record seen half written
                errors.append(e)

    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # threads take turns often: a half-written record shows
    try:
        reader = threading.Thread(target=read)
        reader.start()
        threads = [threading.Thread(target=race, args=(i,)) for i in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        done.set()
        reader.join()
    finally:
        sys.setswitchinterval(interval)
    assert sorted(wins) == [False] * 7 + [True]
    assert not errors and len({h.token for h in seen if h is not None}) <= 1


def test_the_heartbeat_keeps_a_short_lease_alive(tmp_path):
    lease = _lease(tmp_path, ttl_s=0.6)
    lease.acquire()
    time.sleep(1.5)
    records = DirectoryLeaseRecords(str(tmp_path / "lease"))
    assert time.time() - records.latest().heartbeat < 0.6
    lease.release()
    assert records.latest().released


def test_a_store_fenced_by_lease_records_now_gone_is_outranked(tmp_path):
    """A checkpoint made anew over kept state: its lease starts at epoch 1 again, but the
    store's fence remembers epoch 7, so the driver takes an epoch above it."""
    from sessionize.config import SessionRules
    from sessionize.engines.keyed import fence_store
    from sessionize.engines.sessions import SessionSettings
    from sessionize.state.backends.files import FilesBackend

    backend = FilesBackend(str(tmp_path / "state"))
    backend.raise_fence("job", 7, partitions=2)
    lease = _lease(tmp_path)
    assert lease.acquire() == 1
    settings = SessionSettings.of(SessionRules(), 2, backend.uri, "job", str(tmp_path / "out"))
    fenced = fence_store(backend, settings, lease)
    assert fenced.epoch == lease.epoch == 8 and backend.fence("job") == 8
    lease.check()
    lease.release()


def test_only_the_latest_epoch_records_are_kept(tmp_path):
    records = DirectoryLeaseRecords(str(tmp_path / "lease"))
    for _ in range(KEPT_EPOCHS + 5):
        lease = Lease(records, "chk")
        lease.acquire()
        lease.release()
    kept = sorted(int(p.stem) for p in (tmp_path / "lease").glob("*.json"))
    last = KEPT_EPOCHS + 5
    assert kept == [e for e in range(1, last + 1) if e > last - KEPT_EPOCHS]
    assert records.latest().epoch == last
