"""Prometheus metrics of a stream (`--metrics-port`, engines/metrics.py).

- Scraped during a real stream (files state, two small files, one per micro-batch): the
  counters equal what a plain count of the input files and of the committed outputs gives,
  the input's unread files fall to 0, the endpoint closes when the query ends.
- The lag of each input kind (files, Kafka partitions, Kinesis shards) becomes its gauges.
- A port that cannot be bound, and a missing client library, are refused in one line.
- The example alert rules parse and name only metrics the endpoint exports.
"""

from __future__ import annotations

import re
import socket
import sys
import time
import urllib.request
from pathlib import Path

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from sessionize import Sessionizer
from sessionize.engines.metrics import StreamMetrics, _lag_families, stream_metrics
from sessionize.errors import ConfigError
from sessionize.sources.registry import open_stream
from tests.helpers import generate, read_output

RULES = Path(__file__).parents[2] / "examples" / "alerts.rules.yml"


def _scrape(port: int) -> dict[tuple[str, tuple], float]:
    """(sample name, sorted labels without `stream`) -> value."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30) as r:
        text = r.read().decode()
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            labels = tuple(sorted((k, v) for k, v in s.labels.items() if k != "stream"))
            out[(s.name, labels)] = s.value
    return out


def _lines(tree: Path) -> int:
    return sum(len(p.read_text().splitlines()) for p in tree.rglob("*.json"))


def test_scraped_during_a_stream_counts_what_it_committed(spark, tmp_path):
    inp = generate(
        tmp_path / "in", hours=2, users=40, events_per_hour=200, files_per_hour=1, invalid_rate=0.02
    )
    out, chk = tmp_path / "out", tmp_path / "chk"
    events = open_stream(spark, str(inp), {"maxFilesPerTrigger": "1"})
    said: list[str] = []
    run = Sessionizer(partitions=2).start(
        events,
        output=str(out),
        checkpoint=str(chk),
        trigger="processing-time=1s",
        input_name=str(inp),
        metrics_port=0,
        on_batch=said.append,
    )
    try:
        port = run.metrics.port
        assert said[0] == f"metrics on http://127.0.0.1:{port}/metrics"  # port 0: the one taken
        got = _scrape(port)
        while got.get(("sessionize_batches_committed_total", ())) != 2 or got.get(
            ("sessionize_input_unread_files", ())
        ):
            assert run.query.isActive, run.query.exception()
            time.sleep(0.5)
            got = _scrape(port)
    finally:
        run.query.stop()
        run.wait()
    last = run.records[-1]
    assert got[("sessionize_input_lag_up", ())] == 1
    assert got[("sessionize_input_unread_bytes", ())] == 0
    assert got[("sessionize_input_lines_total", ())] == _lines(inp)
    for name in ("sessions", "page_views", "late_events", "invalid_events"):
        rows = got[("sessionize_output_rows_total", (("output", name),))]
        assert rows == read_output(out, name).num_rows, name
    invalid = read_output(out, "invalid_events").num_rows
    assert invalid > 0 and got[("sessionize_invalid_lines_total", ())] == invalid
    assert got[("sessionize_batch_duration_seconds_count", ())] == 2
    assert got[("sessionize_last_batch_id", ())] == 1
    assert got[("sessionize_open_sessions", ())] == last["batch"]["open_sessions"] > 0
    assert got[("sessionize_watermark_seconds", ())] == last["watermark"] / 1e6
    assert abs(got[("sessionize_last_commit_timestamp_seconds", ())] - time.time()) < 3600
    assert got[("sessionize_state_round_trips_total", ())] > 0
    with pytest.raises(OSError):  # the endpoint ended with the query
        _scrape(port)


def test_lag_of_each_input_kind_becomes_gauges():
    def names(ahead: dict) -> dict:
        return {
            (s.name, tuple(sorted(s.labels.items()))): s.value
            for f in _lag_families("j", ahead)
            for s in f.samples
        }

    assert names({"unread": {"files": 3, "bytes": 900}}) == {
        ("sessionize_input_unread_files", (("stream", "j"),)): 3,
        ("sessionize_input_unread_bytes", (("stream", "j"),)): 900,
    }
    assert names({"lag": {"0": 5, "1": 0}}) == {
        ("sessionize_input_lag_records", (("partition", "0"), ("stream", "j"))): 5,
        ("sessionize_input_lag_records", (("partition", "1"), ("stream", "j"))): 0,
    }
    kinesis = {"lag": {"shardId-0": {"millis_behind": 2500, "waiting": True}}}
    assert names(kinesis) == {
        ("sessionize_input_behind_seconds", (("shard", "shardId-0"), ("stream", "j"))): 2.5,
    }


def test_an_input_out_of_reach_says_so_and_the_rest_is_served():
    def unreachable() -> dict:
        raise ConnectionError("broker down")

    metrics = StreamMetrics("j", lag=unreachable)
    metrics.observe({"version": 4, "batch": {"records": 7}, "watermark": None})
    port = metrics.serve(0)
    try:
        got = _scrape(port)
    finally:
        metrics.close()
    assert got[("sessionize_input_lag_up", ())] == 0
    assert got[("sessionize_input_lines_total", ())] == 7
    assert got[("sessionize_last_batch_id", ())] == 4


def _outward_address() -> str:
    """An address of this machine other than loopback (the interface a route leaves by)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.connect(("10.255.255.255", 1))  # no packet is sent: it only picks the route
        address = s.getsockname()[0]
    assert not address.startswith("127."), "this machine needs a network interface"
    return address


