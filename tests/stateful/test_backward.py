"""The backward tools on a processor's job (examples/running_totals.py on Spark and the
store, its outputs Parquet on S3): `history`, `status`, `state inspect/export`, `rewind`,
`state repartition`, each checked against the plain loop of
tests/stateful/test_running_totals.py. One stream, fed to the read-only checks, then
rewound, repartitioned into another store and continued; its store holds the settings in
every job record, without a settings entry, which every tool reads as well."""

from __future__ import annotations

import os
import uuid
from pathlib import Path

import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest

from examples.running_totals import RunningTotals
from sessionize import stateful
from sessionize.commands.history import batch_history, history_lines, open_checkpoint
from sessionize.commands.rewind import rewind
from sessionize.commands.statetools.inspect import export_state, key_state, summarize
from sessionize.commands.statetools.job import locate
from sessionize.commands.statetools.moves import move_state
from sessionize.commands.status import describe, stream_status
from sessionize.sinks.outputs import named
from sessionize.sinks.parquet_s3 import ManifestParquetSink
from sessionize.state import open_backend
from tests.s3_fixtures import s3_client
from tests.settings_in_records import move_settings_into_records

from .test_examples_engine import _orders, _write
from .test_running_totals import reference

SPLIT = _orders()  # four micro-batches, one file each
EXTRA = [{"customer_id": 5, "amount": 7.5}, {"customer_id": 1, "amount": 0.5}]


def _stream(spark, root: Path, state: str = "files", partitions: int = 2) -> None:
    rows = (
        spark.readStream.schema("customer_id long, amount double")
        .option("maxFilesPerTrigger", 1)
        .json(str(root / "in"))
    )
    stateful.start(
        rows,
        RunningTotals(),
        output=(root / "output").read_text(),
        checkpoint=str(root / "chk"),
        state=state,
        partitions=partitions,
        on_batch=lambda _: None,
    ).wait()


def _per_batch(root: Path) -> list[set[tuple]]:
    """The committed batches of `totals` on S3, read through the commit files."""
    sink = ManifestParquetSink((root / "output").read_text(), outputs=named(("totals",)))
    fs, base = sink._fs()
    totals = ds.dataset(
        sink.committed_files("totals"),
        filesystem=fs,
        format="parquet",
        partitioning=ds.partitioning(pa.schema([("batch_id", pa.int64())]), flavor="hive"),
        partition_base_dir=f"{base}/totals",
    ).to_table()
    got: list[set[tuple]] = [set() for _ in range(max(totals["batch_id"].to_pylist()) + 1)]
    for row in totals.to_pylist():
        got[row["batch_id"]].add((row["customer_id"], row["orders"], row["total"]))
    return got


@pytest.fixture(scope="module")
def job(spark, tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("backward")
    # The shared S3 API server of the test services (.services/env.sh).
    s3_endpoint = os.environ["SESSIONIZE_TEST_S3"].removeprefix("http://")
    bucket = f"t-{uuid.uuid4().hex[:12]}"
    s3_client(s3_endpoint).create_bucket(Bucket=bucket)
    (root / "output").write_text(f"s3://{bucket}/out?endpoint_override={s3_endpoint}&scheme=http")
    _write(root / "in", SPLIT)
    _stream(spark, root)
    assert _per_batch(root) == reference(SPLIT)
    move_settings_into_records(root / "chk" / "state", "stateful")
    return root


def test_history_and_status_of_a_processor_job(job):
    ck = open_checkpoint(str(job / "chk"))
    history = batch_history(ck)
    assert history.committed == history.restorable == [0, 1, 2, 3]
    assert [b["events_in"] for b in history.batches] == [len(b) for b in SPLIT]
    assert [b["read"] for b in history.batches] == ["1 file"] * 4
    lines = history_lines(ck, history)
    assert [f"{len(b)} orders" in line for line, b in zip(lines, SPLIT, strict=False)] == [True] * 4
    status = stream_status(str(job / "chk"))
    assert status["last_batch"] == status["committed_batch"] == 3
    customers = len({o["customer_id"] for b in SPLIT for o in b})  # a gauge: held now
    assert status["counters"] == {"orders": sum(len(b) for b in SPLIT), "customers": customers}
    assert status["state"] == "files" and not status["driver"]["running"]
    assert (
        f"totals: 9 lines read, 0 invalid, 9 events in, 0 late, {customers} customers, 9 orders"
    ) in describe(status)


def test_state_inspect_and_export_of_a_processor_job(job, tmp_path):
    (final,) = reference([[o for b in SPLIT for o in b]])
    sj = locate(str(job / "chk"), None)
    version, parts = summarize(sj)
    assert version == 3 and sum(p.users for p in parts) == len(final) == sum(
        p.sessions for p in parts
    )
    at, n = export_state(sj, str(tmp_path / "state.parquet"))
    exported = pq.read_table(tmp_path / "state.parquet")
    assert (at, n) == (3, len(final))
    assert (
        set(
            zip(*(exported[c].to_pylist() for c in ("customer_id", "orders", "total")), strict=True)
        )
        == final
    )
    assert exported["_timer"].null_count == n  # no event time: no key has a timer
    one = key_state(sj, "1")
    assert [(r["customer_id"], r["orders"], r["total"]) for r in one.to_pylist()] == [
        t for t in final if t[0] == 1
    ]


def test_rewind_repartition_and_continue_equal_the_loop(spark, job):
    """Rewound to batch 1, moved into another store with 3 partitions, continued over the
    undone files and one more: every batch's totals are the loop's."""
    chk = str(job / "chk")
    plan = rewind(chk, 1, say=lambda _: None)
    assert plan.batches == [2, 3]
    assert plan.rows == {"totals": sum(len(r) for r in reference(SPLIT)[2:]), "invalid": 0}
    assert _per_batch(job) == reference(SPLIT)[:2]
    assert batch_history(open_checkpoint(chk)).restorable == [0, 1]
    moved = f"files:{job / 'moved'}"
    result = move_state(moved, checkpoint=chk, partitions=3, spark=spark, on_line=lambda _: None)
    assert result is not None and result.version == 1
    assert sum(p.users for p in result.partitions) == len(reference([SPLIT[0] + SPLIT[1]])[0])
    assert open_backend(moved).partitions("stateful") == [0, 1, 2]
    assert open_backend(moved).read_job_settings("stateful")["partitions"] == 3
    _write_extra(job / "in")
    _stream(spark, job, state=moved, partitions=3)
    assert _per_batch(job) == reference([*SPLIT, EXTRA])
    assert "settings" not in open_backend(moved).read_job_record("stateful", 4)


def _write_extra(inp: Path) -> None:
    path = inp / "004.jsonl"
    path.write_text(
        "".join(f'{{"customer_id": {o["customer_id"]}, "amount": {o["amount"]}}}\n' for o in EXTRA)
    )
    os.utime(path, (1_000_000 + 4, 1_000_000 + 4))
