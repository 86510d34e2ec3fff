"""Run a source as a real streaming query into an exactly-once Parquet sink, and read it back."""

from __future__ import annotations

import ast
import itertools
import json
import os
import time
import uuid
from collections import Counter
from pathlib import Path

_counter = itertools.count()


def run_available_now(df, root: Path, timeout: float = 240) -> list[dict]:
    """Process what the source has now (Trigger.AvailableNow) into `root/out`, with the
    checkpoint in `root/checkpoint`; return the progress of every micro-batch that read rows."""
    query = (
        df.writeStream.format("parquet")
        .option("path", str(root / "out"))
        .option("checkpointLocation", str(root / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    try:
        assert query.awaitTermination(timeout), f"query did not finish in {timeout}s"
        if query.exception() is not None:
            raise query.exception()
        return [p for p in query.recentProgress if p["numInputRows"] > 0]
    finally:
        query.stop()


def end_offset(progress: dict) -> dict:
    """The source's end offset in one micro-batch's progress: JSON text, which PySpark 4.0
    gives as the text of a Python dict."""
    text = progress["sources"][0]["endOffset"]
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return ast.literal_eval(text)


def read_sink(spark, root: Path) -> list[tuple]:
    """(value, error, source) rows the sink has committed (its _spark_metadata log)."""
    out = root / "out"
    if not out.exists():
        return []
    return [
        tuple(r) for r in spark.read.parquet(str(out)).select("value", "error", "source").collect()
    ]


def assert_exactly_once(rows: list[tuple], expected_values: set[str]) -> None:
    """Every expected value once, nothing else, and no position twice."""
    positions = Counter(source for _, _, source in rows)
    repeated = [p for p, n in positions.items() if n > 1]
    assert not repeated, f"read twice: {repeated[:5]}"
    values = Counter(value for value, _, _ in rows)
    missing = expected_values - set(values)
    extra = set(values) - expected_values
    assert not missing, f"{len(missing)} records never read, e.g. {sorted(missing)[:3]}"
    assert not extra, f"unexpected records {sorted(extra, key=str)[:3]}"
    assert all(n == 1 for n in values.values())


def unique(prefix: str) -> str:
    return f"{prefix}-{os.getpid()}-{next(_counter)}-{uuid.uuid4().hex[:6]}"


def wait_stream_active(client, stream: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while True:
        status = client.describe_stream_summary(StreamName=stream)["StreamDescriptionSummary"]
        if status["StreamStatus"] == "ACTIVE":
            return
        assert time.monotonic() < deadline, f"stream {stream} not ACTIVE: {status}"
        time.sleep(0.05)