def test_the_endpoint_listens_on_loopback_unless_told_and_says_where():
    outward = _outward_address()
    for host, reachable in (("127.0.0.1", False), ("0.0.0.0", True)):
        said: list[str] = []
        metrics = stream_metrics(0, "j", "chk", "dataframe", {}, host=host, say=said.append)
        assert metrics is not None
        try:
            assert said == [f"metrics on http://{host}:{metrics.port}/metrics"]
            assert _scrape(metrics.port) is not None
            try:
                socket.create_connection((outward, metrics.port), timeout=5).close()
                answered = True
            except ConnectionRefusedError:
                answered = False
            assert answered == reachable, (host, outward)
        finally:
            metrics.close()
    with pytest.raises(ConfigError, match="--metrics-host 192.0.2.250: cannot listen"):
        stream_metrics(0, "j", "chk", "dataframe", {}, host="192.0.2.250", say=print)


def test_a_port_in_use_is_refused_in_one_line(tmp_path):
    with socket.socket() as taken:
        taken.bind(("0.0.0.0", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(ConfigError, match=f"--metrics-port {port}: cannot listen") as e:
            stream_metrics(port, "j", str(tmp_path), "dataframe", {})
    assert "\n" not in str(e.value)


def test_without_the_client_library_the_extra_is_named(monkeypatch):
    monkeypatch.setitem(sys.modules, "prometheus_client", None)
    with pytest.raises(ConfigError, match=r"pip install 'sessionize\[metrics\]'"):
        StreamMetrics("j")


def test_alert_rules_name_only_exported_metrics():
    metrics = StreamMetrics("j", lag=lambda: {"unread": {"files": 1, "bytes": 2}})
    metrics.observe({"version": 0, "batch": {}, "watermark": 0, "duration_s": 1.0})
    exported = {s.name for f in metrics.registry.collect() for s in f.samples}
    exported |= {n for f in _lag_families("j", {"lag": {"0": 1}}) for n in [f.name]}
    exported |= {f.name for f in _lag_families("j", {"lag": {"s": {"millis_behind": 1}}})}
    rules = [r for g in yaml.safe_load(RULES.read_text())["groups"] for r in g["rules"]]
    assert {r["alert"] for r in rules} >= {
        "SessionizeStreamStalled",
        "SessionizeInputLagGrowing",
        "SessionizeInvalidShareHigh",
    }
    for rule in rules:
        used = set(re.findall(r"\bsessionize_[a-z_]+", rule["expr"]))
        assert used and used <= exported, (rule["alert"], used - exported)
