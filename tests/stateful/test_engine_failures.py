"""A processor that raises on the engine stops the batch with one line naming it; nothing of
that batch is committed, and the fixed processor rerun from the same checkpoint ends where
an uninterrupted run ends."""

from __future__ import annotations

import json
import os

import pyarrow.dataset as ds
import pytest

from examples.running_totals import RunningTotals
from sessionize import stateful
from sessionize.errors import ProcessorError

from . import test_running_totals
from .helpers import ORDER_COLUMNS

SPLIT = [
    [{"customer_id": 1, "amount": 2.0}, {"customer_id": 2, "amount": 1.0}],
    [{"customer_id": 13, "amount": 4.0}, {"customer_id": 1, "amount": 1.0}],
    [{"customer_id": 2, "amount": 8.0}],
]


def test_a_raising_processor_commits_nothing_and_the_fixed_one_completes(spark, tmp_path):
    class Totals(RunningTotals):
        """Raises on customer 13 unless fixed (not a parameter: the same job either way)."""

        def __init__(self, fixed: bool) -> None:
            self.fixed = fixed

        @property
        def name(self) -> str:
            return "RunningTotals"

        def process(self, state, rows, ctx):
            if not self.fixed and 13 in rows["customer_id"].to_pylist():
                raise ValueError("customer 13 is not allowed")
            return super().process(state, rows, ctx)

    inp = tmp_path / "in"
    inp.mkdir()
    for n, batch in enumerate(SPLIT):
        path = inp / f"{n}.jsonl"
        path.write_text("".join(json.dumps(row) + "\n" for row in batch))
        os.utime(path, (1_000_000 + n, 1_000_000 + n))

    def start(fixed: bool):
        rows = spark.readStream.schema(ORDER_COLUMNS).option("maxFilesPerTrigger", 1)
        return stateful.start(
            rows.json(str(inp)),
            Totals(fixed),
            output=str(tmp_path / "out"),
            checkpoint=str(tmp_path / "chk"),
            partitions=2,
        )

    with pytest.raises(ProcessorError) as failed:
        start(fixed=False).wait()
    assert str(failed.value) == (
        "processor RunningTotals raised ValueError: customer 13 is not allowed"
    )
    assert sorted(p.name for p in (tmp_path / "out" / "totals").iterdir()) == ["batch_id=0"]
    assert len((tmp_path / "chk" / "progress.jsonl").read_text().splitlines()) == 1

    records = start(fixed=True).wait()
    assert [r["version"] for r in records] == [1, 2]
    got = [set() for _ in SPLIT]
    totals = ds.dataset(str(tmp_path / "out" / "totals"), partitioning="hive").to_table()
    for row in totals.to_pylist():
        got[row["batch_id"]].add((row["customer_id"], row["orders"], row["total"]))
    assert got == test_running_totals.reference(SPLIT)
