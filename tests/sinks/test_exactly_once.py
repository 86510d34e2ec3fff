"""Every sink (local Parquet, Parquet on S3, Delta local and on S3, PostgreSQL, Kafka): a
batch is visible whole or not at all, a replayed batch replaces its rows (Kafka: a batch on
Kafka is never produced again), a repeated publish changes nothing, and removing batches
removes their rows (Kafka: refused, records cannot be retracted)."""

from __future__ import annotations

from collections import Counter

from tests.sinks.conftest import make_sink, read_rows
from tests.sinks.rows import stage


def _seen(kind: str, root: str, name: str) -> Counter:
    """Rows seen by the format's reader, as (batch_id, tag) -> times seen."""
    t = read_rows(kind, root, name)
    if t.num_rows == 0:
        return Counter()
    tag = "raw" if name == "invalid_events" else "session_id"
    return Counter(zip(t["batch_id"].to_pylist(), t[tag].to_pylist(), strict=True))


def _expected(batch_id: int, tag: str, n: int = 3) -> Counter:
    return Counter((batch_id, f"{tag}-{batch_id}-{p}-{i}") for p in (0, 1) for i in range(n))


def test_replay_replaces_and_repeated_publish_changes_nothing(kind, root):
    sink = make_sink(kind, root)
    sink.clear_staging(0)
    stage(sink, 0, "old")
    sink.publish(0)
    for name in ("invalid_events", "sessions"):
        assert _seen(kind, root, name) == _expected(0, "old")
    sink.publish(0)  # retried after it had finished: nothing staged, no attempt open
    assert _seen(kind, root, "sessions") == _expected(0, "old")

    sink.clear_staging(0)  # the batch runs again (a restart before its state commit)
    stage(sink, 0, "new", n=2)
    sink.publish(0)
    sink.clear_staging(1)
    stage(sink, 1, "b1")
    sink.publish(1)
    # Kafka cannot replace records: batch 0's marker says it is there, so it stays as first sent.
    first = _expected(0, "old") if kind == "kafka" else _expected(0, "new", 2)
    for name in ("invalid_events", "sessions"):
        assert _seen(kind, root, name) == first + _expected(1, "b1")
    assert sink.published("sessions") == [0, 1]


def test_invalidate_and_an_emptied_rerun_remove_rows(kind, root):
    sink = make_sink(kind, root)
    for b in (0, 1, 2):
        sink.clear_staging(b)
        stage(sink, b, "r")
        sink.publish(b)
    if kind == "kafka":  # records cannot be retracted: refused in one line, nothing changed
        import pytest

        from sessionize.errors import SinkError

        with pytest.raises(SinkError, match="cannot retract") as e:
            sink.invalidate_from(1)
        assert "\n" not in str(e.value)
        assert _seen(kind, root, "invalid_events") == sum(
            (_expected(b, "r") for b in (0, 1, 2)), Counter()
        )
        return
    assert sink.invalidate_from(1) == [1, 2]
    assert _seen(kind, root, "invalid_events") == _expected(0, "r")
    sink.clear_staging(0)  # a rerun of batch 0 that has no rows
    sink.publish(0)
    assert _seen(kind, root, "invalid_events") == Counter()
    assert _seen(kind, root, "sessions") == Counter()
    assert sink.published("sessions") == []


def test_a_commit_on_s3_is_written_once_even_by_two_writers(bucket_uri):
    """Two publishers of batch 0 that both read "no commit yet": the conditional PUT lets one
    of them commit version 0 and refuses the other."""
    import pytest

    from sessionize.errors import SinkError

    first, second = make_sink("parquet-s3", bucket_uri), make_sink("parquet-s3", bucket_uri)
    first._commit("invalid_events", 0, 0, ["batch_id=0/part-00000-a.parquet"])
    with pytest.raises(SinkError, match="committed by another writer"):
        second._commit("invalid_events", 0, 0, ["batch_id=0/part-00000-b.parquet"])
    assert first.committed_files("invalid_events")[0].endswith("part-00000-a.parquet")
