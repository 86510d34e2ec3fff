"""The client's view of a stream over Spark Connect (api/remote.py): the batches come from
the progress log, each reported once, and feed the client's metrics when it is scraped."""

from __future__ import annotations

from collections import deque

from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from sessionize.api.remote import ProgressTail
from sessionize.engines.metrics import StreamMetrics
from sessionize.engines.progress import ProgressLog


def _record(version: int) -> dict:
    batch = {
        "records": 10 + version,
        "invalid": 1,
        "events_in": 9 + version,
        "late": 0,
        "duplicates": 0,
        "sessions_out": 2,
        "open_sessions": 3,
    }
    return {"version": version, "watermark": None, "batch": batch, "duration_s": 0.5}


def test_each_batch_once_and_only_the_rotated_log_remembered(tmp_path):
    path = str(tmp_path / "progress.jsonl")
    log = ProgressLog(path, max_bytes=600, keep=1)
    log.append(_record(0))  # before this run: not reported
    lines: list[str] = []
    tail = ProgressTail(path, lines.append, deque(maxlen=3))
    for v in range(1, 9):
        log.append(_record(v))
        tail.drain()
        tail.drain()
    assert [line.split(":")[0] for line in lines] == [f"batch {v}" for v in range(1, 9)]
    assert [r["version"] for r in tail.records] == [6, 7, 8]
    assert len(tail._seen) < 8  # what rotation dropped is forgotten


def test_a_scrape_reads_the_new_batches_into_the_metrics(tmp_path):
    path = str(tmp_path / "progress.jsonl")
    log = ProgressLog(path)
    tail = ProgressTail(path, lambda _: None)
    metrics = StreamMetrics("j", before_scrape=tail.drain)
    tail.on_record = metrics.observe
    for v in range(3):
        log.append(_record(v))

    def scraped() -> dict:
        text = generate_latest(metrics.registry).decode()
        return {s.name: s.value for f in text_string_to_metric_families(text) for s in f.samples}

    got = scraped()
    assert got["sessionize_batches_committed_total"] == 3
    assert got["sessionize_input_lines_total"] == 10 + 11 + 12
    assert scraped()["sessionize_batches_committed_total"] == 3  # not counted twice
