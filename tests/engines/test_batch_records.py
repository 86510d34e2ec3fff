"""The spark engine's batch records (`CHECKPOINT/sessionize-batches/B.json`) are trimmed to
the batches a rewind can reach, as Spark trims its own logs."""

from __future__ import annotations

from sessionize.engines.runner import RETAIN
from sessionize.engines.spark_state import BatchRecords


def test_trim_keeps_the_newest_retained_records(tmp_path):
    records = BatchRecords(str(tmp_path))
    for b in range(RETAIN + 31):
        records.write(b, {"version": b})
    records.trim(RETAIN + 30)
    kept = sorted(int(p.stem) for p in (tmp_path / "sessionize-batches").glob("*.json"))
    assert kept == [b for b in range(RETAIN + 31) if b > 30]
    assert records.read(31) == {"version": 31} and records.read(30) is None
