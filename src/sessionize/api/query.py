"""A started stream: its query, and what must happen when it ends (lease, settings).

`Sessionizer.stream` returns Spark's StreamingQuery, which the caller may await, stop, or
leave running; the checkpoint's lease and the engine's query settings must be given back
however it ends. A StreamingQueryListener sees the query end (on its own, stopped, or
failed) and releases them; `StreamRun.wait` does the same at once, for the CLI.
"""

from __future__ import annotations

import contextlib
import functools
import threading
from collections import deque
from collections.abc import Callable, MutableSequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.streaming import StreamingQuery, StreamingQueryListener

from sessionize.api.remote import ProgressTail, failure_of, quiet
from sessionize.engines.checkpoint import batch_input, batch_timestamp_us, last_committed_batch
from sessionize.engines.late_cause import tied_files
from sessionize.engines.metrics import StreamMetrics
from sessionize.engines.progress import ProgressLog
from sessionize.engines.runner import RETAIN, BatchRunner, Engine, await_query, start_query
from sessionize.errors import ConfigError
from sessionize.sinks.registry import capabilities
from sessionize.spark_session import is_connect
from sessionize.state.lease import Lease

# How long a Spark Connect client waits for its query's terminated event before it removes
# its listener anyway (`StreamRun.end`).
_LAST_EVENT_WAIT_S = 10.0

# The last run started on each checkpoint by this process.
_RUNS: dict[str, StreamRun] = {}
# Batch records a continuous run keeps in memory (the progress log has them all).
KEPT_RECORDS = RETAIN


def launch(
    spark: SparkSession,
    engine: Engine,
    records: DataFrame,
    *,
    job: str,
    checkpoint: str,
    trigger: dict[str, object],
    progress_log: str | None,
    on_batch: Callable[[str], None],
    lease: Lease,
    metrics: StreamMetrics | None,
    compact_every: int | None = None,
    claim: Callable[[], None] | None = None,
    output_lease: Lease | None = None,
    name: str | None = None,
) -> StreamRun:
    """Start the query of `engine` over the stream `records` with its batch runner;
    `compact_every`: compact the output after every N-th batch (`Compactor`, where the
    sink compacts); `claim` records the output's owner before the first publish;
    `output_lease`, held since the start, is released with the checkpoint's; `name`: the
    query's (default `sessionize-JOB`)."""

    # Over Spark Connect the runner runs on the server; the client tails its log.
    def kept() -> MutableSequence[dict]:
        return deque(maxlen=KEPT_RECORDS) if "processingTime" in trigger else []

    tail = None
    if is_connect(spark):
        tail = ProgressTail(progress_log, on_batch, kept(), line=engine.progress_line)
    runner = BatchRunner(
        engine,
        on_batch if tail is None else quiet,
        progress=ProgressLog(progress_log) if progress_log else None,
        describe_input=functools.partial(batch_input, checkpoint),
        batch_time=functools.partial(batch_timestamp_us, checkpoint),
        lease=lease,
        records=kept(),
        claim=claim,
        # a file source's ties of modification times (none for another source: no files)
        explain_late=lambda version, previous: tied_files(checkpoint, version),
    )
    ends = [engine.sink.close, lease.release]
    if output_lease is not None:
        ends.append(output_lease.release)
    if metrics is not None:  # counted where the records are: here, or in the server's log
        if tail is None:
            runner.on_record = metrics.observe
        else:
            tail.on_record, metrics.before_scrape = metrics.observe, tail.drain
        ends.append(metrics.close)
    if compact_every:  # where the runner runs: on the driver, or in the Connect server
        runner.on_record = Compactor(engine.sink, compact_every, runner.on_record, runner.on_batch)
    query, restore = start_query(
        spark,
        runner,
        records,
        name=name or f"sessionize-{job}",
        checkpoint=checkpoint,
        trigger=trigger,
    )
    run = StreamRun(spark, query, runner, [restore, *ends], checkpoint, tail)
    run.metrics = metrics
    return run


