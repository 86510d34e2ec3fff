"""`stateful.source` into `stateful.stream` on the store engine: a file tree with bad lines
and a bad file, through one restart; then the same over a real Kafka topic. The totals
equal a plain loop over the good lines, every bad record is in `invalid` once with its
reason, and the batch records count them. (The Kafka case: tests/sources/test_keyed_source.py.)"""

from __future__ import annotations

import gzip
import json
import os
from pathlib import Path

import pyarrow as pa
import pyarrow.dataset as ds

from examples.running_totals import RunningTotals
from sessionize import stateful
from sessionize.commands.rewind import rewind

ORDERS = pa.schema([pa.field("customer_id", pa.int64(), nullable=False), ("amount", pa.float64())])

FIRST = [
    [
        '{"customer_id": 1, "amount": 2.5}',
        '{"customer_id": 2, "amount": 4}',
        '{"customer_id": "3", "amount": 1}',
        "",
        '{"customer_id": 1, "amount": 1.5}',
    ],
    [
        '{"customer_id": 2}',
        "not json",
        '{"amount": 9}',
        '{"customer_id": 4, "amount": "7"}',
        '{"customer_id": 3, "amount": 3, "extra": [1]}',
    ],
]
SECOND = [
    [
        '{"customer_id": 1, "amount": 10}',
        '[{"customer_id": 1}]',
        '{"customer_id": 5, "amount": 1e3}',
    ]
]
REASONS = {
    '{"customer_id": "3", "amount": 1}': "customer_id: expected an integer",
    "": "empty line",
    "not json": "not a JSON object",
    '{"amount": 9}': "missing customer_id",
    '{"customer_id": 4, "amount": "7"}': "amount: expected a number",
    '[{"customer_id": 1}]': "not a JSON object",
}


def _write(inp: Path, files: list[list[str]], first: int) -> list[Path]:
    inp.mkdir(exist_ok=True)
    paths = []
    for n, lines in enumerate(files, start=first):
        path = inp / f"{n:03d}.jsonl"
        path.write_text("".join(line + "\n" for line in lines))
        os.utime(path, (1_000_000 + n, 1_000_000 + n))
        paths.append(path)
    return paths


def reference(files: list[list[str]]) -> dict[int, tuple[int, float]]:
    """Orders and total per customer over the lines that are valid orders."""
    totals: dict[int, tuple[int, float]] = {}
    for line in (line for lines in files for line in lines):
        try:
            order = json.loads(line)
        except ValueError:
            continue
        if not isinstance(order, dict) or type(order.get("customer_id")) is not int:
            continue
        amount = order.get("amount")
        if amount is not None and type(amount) not in (int, float):
            continue
        n, total = totals.get(order["customer_id"], (0, 0.0))
        totals[order["customer_id"]] = (n + 1, total + float(amount or 0))
    return totals


def latest_totals(out: Path) -> dict[int, tuple[int, float]]:
    rows = ds.dataset(str(out / "totals"), partitioning="hive").to_table().to_pylist()
    latest = {}
    for row in sorted(rows, key=lambda r: r["batch_id"]):
        latest[row["customer_id"]] = (row["orders"], row["total"])
    return latest


def invalid_rows(out: Path) -> list[dict]:
    return ds.dataset(str(out / "invalid"), partitioning="hive").to_table().to_pylist()


def _stream(spark, tmp_path: Path) -> list[dict]:
    orders = stateful.source(
        spark, str(tmp_path / "in"), ORDERS, options={"maxFilesPerTrigger": "1"}
    )
    run = stateful.start(
        orders,
        RunningTotals(),
        output=str(tmp_path / "out"),
        checkpoint=str(tmp_path / "chk"),
        partitions=2,
    )
    return run.wait()


def test_a_file_tree_with_bad_lines_through_a_restart(spark, tmp_path):
    first = _write(tmp_path / "in", FIRST, 0)
    broken = tmp_path / "in" / "002.jsonl.gz"
    broken.write_bytes(gzip.compress(b'{"customer_id": 9, "amount": 1}\n')[:-12])
    os.utime(broken, (1_000_002, 1_000_002))
    records = _stream(spark, tmp_path)
    assert [r["batch"]["invalid"] for r in records] == [2, 3, 1]
    for r in records:
        assert r["batch"]["records"] == r["batch"]["events_in"] + r["batch"]["invalid"]

    second = _write(tmp_path / "in", SECOND, 3)
    records += _stream(spark, tmp_path)
    assert [r["version"] for r in records] == [0, 1, 2, 3]
    assert records[-1]["totals"]["invalid"] == 7
    assert latest_totals(tmp_path / "out") == reference(FIRST + SECOND)

    got = sorted((r["source"], r["raw"], r["reason"]) for r in invalid_rows(tmp_path / "out"))
    want = [
        (f"file:{path}", line, REASONS[line])
        for path, lines in zip(first + second, FIRST + SECOND, strict=True)
        for line in lines
        if line in REASONS
    ]
    (bad_file,) = [g for g in got if g[0].endswith(".gz")]
    assert bad_file[2].startswith("unreadable file: truncated gzip")
    assert sorted(g for g in got if g is not bad_file) == sorted(want)

    # A rewind retires the invalid rows of the batches it undoes: rerun, they are there once.
    rewind(str(tmp_path / "chk"), 1, say=lambda _: None)
    assert sorted(r["batch_id"] for r in invalid_rows(tmp_path / "out")) == [0, 0, 1, 1, 1]
    records = _stream(spark, tmp_path)
    assert [r["version"] for r in records] == [2, 3]
    assert (
        sorted((r["source"], r["raw"], r["reason"]) for r in invalid_rows(tmp_path / "out")) == got
    )
    assert latest_totals(tmp_path / "out") == reference(FIRST + SECOND)


def test_a_bounded_read_of_the_tree_runs_as_one_batch(spark, tmp_path):
    _write(tmp_path / "in", FIRST + SECOND, 0)
    orders = stateful.source(spark, str(tmp_path / "in"), ORDERS, bounded=True)
    record = stateful.run(
        orders, RunningTotals(), output=str(tmp_path / "out"), state="files", partitions=2
    )
    assert (record["version"], record["batch"]["invalid"]) == (0, 6)
    assert latest_totals(tmp_path / "out") == reference(FIRST + SECOND)
    assert sorted(r["reason"] for r in invalid_rows(tmp_path / "out")) == sorted(
        REASONS[line] for lines in FIRST + SECOND for line in lines if line in REASONS
    )
