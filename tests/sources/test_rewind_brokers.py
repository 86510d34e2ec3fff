"""Rewinding Kafka and Kinesis streams. Kafka, with its state in PostgreSQL and its outputs
in Delta tables: one delete commit per table, no table version with part of a batch or a
session twice, and the rerun ends with the tables of the uninterrupted run. Kinesis, with
its state in Redis and in DynamoDB: the rerun reads the same records again and ends with the
uninterrupted run's outputs."""

from __future__ import annotations

import uuid

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from confluent_kafka.admin import AdminClient
from deltalake import DeltaTable

from sessionize.commands.history import batch_history, history_lines, open_checkpoint
from sessionize.commands.rewind import rewind
from sessionize.commands.stream import StreamOptions, run_stream
from sessionize.generate.publish import ensure_topic, publish_kafka, publish_kinesis
from tests.helpers import OUTPUTS, SORT_KEYS, generate, read_output
from tests.state_params import _postgres

from .helpers import unique

pytestmark = pytest.mark.services
# Spark's Python workers may predate the fixture's dummy AWS variables: options instead.
KINESIS_OPTIONS = {
    "kinesis.aws_access_key_id": "sessionize-local",
    "kinesis.aws_secret_access_key": "sessionize-local",
}


def hour_of_lines(root) -> list[str]:
    """One generated hour, its late file last."""
    inp = generate(root / "in", hours=1, users=100, events_per_hour=1000, late_rate=0.01)
    lines = []
    for f in sorted(inp.rglob("*.json"), key=lambda p: (p.name.startswith("late"), p.name)):
        lines += f.read_text().splitlines()
    return lines


@pytest.fixture
def topic(kafka_bootstrap, tmp_path):
    """Two partitions holding one generated hour."""
    name = unique("rewind")
    uri = f"kafka://{kafka_bootstrap}/{name}"
    assert ensure_topic(uri, 2)
    publish_kafka(hour_of_lines(tmp_path), uri)
    yield uri
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})  # kept alive until done
    admin.delete_topics([name])[name].result(30)


def tables(out) -> dict[str, pa.Table]:
    return {n: _sorted(DeltaTable(str(out / n)).to_pyarrow_table(), n) for n in OUTPUTS}


def _sorted(t: pa.Table, name: str) -> pa.Table:
    """Rows in a canonical order, columns in the table's order (a delete keeps both)."""
    keys = ["batch_id", *SORT_KEYS[name]]
    return t.sort_by([(k, "ascending") for k in keys if k in t.column_names])


def _batch(t: pa.Table, b: int) -> pa.Table:
    return t.filter(pc.equal(t["batch_id"], b))


def test_kafka_postgres_delta_rewind_and_rerun(spark, topic, tmp_path):
    state, drop = _postgres(f"t{uuid.uuid4().hex[:12]}")
    try:
        opts = StreamOptions(
            input=topic,
            output=str(tmp_path / "out"),
            checkpoint=str(tmp_path / "chk"),
            state=state,
            partitions=2,
            output_format="delta",
            source_options={"maxRecordsPerTrigger": "600"},
        )
        records = run_stream(opts, spark, on_batch=lambda _: None)
        assert len(records) == 2
        whole = tables(tmp_path / "out")
        versions = {n: DeltaTable(str(tmp_path / "out" / n)).version() for n in OUTPUTS}

        ck = open_checkpoint(opts.checkpoint)
        lines = history_lines(ck, batch_history(ck))
        assert lines[1].startswith("batch 1 ") and "read offsets 0:" in lines[1]

        said: list[str] = []
        rewind(opts.checkpoint, 0, say=said.append)
        assert said[1].startswith("input: read again from Kafka offsets 0:")
        for name in OUTPUTS:
            dt = DeltaTable(str(tmp_path / "out" / name))
            later = pc.sum(pc.greater(whole[name]["batch_id"], 0)).as_py() or 0
            assert dt.version() == versions[name] + (1 if later else 0), name  # one step
            assert _sorted(dt.to_pyarrow_table(), name).equals(_batch(whole[name], 0)), name

        run_stream(opts, spark, on_batch=lambda _: None)
        again = tables(tmp_path / "out")
        for name in OUTPUTS:
            assert again[name].equals(whole[name]), name
            # Every version a reader could have seen: whole batches, no session twice.
            dt = DeltaTable(str(tmp_path / "out" / name))
            for v in range(versions[name], dt.version() + 1):
                dt.load_as_version(v)
                seen = _sorted(dt.to_pyarrow_table(), name)
                for b in set(seen["batch_id"].to_pylist()):
                    assert _batch(seen, b).equals(_batch(whole[name], b)), (name, v, b)
                if name == "sessions":
                    assert pc.count_distinct(seen["session_id"]).as_py() == seen.num_rows
    finally:
        drop()


@pytest.mark.parametrize("state", ["redis", "dynamodb"], indirect=True)
def test_kinesis_rewind_and_rerun(spark, kinesis_endpoint, kinesis_client, tmp_path, state):
    name = unique("rewind")
    uri = f"kinesis://{name}?endpoint={kinesis_endpoint}&region=us-east-1"
    publish_kinesis(hour_of_lines(tmp_path), uri, create_shards=2)
    try:
        opts = StreamOptions(
            input=uri,
            output=str(tmp_path / "out"),
            checkpoint=str(tmp_path / "chk"),
            partitions=2,
            source_options={**KINESIS_OPTIONS, "maxRecordsPerTrigger": "700"},
            state=state(),
        )
        records = run_stream(opts, spark, on_batch=lambda _: None)
        assert len(records) >= 2
        whole = {n: read_output(tmp_path / "out", n) for n in OUTPUTS}
        said: list[str] = []
        rewind(opts.checkpoint, 0, say=said.append)
        assert said[1].startswith("input: read again from after Kinesis sequence numbers ")
        assert said[3].startswith("state: drop state versions 1..")
        again = run_stream(opts, spark, on_batch=lambda _: None)
        assert [r["version"] for r in again] == [r["version"] for r in records[1:]]
        for n in OUTPUTS:
            assert read_output(tmp_path / "out", n).equals(whole[n]), n
    finally:
        kinesis_client.delete_stream(StreamName=name)
