"""`sessionize stream --output kafka://...` end to end: a read_committed consumer reads the
rows that the same input and settings write to Parquet."""

from __future__ import annotations

import datetime as dt

import pyarrow as pa
import pytest

from sessionize.commands.rewind import rewind
from sessionize.commands.stream import StreamOptions, run_stream
from sessionize.engines.checkpoint import rewind_intent
from sessionize.errors import SinkError
from tests.helpers import OUTPUTS, cli_env, generate, read_output, sessionize
from tests.sinks.kafka_consumer import kafka_uri, read_topic


def _iso(value: object) -> object:
    """The JSON form the sink documents, written here independently of the sink."""
    if isinstance(value, dt.datetime):
        return value.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    if isinstance(value, dt.date):
        return value.isoformat()
    if isinstance(value, list) and value and all(isinstance(v, tuple) for v in value):
        return dict(value)  # a map (Arrow gives its pairs) is a JSON object
    return value


def _canonical(rows: list[dict]) -> list[str]:
    return sorted(repr(sorted(r.items())) for r in rows)


def test_stream_to_kafka_equals_the_same_run_to_parquet(spark, tmp_path):
    inp = generate(
        tmp_path / "in",
        hours=1,
        users=40,
        events_per_hour=400,
        files_per_hour=2,
        invalid_rate=0.02,
        late_rate=0.02,
    )
    parquet = StreamOptions(
        input=str(inp),
        output=str(tmp_path / "pq"),
        checkpoint=str(tmp_path / "chk-pq"),
        partitions=2,
        max_files_per_trigger=1,
    )
    run_stream(parquet, spark, on_batch=lambda _: None)
    uri = kafka_uri(tmp_path).split("?")[0]  # staged under the checkpoint by default
    done = sessionize(
        "stream",
        "--input",
        str(inp),
        "--output",
        uri,
        "--checkpoint",
        str(tmp_path / "chk"),
        "--partitions",
        "2",
        "--max-files-per-trigger",
        "1",
        env=cli_env(),
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert (tmp_path / "chk" / "kafka-staging").is_dir()
    for name in (*OUTPUTS, "events"):
        table: pa.Table = read_output(tmp_path / "pq", name)
        expected = [{k: _iso(v) for k, v in row.items()} for row in table.to_pylist()]
        records = read_topic(uri, name)
        for r in records:
            assert r.pop("key") == (str(r["user_id"]) if "user_id" in r else None)
        assert _canonical(records) == _canonical(expected), name
    assert read_output(tmp_path / "pq", "sessions").num_rows > 0
    _rewind_is_refused_then_accepted(str(tmp_path / "chk"), uri)


def _rewind_is_refused_then_accepted(checkpoint: str, uri: str) -> None:
    """Batches after 0 are on Kafka: a rewind to 0 is refused before it changes anything;
    accepted, it retires their markers."""
    with pytest.raises(SinkError) as err:
        rewind(checkpoint, 0, say=lambda _: None)
    assert "\n" not in str(err.value) and "--accept-duplicates" in str(err.value)
    assert rewind_intent(checkpoint) is None  # the stream may go on as it was
    rewind(checkpoint, 0, say=lambda _: None, accept_duplicates=True)
    records = read_topic(uri, "_batches")
    owners = [r["owner"] for r in records if r["key"] == "_owner"]  # beside the markers
    assert [(o["kind"], o["place"]) for o in owners] == [("stream", checkpoint)]
    markers = [r for r in records if r["key"] != "_owner"]
    on_kafka = sorted({m["batch_id"] for m in markers if not m.get("retired")})
    assert len(on_kafka) >= 2
    assert sorted(m["batch_id"] for m in markers if m.get("retired")) == on_kafka[1:]
