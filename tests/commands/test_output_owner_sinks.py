"""An output has one owner on every sink: one refusal through the command line per sink
(the four kinds of refusal on local Parquet: test_output_owner.py), each naming the owner
in one line and leaving the output as it was. The owners write in this process."""

from __future__ import annotations

import subprocess
from datetime import UTC, datetime

import pyarrow as pa
import pytest

from sessionize.commands.batch import BatchOptions, run_batch
from sessionize.commands.stream import StreamOptions, run_stream
from sessionize.sinks.claim import owner_records
from sessionize.sinks.registry import committed_rows
from tests.helpers import generate, sessionize
from tests.s3_fixtures import bucket_uri, s3_endpoint  # noqa: F401 - fixtures
from tests.sinks.conftest import pg_output  # noqa: F401 - fixture
from tests.sinks.kafka_consumer import kafka_uri, read_topic

HOUR0 = datetime(2026, 11, 1, tzinfo=UTC)


def _refused(done: subprocess.CompletedProcess) -> str:
    assert done.returncode == 2, done.stdout + done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    return lines[0]


@pytest.fixture
def inp(tmp_path):
    return generate(tmp_path / "in", hours=1, users=40, events_per_hour=400, files_per_hour=1)


def _stream(spark, inp, output, checkpoint, **options) -> None:
    opts = StreamOptions(
        input=str(inp), output=output, checkpoint=str(checkpoint), partitions=2, **options
    )
    run_stream(opts, spark, on_batch=lambda _: None)


def _rows(output: str) -> pa.Table:
    return committed_rows(output, "sessions").to_table()


def test_delta_a_stream_on_a_batch_jobs_tables(spark, inp, tmp_path):
    out = str(tmp_path / "daily")
    run_batch(
        BatchOptions(
            input=str(inp), output=out, start=HOUR0, end=HOUR0, partitions=2, output_format="delta"
        ),
        spark,
        on_hour=lambda _: None,
    )
    before = _rows(out)
    line = _refused(
        sessionize(
            "stream",
            "--input",
            str(inp),
            "--output",
            out,
            "--output-format",
            "delta",
            "--checkpoint",
            str(tmp_path / "chk"),
        )
    )
    owner = "the batch job 'sessionize' with state files"
    assert f"output {out} belongs to {owner}, not to the stream of checkpoint " in line, line
    assert _rows(out).equals(before) and not (tmp_path / "chk").exists()


def test_parquet_on_s3_a_batch_job_on_a_streams_output(spark, inp, tmp_path, bucket_uri):  # noqa: F811
    _stream(spark, inp, bucket_uri, tmp_path / "chk")
    before = _rows(bucket_uri)
    line = _refused(
        sessionize(
            "batch",
            "--input",
            str(inp),
            "--output",
            bucket_uri,
            "--from",
            "2026-11-01T00",
            "--to",
            "2026-11-01T00",
        )
    )
    where = bucket_uri.split("?")[0]
    owner = f"the stream of checkpoint {tmp_path / 'chk'}"
    assert f"output {where} belongs to {owner}, not to the batch job 'sessionize'" in line, line
    assert _rows(bucket_uri).equals(before)


def test_postgresql_a_second_checkpoint(spark, inp, tmp_path, pg_output):  # noqa: F811
    _stream(spark, inp, pg_output, tmp_path / "chk")
    before = _rows(pg_output).sort_by("session_id")
    line = _refused(
        sessionize(
            "stream",
            "--input",
            str(inp),
            "--output",
            pg_output,
            "--checkpoint",
            str(tmp_path / "chk2"),
        )
    )
    owner, other = tmp_path / "chk", tmp_path / "chk2"
    assert (
        f"belongs to the stream of checkpoint {owner}, not to the stream of checkpoint "
        f"{other}: run that checkpoint" in line
    ), line
    assert owner_records(pg_output).read().place == str(tmp_path / "chk")
    assert _rows(pg_output).sort_by("session_id").equals(before)


def test_kafka_a_second_checkpoint_of_the_same_job(spark, inp, tmp_path):
    """The same job name, so the same transactional id and markers: only the owner record
    tells the two checkpoints apart."""
    uri = kafka_uri(tmp_path)
    _stream(spark, inp, uri, tmp_path / "chk")
    before = read_topic(uri, "sessions")
    line = _refused(
        sessionize(
            "stream",
            "--input",
            str(inp),
            "--output",
            uri.split("?")[0],
            "--checkpoint",
            str(tmp_path / "chk2"),
        )
    )
    owner, other = tmp_path / "chk", tmp_path / "chk2"
    assert (
        f"output {uri.split('?')[0]} belongs to the stream of checkpoint {owner}, not to "
        f"the stream of checkpoint {other}" in line
    ), line
    assert read_topic(uri, "sessions") == before != []
