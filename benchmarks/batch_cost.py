"""Where a micro-batch of `sessionize stream` spends its time, for a 1-event and a 10k-event batch.

    .venv/bin/python benchmarks/batch_cost.py [--batches 6 --big 10000 --state files]

Writes files of 1 and of `--big` events (taken in time order from generated visits), big
and small alternating, one file per trigger, and runs the stream over them in a fresh
process. For each batch it records Spark's own time of the trigger, the runner's steps
(plan, clear staging, the engine's run, publish, job record, housekeeping, lease checks)
and, inside the engine's run, the Spark actions it started, how many Spark jobs and
stages ran and how many calls the driver's Python made into the JVM (each a round trip).
Prints the median of each per batch size (the first two batches, which warm up the
workers, are left out), and Spark's floor for a job of a batch's shape: one row through a
Python map task, shuffled into the partitions, one Python task each.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import threading
import time
from collections import defaultdict
from pathlib import Path

from bench_common import (
    add_run_args,
    bench_root,
    input_config,
    run_fresh,
    warm_spark,
    write_input,
    write_json,
)
from peers import peer_of, plain_spark, session_window_stream

_TIME = re.compile(rb'"event_time": "([^"]+)"')


def write_batches(src: Path, dst: Path, batches: int, big: int) -> list[int]:
    """Files of `big` and of 1 events, alternating, in time order; returns their sizes."""
    lines = [ln for p in sorted(src.rglob("*.json")) for ln in p.read_bytes().splitlines()]
    lines = [ln for ln in lines if _TIME.search(ln)]
    lines.sort(key=lambda ln: _TIME.search(ln).group(1))
    sizes = [big if i % 2 == 0 else 1 for i in range(2 * batches)]
    if sum(sizes) > len(lines):
        raise SystemExit(f"{len(lines)} generated lines, {sum(sizes)} needed: more --hours")
    hour = dst / "event_date=2026-11-01" / "event_hour=00"
    hour.mkdir(parents=True)
    at, mtime = 0, time.time() - 3600
    for i, n in enumerate(sizes):
        path = hour / f"part-{i:05d}.json"
        path.write_bytes(b"\n".join(lines[at : at + n]) + b"\n")
        os.utime(path, (mtime + i, mtime + i))
        at += n
    return sizes


class Probe:
    """Wraps methods to time them and counts Spark jobs and stages per batch."""

    def __init__(self, spark) -> None:
        self.store = spark.sparkContext._jsc.sc().statusStore()
        self.batches: list[dict] = []
        self.current: dict | None = None
        self.last_jobs: list[str] = []
        self.thread: int | None = None  # the thread running the batch

    def jobs(self) -> tuple[int, int]:
        jobs = self.store.jobsList(None)  # a Scala Seq
        run = [jobs.apply(i) for i in range(jobs.size())]
        stages = sum(j.stageIds().size() - j.numSkippedStages() for j in run)
        self.last_jobs = [f"{j.name()} ({j.stageIds().size() - j.numSkippedStages()})" for j in run]
        return len(run), stages

    def count(self, owner, name: str, label: str) -> None:
        """Count the calls of `owner.name` per batch (e.g. round trips to the JVM)."""
        original = getattr(owner, name)
        probe = self

        def counted(*args, **kwargs):
            # The batch's own thread only (not the listener's, which Spark calls meanwhile).
            if probe.current is not None and threading.get_ident() == probe.thread:
                probe.current[label] += 1
            return original(*args, **kwargs)

        setattr(owner, name, counted)

    def wrap(self, owner, name: str, label: str, outer: bool = False) -> None:
        original = getattr(owner, name)
        probe = self

        def timed(*args, **kwargs):
            if outer:  # the probe's own calls into the JVM (jobs) are not the batch's
                j0, s0 = probe.jobs()
                probe.current, probe.thread = defaultdict(float), threading.get_ident()
            t0 = time.perf_counter()
            try:
                return original(*args, **kwargs)
            finally:
                if probe.current is not None:
                    probe.current[label] += time.perf_counter() - t0
                if outer:
                    batch, probe.current = probe.current, None
                    j1, s1 = probe.jobs()
                    batch["jobs"], batch["stages"] = j1 - j0, s1 - s0
                    probe.batches.append(dict(batch))

        setattr(owner, name, timed)


def instrument(spark) -> Probe:
    from py4j.clientserver import ClientServerConnection
    from pyspark import RDD
    from pyspark.sql.classic.dataframe import DataFrame

    from sessionize.engines import runner, sessions
    from sessionize.sinks.base import StagedSink
    from sessionize.sinks.parquet import ParquetSink
    from sessionize.state.lease import Lease

    probe = Probe(spark)
    probe.wrap(runner.BatchRunner, "_run", "total", outer=True)
    probe.wrap(sessions.SessionEngine, "previous_record", "plan: job record read")
    probe.wrap(StagedSink, "clear_staging", "clear staging")
    probe.wrap(sessions.SessionEngine, "run", "run")
    probe.wrap(DataFrame, "persist", "run: persist")
    probe.wrap(DataFrame, "unpersist", "run: unpersist")
    probe.wrap(DataFrame, "collect", "run: DataFrame.collect")
    probe.wrap(RDD, "collect", "run: RDD.collect")
    probe.wrap(ParquetSink, "publish", "publish")
    probe.wrap(sessions.SessionEngine, "write_record", "job record write")
    probe.wrap(sessions.SessionEngine, "after_commit", "after commit (trim)")
    probe.wrap(Lease, "check", "lease checks")
    probe.count(ClientServerConnection, "send_command", "calls into the JVM")
    return probe


def run_contender(name: str, inp: str, work: str, partitions: int) -> dict:
    """Inside the fresh process: one stream, one file per trigger."""
    from pyspark.sql.streaming import StreamingQueryListener

    from sessionize.commands.stream import StreamOptions, run_stream

    peer = peer_of(name)
    spark = plain_spark(name, partitions) if peer else warm_spark(name, partitions)
    probe = instrument(spark)
    triggers: dict[int, dict] = {}

    class Listener(StreamingQueryListener):
        def onQueryStarted(self, event) -> None: ...
        def onQueryIdle(self, event) -> None: ...
        def onQueryTerminated(self, event) -> None: ...

        def onQueryProgress(self, event) -> None:
            p = event.progress
            triggers[p.batchId] = {"rows": p.numInputRows, **p.durationMs}

    spark.streams.addListener(Listener())
    if name.startswith("session-window-"):  # the peer: Spark's trigger is all there is
        session_window_stream(spark, peer.provider, inp, work, files=1, exact=peer.exact)
        time.sleep(1)
        # One file per batch, in order.
        sizes = [len(p.read_bytes().splitlines()) for p in sorted(Path(inp).rglob("*.json"))]
        return {
            "name": name,
            "jobs": [],
            "batches": [
                {"version": b, "records": sizes[b], "trigger": t.get("triggerExecution", 0) / 1000}
                for b, t in sorted(triggers.items())
                if t.get("rows")
            ],
        }
    opts = StreamOptions(
        input=inp,
        output=f"{work}/out",
        checkpoint=f"{work}/chk",
        partitions=partitions,
        max_files_per_trigger=1,
        state=name,
    )
    records = run_stream(opts, spark, on_batch=lambda _: None)
    time.sleep(1)  # the listener's last events arrive asynchronously
    out = []
    for record, phases in zip(records, probe.batches, strict=True):
        spark_ms = triggers.get(record["version"], {})
        spark_parts = {  # Spark's own steps of the trigger, besides foreachBatch
            f"spark: {k}": v / 1000
            for k, v in spark_ms.items()
            if k not in ("rows", "triggerExecution", "addBatch")
        }
        out.append(
            {
                "version": record["version"],
                "records": record["batch"]["records"],
                "trigger": spark_ms.get("triggerExecution", 0) / 1000,
                "foreachBatch": spark_ms.get("addBatch", 0) / 1000,
                **spark_parts,
                **phases,
            }
        )
    return {
        "name": name,
        "batches": out,
        "jobs": probe.last_jobs[:12],
        "floor": floor_job(spark, partitions),
    }


def floor_job(spark, partitions: int, runs: int = 7) -> float:
    """Median seconds of the smallest job of a batch's shape, Spark's floor for it: one row
    through a Python map task, shuffled into `partitions`, one Python task each."""
    import pyarrow as pa

    def same(batches):
        yield from batches

    def count(batches):
        yield pa.RecordBatch.from_pydict({"n": [sum(b.num_rows for b in batches)]})

    one = spark.createDataFrame(pa.table({"k": [1]}))
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        one.mapInArrow(same, "k long").repartition(partitions, "k").mapInArrow(
            count, "n long"
        ).collect()
        times.append(time.perf_counter() - t0)
    return statistics.median(times[2:])


def summarize(batches: list[dict]) -> dict[str, dict[str, float]]:
    """Median of every measure per batch size, warm-up batches left out."""
    by_size: dict[str, list[dict]] = defaultdict(list)
    for b in batches[2:]:
        by_size["1 event" if b["records"] == 1 else f"{b['records']:,} events"].append(b)
    keys = sorted({k for b in batches for k in b} - {"version", "records"})
    return {
        size: {k: statistics.median(b.get(k, 0.0) for b in rows) for k in keys}
        for size, rows in by_size.items()
    }


def side_by_side(ours: dict[str, dict[str, float]], peer: dict[str, dict[str, float]]) -> None:
    """The trigger's median per batch size, ours against the peer's, and the goals: at most
    half of the peer's, and at most 0.4 s (Spark's own floor) at 1 event."""
    print("micro-batch, median s  ours   peer   ours/peer  goal")
    for size in ours:
        a, b = ours[size]["trigger"], peer.get(size, {}).get("trigger", float("nan"))
        goal = f"<= {b / 2:.3f}" + (" and <= 0.400" if size == "1 event" else "")
        met = a <= b / 2 and (size != "1 event" or a <= 0.4)
        print(
            f"  {size:<20}{a:>6.3f} {b:>6.3f} {a / b:>9.2f}   {goal}: {'met' if met else 'not met'}"
        )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batches", type=int, default=6, help="pairs of big and 1-event batches")
    ap.add_argument("--big", type=int, default=10_000)
    ap.add_argument("--users", type=int, default=15_000)
    ap.add_argument(
        "--state",
        default="files",
        help="a --state of the stream, or session-window-hdfs|rocksdb: Spark's own",
    )
    ap.add_argument(
        "--peer",
        default="session-window-hdfs",
        help="Spark's contender run after ours on the same files ('none': ours alone)",
    )
    ap.add_argument("--json", help="write the medians per contender and batch size here")
    add_run_args(ap)
    args = ap.parse_args()
    if args.run:
        print(json.dumps(run_contender(args.run, args.input, args.work, args.partitions)))
        return
    with bench_root() as root:
        need = (args.batches * (args.big + 1)) * 1.1
        cfg = input_config(
            argparse.Namespace(users=args.users, hours=2, events_per_hour=int(need / 2) + 1)
        )
        write_input(cfg, str(root / "gen"))
        write_batches(root / "gen", root / "input", args.batches, args.big)
        names = [args.state] + ([args.peer] if args.peer != "none" else [])
        medians: dict[str, dict] = {}
        floors: dict[str, float] = {}
        for name in names:
            result = run_fresh(
                __file__, name, str(root / "input"), str(root / f"work-{name}"), args.partitions
            )
            medians[name] = summarize(result["batches"])
            if result["jobs"]:
                print(f"{name}: latest Spark jobs (stages run):", *result["jobs"], sep="\n  ")
            print(f"load after {name}: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
            if "floor" in result:
                print(
                    f"Spark's floor, a 1-row job of the batch's shape (median s): "
                    f"{result['floor']:.3f}"
                )
                floors[name] = result["floor"]
            for size, steps in summarize(result["batches"]).items():
                print(f"{name}, {size} (median s per batch; jobs, stages per batch):")
                for k, v in steps.items():
                    print(f"  {k:<28}{v:>8.3f}")
        if len(names) == 2:
            side_by_side(medians[names[0]], medians[names[1]])
        if args.json:
            write_json(
                args.json,
                "batch_cost",
                [{"name": n, "medians": m, "floor": floors.get(n)} for n, m in medians.items()],
            )


if __name__ == "__main__":
    main()
