"""Throughput of the engines next to Spark's stateless read-parse-write and session_window.

    .venv/bin/python benchmarks/throughput.py [--small] [--files-per-trigger 4]
        [--only CONTENDER ...] [--batch-times CONTENDER ...]

Generates the input once (default 1.03M events of 15k users over 6 hours, 5 files per hour;
`--small`: 50k events, 2 hours, 4 files per hour), then runs every contender in a fresh
process (no JVM or cache carries over), timing only the work: from the first read to the
last committed write. Every stream reads the same `--files-per-trigger` files per
micro-batch. Prints events/s per contender and its ratio to the stateless rate and to
Spark's streaming session_window (HDFS state), both written as Spark users write them
(benchmarks/peers.py: Spark's JSON reader with a schema, a plain SparkSession), all measured
in this run; for our engine also
the state store's round trips and bytes per partition and micro-batch. Then, for the
contenders of `--batch-times`, the median time of a 1-event and of a 10k-event micro-batch
(benchmarks/batch_cost.py, which also breaks it down).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import time
from datetime import UTC, datetime
from pathlib import Path

import batch_cost
from bench_common import (
    add_input_args,
    add_run_args,
    bench_root,
    input_config,
    run_fresh,
    warm_spark,
    write_input,
    write_json,
)
from peers import peer_of, plain_spark, session_window_stream, stateless

from sessionize import jvm_archive

# Contenders, each run in a fresh process on the same input. `store-*` differ only in the
# state backend (`store-files-no-archive`: without the driver's class archive, as before
# `sessionize jvm-archive`); `spark-*` keep state in Spark's state store; `batch-files` runs
# the same engine once per hour over the whole input. The peers (benchmarks/peers.py) are
# Spark's jobs as users write them, with Spark's JSON reader: `stateless` reads, keeps the
# valid events and writes them; `session-window-*` are Spark's streaming aggregation (JVM
# only: no explicit closes, no page lists, no late or invalid outputs) on Spark's two
# state stores. Their `-exact` variants read through sessionize's validating parse.
CONTENDERS = (
    "stateless",
    "store-files",
    "store-files-no-archive",
    "store-postgres",
    "store-redis",
    "store-dynamodb",
    "spark-rocksdb",
    "spark-hdfs",
    "session-window-hdfs",
    "session-window-rocksdb",
    "batch-files",
    "stateless-exact",
    "session-window-hdfs-exact",
    "session-window-rocksdb-exact",
)
# Run only when named (--only): a second look at the same contenders.
NAMED_ONLY = (
    "batch-files",
    "store-files-no-archive",
    "stateless-exact",
    "session-window-hdfs-exact",
    "session-window-rocksdb-exact",
)
REMOTE_STATE_ENV = {
    "store-postgres": "SESSIONIZE_TEST_POSTGRES",
    "store-redis": "SESSIONIZE_TEST_REDIS",
    "store-dynamodb": "SESSIONIZE_TEST_DYNAMODB",
}
SESSION_WINDOW = "session-window-hdfs"  # the peer the ratios name


def default_contenders() -> list[str]:
    """Every contender whose service is there (the remote stores need theirs)."""
    return [
        c
        for c in CONTENDERS
        if c not in NAMED_ONLY
        and (c not in REMOTE_STATE_ENV or os.environ.get(REMOTE_STATE_ENV[c]))
    ]


def state_uri(name: str) -> str:
    """The `--state` of a `store-*` contender, in a namespace of its own."""
    if name == "store-files":
        return "files"
    value = os.environ.get(REMOTE_STATE_ENV[name])
    if not value:
        raise SystemExit(
            f"{name}: {REMOTE_STATE_ENV[name]} is not set; run services/start.sh and "
            "source .services/env.sh"
        )
    if name == "store-dynamodb":
        return f"dynamodb://bench{os.getpid()}?endpoint={value}&region=us-east-1"
    if name == "store-postgres":
        return value + ("&" if "?" in value else "?") + f"schema=bench{os.getpid()}"
    return value + ("&" if "?" in value else "?") + f"prefix=bench{os.getpid()}"


def run_contender(
    name: str,
    inp: str,
    work: str,
    partitions: int,
    files_per_trigger: int | None,
    spark_jit: bool = False,
) -> dict:
    """Inside the fresh process: run one contender, return its timing (and state I/O)."""
    contender, peer = name, peer_of(name)
    if name.endswith("-no-archive"):  # an empty cache: the driver maps no class archive
        os.environ["SESSIONIZE_JVM_CACHE"] = os.path.join(work, "no-archive")
        name = name.removesuffix("-no-archive")
    # A peer runs in a session as a user builds one: the JVM's own compile thresholds, no
    # class archive (--spark-jit changes only sessionize's contenders).
    spark = plain_spark(name, partitions) if peer else warm_spark(name, partitions, spark_jit)
    t0 = time.perf_counter()
    io: dict[str, int] = {}
    if peer and peer.kind == "stateless":
        events = stateless(spark, inp, work, peer.exact)
    elif peer:
        events, batches = session_window_stream(
            spark, peer.provider, inp, work, files_per_trigger, peer.exact
        )
        io = {"batches": batches}
    elif name.startswith(("store-", "spark-")):
        from sessionize.commands.stream import StreamOptions, run_stream

        opts = StreamOptions(
            input=inp,
            output=f"{work}/out",
            checkpoint=f"{work}/chk",
            state=name if name.startswith("spark-") else state_uri(name),
            partitions=partitions,
            max_files_per_trigger=files_per_trigger,
        )
        records = run_stream(opts, spark, on_batch=lambda _: None)
        events = sum(r["batch"]["records"] for r in records)
        io = _state_io(records, partitions)
    elif name == "batch-files":
        from sessionize.commands.batch import BatchOptions, run_batch

        hours = sorted(Path(inp).glob("event_date=*/event_hour=*"))
        first, last = (_hour_of(h) for h in (hours[0], hours[-1]))
        opts = BatchOptions(
            input=inp, output=f"{work}/out", start=first, end=last, partitions=partitions
        )
        records = run_batch(opts, spark, lambda _: None)
        events = sum(r["batch"]["records"] for r in records)
        io = _state_io(records, partitions)
    else:
        raise SystemExit(f"unknown contender {name}; known: {', '.join(CONTENDERS)}")
    seconds = time.perf_counter() - t0
    return {"name": contender, "events": events, "seconds": seconds, **io}


def _state_io(records: list[dict], partitions: int) -> dict[str, int]:
    """Micro-batches, and the store's round trips and bytes per partition and batch."""
    if not records or "state_round_trips" not in records[0]["batch"]:
        return {"batches": len(records)}  # Spark's own state store: not ours to count
    tasks = len(records) * partitions
    per_task = {
        f"{k}_per_task": round(sum(r["batch"][f"state_{k}"] for r in records) / tasks)
        for k in ("round_trips", "bytes_read", "bytes_written")
    }
    return {"batches": len(records), **per_task}


