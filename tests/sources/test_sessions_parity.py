"""Kafka and Kinesis input give exactly the sessions of the files input on the same events.

The events come from `sessionize generate` run three times with the same flags: `--output`
(files), `--kafka` (a 3-partition topic) and `--kinesis` (a 3-shard stream), with duplicates
and invalid lines but no late events. Every run uses the default gap and lateness (10m).

No event may be late in any run, since a late event is set aside instead of sessionized and
the outputs would then differ for a good reason:

- files: two micro-batches (three files each), in arrival order. The generator keeps every
  on-time event within the lateness of the events written before it, so none is late.
- Kafka and Kinesis: ONE micro-batch each (Trigger.AvailableNow without
  maxRecordsPerTrigger), asserted below. Several batches would not be safe: a batch takes a
  share of every partition, and partitions (keyed by user) move through event time at
  different speeds, so the watermark set by the fastest one can pass events still waiting in
  a slower one, which are then late. The first batch is judged by a watermark of minus
  infinity, so nothing in it is late.

The final watermark is max(event_time) - lateness in every run, so the same sessions are
emitted and the same ones stay open. Outputs are compared on every column but batch_id;
invalid lines on (raw, reason), since their source positions differ by input.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient

from sessionize.commands.stream import StreamOptions, run_stream
from tests.helpers import read_output, sessionize

from .helpers import unique

pytestmark = pytest.mark.services

GENERATE = (
    "--hours",
    "3",
    "--users",
    "300",
    "--events-per-hour",
    "3000",
    "--seed",
    "11",
    "--files-per-hour",
    "2",
    "--duplicate-rate",
    "0.02",
    "--invalid-rate",
    "0.005",
    "--close-rate",
    "0.1",
)
PARTITIONS = "3"
# Spark's Python workers keep the environment the JVM started with, which may predate the
# fixture's dummy AWS variables: the Kinesis source gets its (dummy) credentials as options.
KINESIS_OPTIONS = {
    "kinesis.aws_access_key_id": "sessionize-local",
    "kinesis.aws_secret_access_key": "sessionize-local",
}


def generate(*target: str) -> str:
    done = sessionize("generate", *target, *GENERATE, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.fixture(scope="module")
def work(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("parity")


@pytest.fixture(scope="module")
def kafka_topic(kafka_bootstrap):
    """A new topic holding the events; deleted afterwards, since the test broker holds every
    topic in memory and rewrites all of them to disk every few seconds."""
    name = unique("parity")
    uri = f"kafka://{kafka_bootstrap}/{name}"
    out = generate("--kafka", uri, "--partitions", PARTITIONS)
    assert out.startswith(f"published to {uri} in ") and " events/s): lines " in out
    yield uri
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})  # kept alive until done
    admin.delete_topics([name])[name].result(30)


@pytest.fixture(scope="module")
def kinesis_stream(kinesis_endpoint, kinesis_client):
    """A new stream holding the events; deleted afterwards."""
    name = unique("parity")
    uri = f"kinesis://{name}?endpoint={kinesis_endpoint}&region=us-east-1"
    out = generate("--kinesis", uri, "--shards", PARTITIONS)
    assert out.startswith(f"published to {uri} in ")
    yield uri
    kinesis_client.delete_stream(StreamName=name)


def run(spark, root: Path, input_: str, **kw) -> list[dict]:
    opts = StreamOptions(
        input=input_,
        output=str(root / "out"),
        checkpoint=str(root / "chk"),
        partitions=3,
        **kw,
    )
    records = run_stream(opts, spark, on_batch=lambda _: None)
    assert records[-1]["totals"]["late"] == 0
    return records


@pytest.fixture(scope="module")
def files_run(spark, work) -> tuple[Path, list[dict]]:
    generate("--output", str(work / "in"))
    records = run(spark, work / "files", str(work / "in"), max_files_per_trigger=3)
    assert len(records) > 1
    return work / "files" / "out", records


def end_offset(root: Path) -> dict:
    """The source's end offset of batch 0, as Spark logged it in the checkpoint."""
    return json.loads((root / "chk" / "offsets" / "0").read_text().splitlines()[-1])


def assert_same_outputs(expected: Path, got: Path) -> None:
    for name in ("sessions", "page_views"):
        a = read_output(expected, name, with_batch=False)
        b = read_output(got, name, with_batch=False)
        assert a.num_rows > 100, name
        assert a.schema.equals(b.schema), name
        assert a.equals(b), f"{name}: {a.num_rows} rows from files, {b.num_rows} from the broker"
    assert read_output(got, "late_events").num_rows == 0

    def invalid(root: Path) -> Counter:
        t = read_output(root, "invalid_events")
        return Counter(zip(t["raw"].to_pylist(), t["reason"].to_pylist(), strict=True))

    assert sum(invalid(expected).values()) > 10
    assert invalid(expected) == invalid(got)


def test_kafka_multi_partition_topic_gives_the_sessions_of_files(
    spark, work, files_run, kafka_topic
):
    records = run(spark, work / "kafka", kafka_topic)
    assert len(records) == 1  # see the module docstring
    files_out, files_records = files_run
    assert records[-1]["totals"] == files_records[-1]["totals"]
    assert_same_outputs(files_out, work / "kafka" / "out")
    ends = end_offset(work / "kafka")["partitions"]
    assert len(ends) == 3 and min(ends.values()) > 0
    assert sum(ends.values()) == files_records[-1]["totals"]["records"]


def test_kinesis_multi_shard_stream_gives_the_sessions_of_files(
    spark, work, files_run, kinesis_stream
):
    records = run(spark, work / "kinesis", kinesis_stream, source_options=KINESIS_OPTIONS)
    assert len(records) == 1  # see the module docstring
    files_out, files_records = files_run
    assert records[-1]["totals"] == files_records[-1]["totals"]
    assert_same_outputs(files_out, work / "kinesis" / "out")
    shards = end_offset(work / "kinesis")["shards"]
    assert len(shards) == 3 and all(s["after"] for s in shards.values())


@pytest.mark.needs_spark("python_stream_sources")
def test_stream_command_reads_kafka(work, files_run, kafka_topic):
    """The CLI end to end: `sessionize stream --input kafka://...` in its own process."""
    root = work / "cli"
    done = sessionize(
        "stream",
        "--input",
        kafka_topic,
        "--output",
        str(root / "out"),
        "--checkpoint",
        str(root / "chk"),
        "--partitions",
        "3",
        "--source-option",
        "startingPosition=earliest",
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.startswith("batch 0: ") and " 0 late, " in done.stdout
    assert_same_outputs(files_run[0], root / "out")


def test_generate_refuses_anything_but_one_target(tmp_path):
    for args in ((), ("--output", str(tmp_path), "--kafka", "kafka://127.0.0.1:1/t")):
        done = sessionize("generate", *args)
        assert done.returncode == 2
        assert done.stderr.startswith("sessionize: error: give exactly one of --output, --kafka")
        assert done.stderr.count("\n") == 1


def test_generate_to_an_unreachable_broker_is_one_clear_line():
    done = sessionize("generate", "--kafka", "kafka://127.0.0.1:1/t", "--hours", "1", timeout=120)
    assert done.returncode == 2
    assert done.stderr.startswith(
        "sessionize: error: cannot reach the Kafka broker at 127.0.0.1:1 within 10s"
    ), done.stderr
    assert done.stderr.count("\n") == 1
