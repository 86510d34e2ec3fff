"""The outputs replaced by user (`open_sessions`) on Delta (local, S3), PostgreSQL and Iceberg:
replaced by key, kill -9 at its commit steps, a rerun, and a removal of batches."""

from __future__ import annotations

import pytest

from tests.sinks.conftest import kill_when_paused, read_rows
from tests.sinks.open_rows import OPEN_AFTER, open_sink_of, publish

KINDS = ("delta", "delta-s3", "postgresql", "iceberg")


@pytest.fixture(params=KINDS)
def kind(request) -> str:
    return request.param


def _open(kind: str, root: str) -> dict[int, str]:
    t = read_rows(kind, root, "open_sessions")
    if t.num_rows == 0:
        return {}
    pairs = list(zip(t["user_id"].to_pylist(), t["session_id"].to_pylist(), strict=True))
    assert len(pairs) == len(set(pairs)), pairs  # each session once
    return dict(pairs)


def _emitted(kind: str, root: str) -> list[str]:
    t = read_rows(kind, root, "sessions")
    return sorted(t["session_id"].to_pylist()) if t.num_rows else []


def test_each_batch_replaces_the_touched_users_and_a_replay_changes_nothing(kind, root):
    sink = open_sink_of(kind, root)
    publish(sink, 0)
    assert _open(kind, root) == OPEN_AFTER[0]
    assert sink.replaced_as_of("open_sessions") == 0
    publish(sink, 1)
    publish(sink, 1)  # the batch run again (a restart before its batch record)
    sink.publish(1)  # a publish repeated with nothing staged
    assert _open(kind, root) == OPEN_AFTER[1]
    assert _emitted(kind, root) == ["b"]
    assert sink.replaced_as_of("open_sessions") == 1


def test_killed_at_the_commit_of_open_sessions_never_shows_a_session_twice(kind, root):
    """Killed after `open_sessions` was committed (Delta: before `sessions`; PostgreSQL:
    inside the one transaction): `b` is in at most one of the two; the rerun gives each
    session once."""
    sink = open_sink_of(kind, root)
    publish(sink, 0)
    kill_when_paused("tests.sinks.open_rows", kind, root, "1", point="published-open_sessions:1")
    opened, emitted = _open(kind, root), _emitted(kind, root)
    if kind == "postgresql":  # one transaction: all of batch 0, nothing of batch 1
        assert (opened, emitted) == (OPEN_AFTER[0], [])
    else:  # open_sessions first: `b` has left it, and is not yet in sessions
        assert (opened, emitted) == (OPEN_AFTER[1], [])
    publish(sink, 1)
    assert (_open(kind, root), _emitted(kind, root)) == (OPEN_AFTER[1], ["b"])


def test_removing_batches_empties_open_sessions_for_a_rebuild(kind, root):
    """A rewind removes batches: `open_sessions` no longer matches any state version, so it
    is emptied and marked to be rebuilt (the engine's next batch then hands it every user:
    test_open_sessions.py); a batch then writes the users it touches."""
    sink = open_sink_of(kind, root)
    publish(sink, 0)
    publish(sink, 1)
    assert sink.invalidate_from(1) == [1]
    assert _open(kind, root) == {} and _emitted(kind, root) == []
    assert sink.replaced_as_of("open_sessions") is None
    publish(sink, 1)  # touches users 2 and 3 only
    assert _open(kind, root) == {3: "c"}
    assert sink.replaced_as_of("open_sessions") == 1