def _hour_of(path: Path) -> datetime:
    day = path.parent.name.split("=", 1)[1]
    return datetime.strptime(f"{day}T{path.name.split('=', 1)[1]}", "%Y-%m-%dT%H").replace(
        tzinfo=UTC
    )


def positive(text: str) -> int:
    """An argument of 1 or more."""
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: give a whole number of 1 or more")
    return int(text)


def median_run(runs: list[dict]) -> dict:
    """The run of median time (the lower middle of an even count), with every run's seconds."""
    ordered = sorted(runs, key=lambda r: r["seconds"])
    return {**ordered[(len(ordered) - 1) // 2], "runs": [round(r["seconds"], 1) for r in runs]}


def print_rates(results: list[dict]) -> None:
    rate = {r["name"]: r["events"] / r["seconds"] for r in results}
    base, peer = rate.get("stateless"), rate.get(SESSION_WINDOW)
    print(
        f"{'contender':<24}{'events':>10}{'batches':>8}{'seconds':>9}{'events/s':>10}"
        f"{'/stateless':>11}{'/session_window':>16}  state per partition-batch"
    )
    for r in results:
        io = (
            f"  {r['round_trips_per_task']} round trips, "
            f"{r['bytes_read_per_task'] / 1e3:,.0f} kB read, "
            f"{r['bytes_written_per_task'] / 1e3:,.0f} kB written"
            if "round_trips_per_task" in r
            else ""
        )
        own = rate[r["name"]]
        if len(r.get("runs", [])) > 1:
            io += f"  (runs: {', '.join(f'{x:.1f}' for x in r['runs'])} s)"
        print(
            f"{r['name']:<24}{r['events']:>10,}{r.get('batches', 1):>8}{r['seconds']:>9.1f}"
            f"{own:>10,.0f}{own / base if base else float('nan'):>11.2f}"
            f"{own / peer if peer else float('nan'):>16.2f}{io}"
        )


def print_batch_times(names: list[str], root: Path, partitions: int) -> None:
    """Median seconds of Spark's trigger for a 1-event and a 10k-event micro-batch."""
    if not names:
        return
    inp = root / "batches"
    batch_cost.write_batches(root / "input", inp, batches=4, big=10_000)
    print(f"{'micro-batch time (median s)':<28}{'1 event':>9}{'10k events':>12}")
    for name in names:
        state = name if name.startswith(("spark-", "session-window-")) else state_uri(name)
        result = run_fresh(batch_cost.__file__, state, str(inp), str(root / "bt"), partitions)
        shutil.rmtree(root / "bt", ignore_errors=True)
        medians = batch_cost.summarize(result["batches"])
        small, big = medians.get("1 event", {}), medians.get("10,000 events", {})
        print(f"{name:<28}{small.get('trigger', 0):>9.2f}{big.get('trigger', 0):>12.2f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_input_args(ap)
    ap.set_defaults(users=15_000, hours=6, events_per_hour=172_000, files_per_hour=5)
    add_run_args(ap)
    ap.add_argument("--small", action="store_true", help="a quick run on a small input")
    ap.add_argument(
        "--files-per-trigger",
        type=int,
        nargs="+",
        default=[4],
        help="files per micro-batch; several values run every contender at each, in this "
        "run; 0: one micro-batch for the whole input",
    )
    ap.add_argument("--only", nargs="*", choices=CONTENDERS)
    streams = [c for c in CONTENDERS if c.startswith(("store-", "spark-", "session-window-"))]
    ap.add_argument("--batch-times", nargs="*", default=["store-files"], choices=streams)
    ap.add_argument("--json", metavar="PATH", help="also write the results as JSON (plot.py)")
    ap.add_argument(
        "--repeat",
        type=positive,
        default=1,
        metavar="N",
        help="run every contender N times, taking turns, and rate each by its median run",
    )
    ap.add_argument(
        "--spark-jit",
        action="store_true",
        help="sessionize's contenders' driver JVM with the JVM's default compile thresholds "
        "(the peers always have them)",
    )
    args = ap.parse_args()
    if args.run:
        result = run_contender(
            args.run,
            args.input,
            args.work,
            args.partitions,
            args.files_per_trigger[0] or None,
            args.spark_jit,
        )
        print(json.dumps(result))
        return
    if args.small:
        args.hours, args.events_per_hour, args.files_per_hour = 2, 25_000, 4
        args.files_per_trigger = [min(f, 2) if f else 0 for f in args.files_per_trigger]
    with bench_root() as root:
        write_input(input_config(args), str(root / "input"))
        print(f"load: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
        print(f"driver JIT: {'the JVM defaults' if args.spark_jit else 'sessionize'}")
        archive = jvm_archive.archive_path()
        print(f"driver class archive: {archive if archive.is_file() else 'none'}")
        for files in args.files_per_trigger:
            print(f"files per trigger: {files or 'all (one micro-batch)'}", flush=True)
            names = args.only if args.only is not None else default_contenders()
            runs: dict[str, list[dict]] = {name: [] for name in names}
            for _ in range(args.repeat):  # the contenders take turns: noise hits them alike
                for name in names:
                    work = root / name
                    extra = ["--files-per-trigger", str(files), *["--spark-jit"] * args.spark_jit]
                    runs[name].append(
                        run_fresh(
                            __file__, name, str(root / "input"), str(work), args.partitions, extra
                        )
                    )
                    shutil.rmtree(work, ignore_errors=True)
                    print(
                        f"  {name} done (load {' '.join(f'{x:.2f}' for x in os.getloadavg())})",
                        flush=True,
                    )
            results = [median_run(runs[name]) for name in names]
            print_rates(results)
            if args.json:
                several = len(args.files_per_trigger) > 1
                path = args.json.replace(".json", f"-{files}.json") if several else args.json
                write_json(path, f"throughput-{files}", results)
        print_batch_times(args.batch_times, root, args.partitions)
        print(f"load: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