def check_compactable(output: str, output_format: str, compact_every: int | None) -> None:
    """`compact_every` is for local Parquet outputs (others: `sessionize maintain`).

    Raises:
        ConfigError: N below 1, or another output.
    """
    if compact_every is None:
        return
    if compact_every < 1:
        raise ConfigError(f"--compact-every {compact_every}: give a number of batches, 1 or more")
    if not capabilities(output, output_format).compacts:
        raise ConfigError(
            "--compact-every compacts local Parquet outputs; compact Delta tables with "
            "`sessionize maintain --compact` while the stream is stopped"
        )


@dataclass(frozen=True)
class Compactor:
    """After each committed batch (`BatchRunner.on_record`): every `every`-th batch, compact
    the published batches up to it (sinks/compaction.py), before the next batch starts. A
    failed compaction is one line: the stream goes on, and the next one finishes it."""

    sink: Any  # a sink that compacts (`Capabilities.compacts`: local Parquet)
    every: int
    then: Callable[[dict], None] | None = None
    say: Callable[[str], None] = print

    def __call__(self, record: dict) -> None:
        if self.then is not None:
            self.then(record)
        version = record["version"]
        if (version + 1) % self.every:
            return
        try:
            done = self.sink.compact(upto=version)
        except (OSError, pa.ArrowException) as exc:
            detail = " ".join(str(exc).split())[:200]
            self.say(f"compaction after batch {version} failed: {detail}; the next one retries")
            return
        batches = max(d["batches"] for d in done.values())
        if batches:
            files = sum(d["files_in"] for d in done.values())
            out = sum(d["files_out"] for d in done.values())
            self.say(f"compacted {batches} batches: {files} files into {out}")


@functools.cache
def _end_runs_at_exit() -> None:
    """At the interpreter's exit, end every run whose query has ended (its listener removed
    once its last event arrived) before PySpark stops the JVM: registered once, after the
    session's gateway, so that it runs before PySpark's own exit hook (last in, first out)."""
    import atexit

    def end_all() -> None:
        for run in list(_RUNS.values()):
            with contextlib.suppress(Exception):  # the session may be gone already
                if not run.query.isActive:
                    run.end()
                    run.finish_at_exit()

    atexit.register(end_all)


def _drain_listener_bus(spark) -> None:
    """Wait until Spark's listener bus has delivered what it holds. The terminated event
    reaches the Python listener before the callback's reply goes back to the JVM: a script
    that exits in between leaves the bus writing to a closed socket (`ERROR
    StreamingQueryListenerBus ... Received empty command` and its trace). Spark Connect has
    no listener bus in this process: nothing to wait for."""
    with contextlib.suppress(Exception):  # Connect, or a bus still busy: exit anyway
        jsc = getattr(spark, "_jsc", None)
        if jsc is not None:
            jsc.sc().listenerBus().waitUntilEmpty(int(_LAST_EVENT_WAIT_S * 1000))


def end_finished(checkpoint: str) -> None:
    """Clean up after this process's last query on `checkpoint` if it has ended, now: the
    listener may not have been told yet (a restart right after `awaitTermination`), or
    its thread may be ending the run still (then wait for it: that end releases the lease
    this restart is about to take)."""
    run = _RUNS.get(checkpoint)
    if run is not None and not run.query.isActive:
        run.end()
        run.ended.wait(2 * _LAST_EVENT_WAIT_S)


