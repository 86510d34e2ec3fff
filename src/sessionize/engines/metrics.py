"""Prometheus metrics of a stream, served by the process that started it.

Every committed batch's record (the progress log's line, engines/progress.py) updates the
metrics; the input's lag is measured when Prometheus scrapes, as `sessionize status`
measures it (unread files of the tree, records per Kafka partition beyond the last
committed offset, Kinesis time behind per shard). Counters count the batches this process
committed (Prometheus' `rate()` and `increase()` handle the reset at a restart); gauges
hold the last batch's values. Every metric has the label `stream` (the job name).

Over Spark Connect the batch runner runs in a Python process of the Connect server: the
endpoint still lives in the client process that started the stream, which learns of each
batch from the progress log (api/remote.py) when it is scraped.

The client library is the optional extra `metrics` (`prometheus-client`).
"""

from __future__ import annotations

import errno
import functools
import logging
import socket
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING

from sessionize.engines.checkpoint import last_offsets, seen_files
from sessionize.errors import ConfigError
from sessionize.logic.processor import LATE, OUTPUT_ROWS
from sessionize.sources.registry import input_lag

if TYPE_CHECKING:
    from wsgiref.simple_server import WSGIServer

    from prometheus_client.registry import CollectorRegistry

_LOG = logging.getLogger("sessionize")
PREFIX = "sessionize_"
BATCH_SECONDS_BUCKETS = (0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600)
# Rows of each output per batch, by the record's counter that holds them: the session
# processor's outputs, then the engine's late and invalid rows.
OUTPUT_COUNTERS = {**OUTPUT_ROWS, LATE: "late", "invalid_events": "invalid"}
# bind(): the address is not one of this machine's, or no address at all.
_NOT_HERE = (errno.EADDRNOTAVAIL, socket.EAI_NONAME, socket.EAI_AGAIN)
MISSING_CLIENT = "--metrics-port needs prometheus-client: pip install 'sessionize[metrics]'"


def input_ahead(checkpoint: str, source: str, options: Mapping[str, str]) -> dict:
    """How far `source` is ahead of the last batch committed in `checkpoint`, asked from
    the input now (`sources.registry.input_lag`)."""
    return input_lag(source, options, last_offsets(checkpoint), seen_files(checkpoint))


def stream_metrics(
    port: int | None,
    stream: str,
    checkpoint: str,
    source: str,
    options: Mapping[str, str],
    *,
    host: str = "127.0.0.1",
    say: Callable[[str], None] = _LOG.info,
) -> StreamMetrics | None:
    """The metrics of a stream served on `host`:`port` (None: no metrics; port 0: any free
    one), its address said in one line; the input's lag is measured unless the input is a
    DataFrame (`source` is `dataframe`)."""
    if port is None:
        return None
    if not 0 <= port <= 65535:
        raise ConfigError(f"--metrics-port {port}: give a port from 0 to 65535")
    lag = (
        None
        if source == "dataframe"
        else functools.partial(input_ahead, checkpoint, source, dict(options))
    )
    metrics = StreamMetrics(stream, lag)
    metrics.serve(port, host)
    say(f"metrics on {metrics.url}")
    return metrics


