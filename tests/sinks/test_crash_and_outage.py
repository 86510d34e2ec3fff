"""kill -9 in the middle of a publish, and the S3 server stopped in the middle of one."""

from __future__ import annotations

import pytest

from sessionize import faults
from sessionize.errors import SinkError
from tests.s3_fixtures import _script
from tests.sinks.conftest import kill_when_paused, make_sink
from tests.sinks.rows import stage
from tests.sinks.test_exactly_once import _expected, _seen


def test_kill_after_one_output_then_rerun(kind, root):
    sink = make_sink(kind, root)
    sink.clear_staging(0)
    stage(sink, 0, "old")
    sink.publish(0)
    # `sessions` is published first: killed there, files show the new attempt there and the
    # old one in the others, each whole; PostgreSQL commits all outputs in one transaction,
    # so every output still shows the old attempt. Kafka: batch 0 is on Kafka already, so
    # the rerun produces nothing (checked below); batch 1 is killed with its records
    # produced in the open transaction, which read_committed consumers never see.
    batch = 1 if kind == "kafka" else 0
    point = "kafka-produced" if kind == "kafka" else "published-sessions"
    kill_when_paused(
        "tests.sinks.publish_proc", kind, root, str(batch), "new", point=f"{point}:{batch}"
    )
    sessions = "new" if kind not in ("postgresql", "kafka") else "old"
    assert _seen(kind, root, "sessions") == _expected(0, sessions)
    assert _seen(kind, root, "invalid_events") == _expected(0, "old")
    sink = make_sink(kind, root)  # the restarted job runs the batch again
    sink.clear_staging(batch)
    stage(sink, batch, "new")
    sink.publish(batch)
    want = _expected(0, "old") + _expected(1, "new") if kind == "kafka" else _expected(0, "new")
    for name in ("sessions", "invalid_events"):
        assert _seen(kind, root, name) == want


@pytest.mark.serial  # stops the shared S3 server
@pytest.mark.parametrize("kind", ["parquet-s3", "delta-s3"])
def test_s3_down_mid_publish_is_one_line_and_a_retry_completes(kind, root, monkeypatch):
    sink = make_sink(kind, root)
    sink.clear_staging(0)
    stage(sink, 0, "old")
    sink.publish(0)
    sink.clear_staging(0)
    stage(sink, 0, "new")
    real = faults.pause_point

    def stop_server(name: str, version: int) -> None:
        if name == "published-sessions":
            _script("stop")
        real(name, version)

    monkeypatch.setattr(faults, "pause_point", stop_server)
    try:
        with pytest.raises(SinkError) as err:
            sink.publish(0)
    finally:
        _script("start")
    message = str(err.value)
    assert "\n" not in message and message.startswith("publishing batch 0"), message
    monkeypatch.setattr(faults, "pause_point", real)
    sink.publish(0)  # the retry, with the staged rows still there
    for name in ("sessions", "invalid_events"):
        assert _seen(kind, root, name) == _expected(0, "new")
