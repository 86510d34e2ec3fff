"""An example's own command line over a real Kafka topic (services/kafka.sh): the running
totals it writes per micro-batch equal a plain loop over the same micro-batches, and a
record that is no order is set aside in `invalid` with its reason."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pyarrow.dataset as ds
import pytest

from sessionize.generate.publish import ensure_topic, publish_kafka
from tests.helpers import cli_env
from tests.stateful.test_running_totals import reference

from .helpers import unique

ROOT = Path(__file__).resolve().parents[2]
PER_BATCH = 3  # records per micro-batch, on a topic of one partition
BAD = '{"amount": 7.5}'  # a record that is no order


@pytest.mark.services
def test_running_totals_example_over_kafka(tmp_path, kafka_bootstrap):
    uri = f"kafka://{kafka_bootstrap}/{unique('orders')}"
    assert ensure_topic(uri, 1)
    orders = [
        {"customer_id": c, "amount": float(a)}
        for a, c in enumerate([1, 2, 1, 2, 3, 1, 4, 4, 3], start=1)
    ]
    lines = [json.dumps(o) for o in orders]
    lines.insert(4, BAD)  # in the second micro-batch
    publish_kafka(lines, uri)
    args = [
        sys.executable,
        "-m",
        "examples.running_totals",
        "--input",
        uri,
        "--output",
        str(tmp_path / "out"),
        "--checkpoint",
        str(tmp_path / "chk"),
        "--partitions",
        "2",
        "--source-option",
        f"maxRecordsPerTrigger={PER_BATCH}",
    ]
    done = subprocess.run(
        args, cwd=ROOT, capture_output=True, text=True, env=cli_env(), timeout=600
    )
    assert done.returncode == 0, done.stderr[-3000:]
    # The micro-batches are the records in order, PER_BATCH at a time (the bad one included).
    cut = [lines[i : i + PER_BATCH] for i in range(0, len(lines), PER_BATCH)]
    split = [[json.loads(line) for line in batch if "customer_id" in line] for batch in cut]
    totals = ds.dataset(
        str(tmp_path / "out" / "totals"), format="parquet", partitioning="hive"
    ).to_table()
    got = [set() for _ in split]
    for row in totals.to_pylist():
        got[row["batch_id"]].add((row["customer_id"], row["orders"], row["total"]))
    assert got == reference(split)
    invalid = (
        ds.dataset(str(tmp_path / "out" / "invalid"), format="parquet", partitioning="hive")
        .to_table()
        .to_pylist()
    )
    assert [(r["raw"], r["reason"], r["batch_id"]) for r in invalid] == [
        (BAD, "missing customer_id", 1)
    ]