class StreamMetrics:
    """The metrics of one stream, in a registry of their own.

    Args:
        stream: The job name, the `stream` label of every metric.
        lag: Measures the input's lag (`input_ahead`'s dict) when scraped; None: not
            measured (a DataFrame input).
        before_scrape: Called first on every scrape (over Spark Connect: reads the batches
            the progress log gained).

    Raises:
        ConfigError: prometheus-client is not installed.

    Example:
        >>> metrics = StreamMetrics("clicks")
        >>> metrics.observe(record)          # a batch record, as the runner makes it
        >>> metrics.serve(9108)              # http://HOST:9108/metrics
    """

    def __init__(
        self,
        stream: str,
        lag: Callable[[], dict] | None = None,
        before_scrape: Callable[[], None] | None = None,
    ):
        try:
            import prometheus_client as pc
        except ImportError:
            raise ConfigError(MISSING_CLIENT) from None
        self.stream = stream
        self.lag = lag
        self.before_scrape = before_scrape
        self.registry: CollectorRegistry = pc.CollectorRegistry()
        self.port: int | None = None
        self.url: str | None = None  # http://HOST:PORT/metrics, once served
        self._server: WSGIServer | None = None
        self._lock = threading.Lock()
        # First in the registry: a scrape reads the new batches before the counters.
        self.registry.register(_LagCollector(self))

        def counter(name: str, doc: str, labels: tuple[str, ...] = ()):
            return pc.Counter(PREFIX + name, doc, ("stream", *labels), registry=self.registry)

        def gauge(name: str, doc: str):
            return pc.Gauge(PREFIX + name, doc, ("stream",), registry=self.registry)

        self.batches = counter("batches_committed", "Micro-batches committed by this process.")
        self.duration = pc.Histogram(
            PREFIX + "batch_duration_seconds",
            "Seconds from a batch's plan to its record.",
            ("stream",),
            buckets=BATCH_SECONDS_BUCKETS,
            registry=self.registry,
        )
        self.lines = counter("input_lines", "Lines (records) read from the input.")
        self.events = counter("events_in", "Valid events read (late ones included).")
        self.rows = counter("output_rows", "Rows written to each output.", ("output",))
        self.late = counter("late_events", "Events behind the watermark (to late_events).")
        self.invalid = counter("invalid_lines", "Lines that are not valid events.")
        self.duplicates = counter("duplicate_events", "Events dropped as duplicates.")
        self.round_trips = counter("state_round_trips", "Round trips to the state store.")
        self.bytes_read = counter("state_read_bytes", "Bytes read from the state store.")
        self.bytes_written = counter("state_written_bytes", "Bytes written to the state store.")
        self.open_sessions = gauge("open_sessions", "Sessions open after the last batch.")
        self.open_users = gauge("open_users", "Users with an open session after the last batch.")
        self.watermark = gauge("watermark_seconds", "Watermark after the last batch (Unix s).")
        self.last_batch = gauge("last_batch_id", "Id (version) of the last committed batch.")
        self.last_commit = gauge(
            "last_commit_timestamp_seconds", "When the last batch was committed (Unix s)."
        )

    def observe(self, record: Mapping) -> None:
        """Count one committed batch from its record (runner.py's, or the progress log's)."""
        s, batch = self.stream, record.get("batch", {})
        with self._lock:
            self.batches.labels(s).inc()
            self.duration.labels(s).observe(float(record.get("duration_s") or 0.0))
            self.lines.labels(s).inc(batch.get("records", 0))
            self.events.labels(s).inc(batch.get("events_in", 0))
            for output, key in OUTPUT_COUNTERS.items():
                self.rows.labels(s, output).inc(batch.get(key, 0))
            self.late.labels(s).inc(batch.get("late", 0))
            self.invalid.labels(s).inc(batch.get("invalid", 0))
            self.duplicates.labels(s).inc(batch.get("duplicates", 0))
            self.round_trips.labels(s).inc(batch.get("state_round_trips", 0))
            self.bytes_read.labels(s).inc(batch.get("state_bytes_read", 0))
            self.bytes_written.labels(s).inc(batch.get("state_bytes_written", 0))
            self.open_sessions.labels(s).set(batch.get("open_sessions", 0))
            self.open_users.labels(s).set(batch.get("open_users", 0))
            if record.get("watermark") is not None:
                self.watermark.labels(s).set(record["watermark"] / 1e6)
            self.last_batch.labels(s).set(record["version"])
            self.last_commit.labels(s).set(time.time())

    def serve(self, port: int, addr: str = "127.0.0.1") -> int:
        """Serve `/metrics` on `addr`:`port` (0: any free port) from a daemon thread;
        returns the port. Raises ConfigError when it cannot listen there."""
        from prometheus_client import start_http_server

        try:
            server, _ = start_http_server(port, addr, registry=self.registry)
        except OSError as e:
            what = f"--metrics-host {addr}" if e.errno in _NOT_HERE else f"--metrics-port {port}"
            raise ConfigError(
                f"{what}: cannot listen ({e.strerror or e}); pick another "
                f"{'address of this machine' if e.errno in _NOT_HERE else 'port'}"
            ) from None
        self._server = server
        self.port = server.server_address[1]
        host = str(server.server_address[0])
        self.url = f"http://{f'[{host}]' if ':' in host else host}:{self.port}/metrics"
        return self.port

    def close(self) -> None:
        """Stop serving (the query has ended)."""
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None


class _LagCollector:
    """The input's lag, measured at each scrape; `input_lag_up` says whether it could be."""

    def __init__(self, metrics: StreamMetrics):
        self.metrics = metrics

    def describe(self) -> list:
        return []  # measured at scrape time: nothing to check at registration

    def collect(self) -> Iterator:
        from prometheus_client.core import GaugeMetricFamily

        m = self.metrics
        if m.before_scrape is not None:
            m.before_scrape()
        if m.lag is None:
            return
        up = GaugeMetricFamily(
            PREFIX + "input_lag_up", "1 when the input's lag was measured.", labels=["stream"]
        )
        try:
            ahead = m.lag()
        except Exception as e:  # the input out of reach: say so, keep serving the rest
            _LOG.debug("input lag not measured: %s", e)
            up.add_metric([m.stream], 0)
            yield up
            return
        up.add_metric([m.stream], 1)
        yield up
        yield from _lag_families(m.stream, ahead)


def _lag_families(stream: str, ahead: dict) -> Iterator:
    from prometheus_client.core import GaugeMetricFamily

    if "unread" in ahead:
        unread = ahead["unread"]
        for key, doc in (
            ("files", "Files of the input tree not read yet."),
            ("bytes", "Bytes of the input tree's files not read yet."),
        ):
            g = GaugeMetricFamily(f"{PREFIX}input_unread_{key}", doc, labels=["stream"])
            g.add_metric([stream], unread[key])
            yield g
        return
    lag = ahead.get("lag", {})
    if all(isinstance(v, int) for v in lag.values()):  # Kafka: records per partition
        g = GaugeMetricFamily(
            PREFIX + "input_lag_records",
            "Records the broker holds beyond the last batch.",
            labels=["stream", "partition"],
        )
        for partition, records in lag.items():
            g.add_metric([stream, str(partition)], records)
        yield g
        return
    g = GaugeMetricFamily(
        PREFIX + "input_behind_seconds",
        "Kinesis time behind the shard's tip.",
        labels=["stream", "shard"],
    )
    for shard, behind in lag.items():
        g.add_metric([stream, shard], behind["millis_behind"] / 1000)
    yield g
