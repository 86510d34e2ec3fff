"""kill -9 of a running query, then a restart from its checkpoint: every record exactly once."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from sessionize.generate.publish import ensure_stream, ensure_topic, publish_kafka, publish_kinesis
from sessionize.sources.kafka import kafka_stream
from sessionize.sources.kinesis import kinesis_stream

from .helpers import assert_exactly_once, read_sink, run_available_now, unique

pytestmark = pytest.mark.services
QUERY = Path(__file__).with_name("query_process.py")
KINESIS_CREDENTIALS = {"aws_access_key_id": "x", "aws_secret_access_key": "x"}


def batch_ids(directory: Path) -> set[int]:
    return {int(p.name) for p in directory.glob("[0-9]*")} if directory.exists() else set()


def kill_mid_batch(proc: subprocess.Popen, checkpoint: Path, log: Path) -> bool:
    """SIGKILL the query's whole process group (driver JVM, Python workers) once two batches
    are committed, preferably while a third is planned but not committed; True if so."""
    deadline = time.monotonic() + 300
    while True:
        if proc.poll() is not None:
            pytest.fail(f"the query process exited ({proc.returncode}):\n{log.read_text()[-3000:]}")
        if time.monotonic() > deadline:
            pytest.fail(f"no progress in 300s:\n{log.read_text()[-3000:]}")
        planned, done = batch_ids(checkpoint / "offsets"), batch_ids(checkpoint / "commits")
        in_flight = bool(planned - done)
        if len(done) >= 2 and (in_flight or len(done) >= 8):
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(30)
            return in_flight
        time.sleep(0.02)


@pytest.mark.parametrize("kind", ["kafka", "kinesis"])
def test_kill_9_mid_run_then_restart_reads_every_record_once(kind, request, spark, tmp_path):
    if kind == "kafka":
        uri = f"kafka://{request.getfixturevalue('kafka_bootstrap')}/{unique('kill')}"
        ensure_topic(uri, 3)

        def publish(lines):
            publish_kafka(lines, uri)

        options, stream = {}, kafka_stream
    else:
        endpoint = request.getfixturevalue("kinesis_endpoint")
        name = request.getfixturevalue("kinesis_names")("kill")
        uri = f"kinesis://{name}?endpoint={endpoint}&region=us-east-1"
        ensure_stream(uri, 3, KINESIS_CREDENTIALS)

        def publish(lines):
            publish_kinesis(lines, uri, options=KINESIS_CREDENTIALS)

        options = {f"kinesis.{k}": v for k, v in KINESIS_CREDENTIALS.items()}
        stream = kinesis_stream
    first = [json.dumps({"user_id": i % 97, "n": i}) for i in range(900)]
    publish(first)

    limited = {**options, "maxRecordsPerTrigger": "100"}
    log = tmp_path / "query.log"
    with log.open("w") as out:
        proc = subprocess.Popen(
            [sys.executable, str(QUERY), kind, uri, str(tmp_path), json.dumps(limited)],
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
        )
    try:
        mid_batch = kill_mid_batch(proc, tmp_path / "checkpoint", log)
        print("killed while a batch was in flight:", mid_batch)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    committed = batch_ids(tmp_path / "checkpoint" / "commits")
    assert 2 <= len(committed) < 9  # killed with records left to read

    second = [json.dumps({"user_id": i % 97, "n": i, "after": "restart"}) for i in range(300)]
    publish(second)  # arrives while the query is down
    # The restart replays the planned batch as logged, then reads the rest without a limit.
    run_available_now(stream(spark, uri, options), tmp_path)
    assert_exactly_once(read_sink(spark, tmp_path), set(first) | set(second))
