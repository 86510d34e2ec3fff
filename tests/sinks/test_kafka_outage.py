"""The Kafka sink when its broker goes down inside a batch's transaction: one line, nothing of
the batch visible to read_committed consumers, and once the broker is back the batch is
produced once. The broker is a private one (the suite's broker, started on a port of its own
with its own data), so that stopping it disturbs no other test."""

from __future__ import annotations

import socket
import subprocess
import time
from collections import Counter
from pathlib import Path

import pytest

from sessionize import faults
from sessionize.errors import SinkError
from sessionize.sinks.registry import open_sink
from tests.sinks.conftest import REPO
from tests.sinks.kafka_consumer import read_topic
from tests.sinks.rows import stage


def _binary() -> Path:
    found = sorted(
        REPO.glob(".services/pypi/noida-db/lib/python3*/site-packages/noida_db/noida-db")
    )
    assert found, "the test broker is not installed: run `bash services/start.sh` (or ./dev test)"
    return found[0]


class Broker:
    """A noida-db Kafka broker on a free port of 127.0.0.1, its data under `data`."""

    def __init__(self, data: Path) -> None:
        self.data = data
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.proc: subprocess.Popen | None = None

    def start(self) -> None:
        args = [
            str(_binary()),
            "start",
            "--only",
            "kafka",
            "--host",
            "127.0.0.1",
            "--kafka-port",
            str(self.port),
            "--data-dir",
            str(self.data),
        ]
        with open(self.data.parent / "broker.log", "a") as log:
            self.proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", self.port), 0.5).close()
                return
            except OSError:
                assert self.proc.poll() is None, (self.data.parent / "broker.log").read_text()
                time.sleep(0.1)
        raise AssertionError("the private broker did not open its port in 60 s")

    def stop(self) -> None:
        """As a server restart does: it saves its data and exits."""
        assert self.proc is not None
        subprocess.run(
            [str(_binary()), "down", "--data-dir", str(self.data)], capture_output=True, timeout=30
        )
        if self.proc.poll() is None:
            self.proc.terminate()
        self.proc.wait(timeout=30)


@pytest.fixture
def broker(tmp_path):
    b = Broker(tmp_path / "broker")
    b.start()
    yield b
    if b.proc is not None and b.proc.poll() is None:
        b.stop()


def _publish(sink, batch: int, tag: str) -> None:
    sink.clear_staging(batch)
    stage(sink, batch, tag)
    sink.publish(batch)


def _seen(uri: str) -> Counter:
    """(batch, tag) -> rows a read_committed consumer reads in `sessions`."""
    return Counter(
        (r["batch_id"], r["session_id"].split("-")[0]) for r in read_topic(uri, "sessions")
    )


def test_broker_down_inside_the_transaction_is_one_line_and_a_restart_produces_it_once(
    broker, tmp_path, monkeypatch
):
    uri = f"kafka://127.0.0.1:{broker.port}/outage?staging={tmp_path / 'staging'}"
    first = open_sink(uri, job="j")
    _publish(first, 0, "a")
    first.close()
    real = faults.pause_point

    def down(name: str, batch: int) -> None:
        if (name, batch) == ("kafka-produced", 1):  # produced, not yet committed
            broker.stop()
        real(name, batch)

    monkeypatch.setattr(faults, "pause_point", down)
    with pytest.raises(SinkError) as err:
        _publish(open_sink(uri, job="j"), 1, "lost")
    message = str(err.value)
    assert "\n" not in message and message.startswith("producing batch 1 to Kafka"), message
    assert "produced again when the job is restarted" in message

    monkeypatch.setattr(faults, "pause_point", real)
    broker.start()
    restarted = open_sink(uri, job="j")  # a new driver: it reads the markers back
    assert restarted.published("sessions") == [0]
    _publish(restarted, 1, "b")
    assert _seen(uri) == Counter({(0, "a"): 6, (1, "b"): 6})
    assert [m["batch_id"] for m in read_topic(uri, "_batches")] == [0, 1]
    restarted.close()