class StreamRun:
    """A running query of a Sessionizer, its batch runner, and its clean-up.

    Returned by `Sessionizer.start`; `Sessionizer.stream` returns its `query`.

    Example:
        >>> run = Sessionizer().start(events, output="out/", checkpoint="chk/")
        >>> run.query.isActive
        True
        >>> len(run.wait())             # the batches it committed
        2
    """

    def __init__(
        self,
        spark: SparkSession,
        query: StreamingQuery,
        runner: BatchRunner,
        cleanups: list[Callable[[], None]],
        checkpoint: str,
        tail: ProgressTail | None = None,
    ):
        self.query = query
        self._tail = tail  # over Spark Connect: the records come from the progress log
        self._say = runner.on_batch if tail is None else tail.on_batch
        self._checkpoint = checkpoint
        self.runner = runner
        self.metrics: StreamMetrics | None = None  # its endpoint: `metrics.port`
        self._spark = spark
        self._cleanups = cleanups
        self._lock = threading.Lock()
        self.ended = threading.Event()  # set once the lease is released
        self._listener = _OnEnd(str(query.runId), self._end_soon)
        # Whether the query's terminated event reaches the listener: not when it ended
        # before the listener was in place.
        self._told = True
        spark.streams.addListener(self._listener)
        _RUNS[checkpoint] = self
        _end_runs_at_exit()
        if not query.isActive:
            self._told = False
            self.end()

    @property
    def records(self) -> list[dict]:
        """The batch records this run committed so far (one dict per batch, as in the
        progress log: `version`, `watermark`, `batch` counters, `totals`)."""
        if self._tail is not None:
            self._tail.drain()
            return list(self._tail.records)
        return list(self.runner.records)

    def wait(self) -> list[dict]:
        """Wait until the query ends, clean up, return the records.

        Returns:
            The batch records of the run, oldest first.

        Raises:
            SessionizeError: A batch failed with a failure a user can cause; raised as
                itself (not wrapped in Spark's StreamingQueryException).
        """
        try:
            if self._tail is None:
                records = await_query(self.query, self.runner)
            else:
                records = self._await_remote(self._tail)
        finally:
            self.end()
        if not records:  # else a run that found nothing to do would say nothing at all
            self._say(self._nothing_new())
        return records

    def _nothing_new(self) -> str:
        last = last_committed_batch(self._checkpoint)
        if last is None:
            return "no input yet: no batch to run (the next run starts at batch 0)"
        return f"no new input since batch {last}: no batch to run"

    def _await_remote(self, tail: ProgressTail) -> list[dict]:
        try:
            while not self.query.awaitTermination(1):
                tail.drain()
        except Exception as exc:
            tail.drain()
            failure = failure_of(exc)
            if failure is not None:
                raise failure from None
            raise
        finally:
            if self.query.isActive:
                self.query.stop()
        tail.drain()
        return list(tail.records)

    def end(self) -> None:
        """Release the lease and restore the engine's Spark settings; runs once, whoever
        calls it (the query's end calls it too)."""
        with self._lock:
            cleanups, self._cleanups = self._cleanups, []
        if not cleanups:
            return
        try:
            for cleanup in cleanups:
                cleanup()
            if self._told:
                # The query's last events (its last progress, then terminated) are delivered
                # after `awaitTermination` returns. Remove the listener once they have
                # arrived: a Python listener still registered when the session stops (a
                # script's end) makes Spark's listener bus call a Python that is gone
                # (`ERROR StreamingQueryListenerBus ... Connection refused` and its trace);
                # and Spark Connect's listener bus joins its event thread while holding the
                # lock that thread needs to deliver an event, so removing the listener while
                # the last event is in flight hangs the process.
                self._listener.terminated.wait(_LAST_EVENT_WAIT_S)
            self._spark.streams.removeListener(self._listener)
        finally:
            self.ended.set()

    def finish_at_exit(self) -> None:
        """At exit: wait until an end begun on the listener's thread is done and Spark has
        delivered its last listener events. (`wait` returns without waiting for that
        thread, as it always did: its release of a lease may wait for a store that is
        out of reach.)"""
        self.ended.wait(2 * _LAST_EVENT_WAIT_S)
        _drain_listener_bus(self._spark)

    def _end_soon(self) -> None:
        # Listener callbacks run on Spark's listener bus: do the work on another thread.
        threading.Thread(target=self.end, name="sessionize-query-end", daemon=True).start()


class _OnEnd(StreamingQueryListener):
    """Calls `then` when the query run `run_id` terminates (a query keeps its id across
    restarts on a checkpoint; each start has its own run id)."""

    def __init__(self, run_id: str, then: Callable[[], None]):
        self.run_id = run_id
        self.then = then
        self.terminated = threading.Event()  # set once the query's terminated event arrived

    def onQueryStarted(self, event) -> None:  # noqa: N802 - Spark's names
        pass

    def onQueryProgress(self, event) -> None:  # noqa: N802
        pass

    def onQueryIdle(self, event) -> None:  # noqa: N802
        pass

    def onQueryTerminated(self, event) -> None:  # noqa: N802
        if str(event.runId) == self.run_id:
            self.terminated.set()
            self.then()
