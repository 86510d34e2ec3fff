"""A real stream's 10k-event micro-batches against a state of N open users, per store.

    source .services/env.sh
    .venv/bin/python benchmarks/state_size.py [--users 10000 100000 1000000]
        [--stores files postgres redis] [--partitions 8] [--batches 3] [--cache-mb MB]
        [--json PATH]

Per store and N: a `sessionize stream` in a fresh process runs one batch of 10 events, which
sets up its checkpoint, job record and state. The big state is then built the fast way,
without Spark: N users of one event each, a few minutes before the stream's events, go
through the keyed core's `step` with the session processor, partition by partition (each
user in the partition Spark's shuffle gives it, `core.partitioner`), into a new place of
the store at the stream's version, as `state migrate` copies a state, and the checkpoint
is switched to it. Then the same stream in a new fresh process runs `--batches` files of
10,000 events (half of them from users in the state, half from new users; nothing
expires), one file per trigger. Per batch it prints Spark's trigger time, the store's
round trips and bytes read and written (the engine's own counts, summed over the
partitions) and the peak resident memory of the Python workers (the executors' Python
processes, read from /proc as the stream runs). The first batch of a fresh driver also
loads each partition from the store and warms the JVM; the later batches are the steady
state.

`--partitions` is the same at every N: the count a job of the largest N would use
(docs/scaling.md, a few hundred thousand open users per partition), so that only the
state's size changes. Remote stores get their own schema or key prefix, removed after, and
at most `--max-remote` users (5M users are about 2.4 GB of Redis memory and of PostgreSQL
rows on servers other jobs share).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pyarrow as pa
from bench_common import descendants, write_json
from identity_state import _drop_redis, _drop_schema
from state_backends import service

T0 = datetime(2026, 11, 1, 12, tzinfo=UTC)
T0_US = int(T0.timestamp() * 1_000_000)
MINUTE = 60_000_000
NEW_USERS = 500_000_000  # ids of users outside the built state


def event_line(user: int, at_us: int, page: int) -> str:
    at = datetime.fromtimestamp(at_us / 1e6, UTC).isoformat(timespec="milliseconds")
    return json.dumps(
        {
            "user_id": user,
            "event_time": at.replace("+00:00", "Z"),
            "action": "view",
            "page": {"current": f"/p{page}", "previous": None},
            "source": {"site": "shop.example", "api_version": "v3"},
            "technical": {"browser": "Firefox 55", "lang": "en", "device": {"type": "desktop"}},
        }
    )


def write_file(path: Path, users: np.ndarray, start_us: int, mtime: float) -> None:
    rng = np.random.default_rng(len(users) + start_us % 997)
    times = start_us + rng.integers(0, 30_000_000, len(users))
    pages = rng.integers(0, 300, len(users))
    path.parent.mkdir(parents=True, exist_ok=True)
    rows = zip(users.tolist(), times.tolist(), pages.tolist(), strict=True)
    path.write_text("\n".join(event_line(u, t, p) for u, t, p in rows) + "\n")
    os.utime(path, (mtime, mtime))


def batch_users(n_state: int, size: int, i: int) -> np.ndarray:
    """Half from the state, half new, distinct, different in every batch."""
    rng = np.random.default_rng(100 + i)
    known = rng.choice(n_state, size // 2, replace=False) if n_state else np.array([], np.int64)
    new = NEW_USERS + i * size + np.arange(size - len(known))
    return np.concatenate([known, new]).astype(np.int64)


def place(store: str, tag: str, root: Path, cache_mb: int | None) -> tuple[str, callable] | None:
    """A new place for the big state in `store`, and how to remove it."""
    if store == "files":
        query = "" if cache_mb is None else f"?cache_mb={cache_mb}"
        return f"files:{root / 'state-big'}{query}", lambda: None
    variable = {"postgres": "SESSIONIZE_TEST_POSTGRES", "redis": "SESSIONIZE_TEST_REDIS"}[store]
    server = service(variable)
    if not server:
        print(f"{store}: not running ({variable} unset: source .services/env.sh)", file=sys.stderr)
        return None
    if store == "postgres":
        return f"{server}?schema={tag}", lambda: _drop_schema(server, tag)
    return f"{server}?prefix={tag}", lambda: _drop_redis(server, tag)


def build_state(checkpoint: str, to: str, users: int, partitions: int) -> float:
    """Add `users` open users to the stream's state, written into `to` at the stream's
    version, and switch the checkpoint to it; returns the seconds taken."""
    from sessionize.commands.options import recorded_state
    from sessionize.commands.statetools.contents import read_partition
    from sessionize.commands.statetools.copy import partition_meta
    from sessionize.commands.statetools.job import locate
    from sessionize.commands.statetools.switch import switch_checkpoint
    from sessionize.core.partitioner import spark_partitions
    from sessionize.core.step import step
    from sessionize.logic.processor import SessionProcessor
    from sessionize.state import EMPTY_VERSION

    t0 = time.perf_counter()
    sj = locate(checkpoint, None)
    source = sj.backend()
    version = sj.last_version(source)
    record = {k: v for k, v in source.read_job_record(sj.job, version).items() if k != "settings"}
    target = sj.open(sj.resolve(to))
    target.check()
    processor = SessionProcessor(sj.session_rules, sj.layout)
    ids = np.arange(users, dtype=np.int64)
    where = spark_partitions(pa.array(ids), partitions)
    for p in range(partitions):
        mine = ids[where == p]
        old = read_partition(source, sj.job, p, version, sj.shape).rows
        puts = [old]
        with target.open(sj.job, p, EMPTY_VERSION) as tx:
            for chunk in np.array_split(mine, max(1, len(mine) // 200_000)):
                result = step(
                    processor,
                    tx.get_many(pa.array(chunk)),
                    events(chunk),
                    batch_id=version,
                    partition=p,
                    watermark_before=None,
                    watermark_after=T0_US - 60 * MINUTE,
                )
                tx.put_many(result.puts)
                puts.append(result.puts)
            tx.put_many(old)
            rows = pa.concat_tables(puts, promote_options="permissive")
            tx.commit(version, partition_meta(rows, sj.rules, sj.shape))
    settings = source.recorded_settings(sj.job)
    if settings is not None:
        target.write_job_settings(sj.job, settings)
    target.write_job_record(sj.job, version, record)
    switch_checkpoint(checkpoint, recorded_state(to), partitions)
    return time.perf_counter() - t0


def events(users: np.ndarray) -> pa.Table:
    """One event per user in the five minutes before the stream's events, as the processor
    reads them."""
    from sessionize import schema

    n = len(users)
    rng = np.random.default_rng(int(users[0]) if n else 0)
    times = T0_US - 5 * MINUTE + rng.integers(0, 4 * MINUTE, n)
    return pa.table(
        {
            "user_id": pa.array(users, pa.int64()),
            "event_time": pa.array(times, schema.TS),
            "page": pa.array(np.char.add("/p", rng.integers(0, 300, n).astype(str))),
            "action": pa.array(["view"] * n),
            "site": pa.array(["shop.example"] * n),
            "api_version": pa.array(["v3"] * n),
            "browser": pa.array(["Firefox 55"] * n),
            "language": pa.array(["en"] * n),
            "device_type": pa.array(["desktop"] * n),
        }
    )


def run_stream_here(inp: str, work: str, state: str, partitions: int) -> dict:
    """Inside the fresh process: the stream over what `inp` holds, one file per trigger."""
    from pyspark.sql.streaming import StreamingQueryListener

    from sessionize.commands.stream import StreamOptions, run_stream
    from sessionize.spark_session import get_spark

    spark = get_spark("bench-state-size", shuffle_partitions=partitions)
    spark.range(1).count()
    triggers: dict[int, float] = {}

    class Listener(StreamingQueryListener):
        def onQueryStarted(self, event) -> None: ...
        def onQueryIdle(self, event) -> None: ...
        def onQueryTerminated(self, event) -> None: ...

        def onQueryProgress(self, event) -> None:
            p = event.progress
            triggers[p.batchId] = p.durationMs.get("triggerExecution", 0) / 1000

    spark.streams.addListener(Listener())
    opts = StreamOptions(
        input=inp,
        output=f"{work}/out",
        checkpoint=f"{work}/chk",
        partitions=partitions,
        max_files_per_trigger=1,
        state=state,
    )
    records = run_stream(opts, spark, on_batch=lambda _: None)
    time.sleep(1)  # the listener's last events arrive asynchronously
    return {
        "batches": [
            {
                "version": r["version"],
                "records": r["batch"]["records"],
                "trigger_s": triggers.get(r["version"], 0.0),
                **{
                    k: r["batch"].get(f"state_{k}", 0)
                    for k in ("round_trips", "bytes_read", "bytes_written")
                },
            }
            for r in records
        ]
    }


class WorkerMemory:
    """The peak resident memory (VmHWM) of every Python process below `pid` but the
    driver's own, read from /proc twice a second while the stream runs."""

    def __init__(self, pid: int) -> None:
        self.pid, self.peak, self.done = pid, 0, threading.Event()
        self.thread = threading.Thread(target=self.poll, daemon=True)
        self.thread.start()

    def poll(self) -> None:
        while not self.done.wait(0.5):
            for child in descendants(self.pid):
                try:
                    cmd = Path(f"/proc/{child}/cmdline").read_bytes()
                    status = Path(f"/proc/{child}/status").read_text()
                except OSError:
                    continue
                if b"python" not in cmd.split(b"\0")[0]:
                    continue  # the JVM
                for line in status.splitlines():
                    if line.startswith("VmHWM:"):
                        self.peak = max(self.peak, int(line.split()[1]) * 1024)

    def stop(self) -> int:
        self.done.set()
        self.thread.join()
        return self.peak


def fresh(inp: Path, work: Path, state: str, partitions: int) -> tuple[dict, int]:
    import subprocess

    env = dict(os.environ)
    env.setdefault("SESSIONIZE_SPARK_MASTER", "local[2]")
    cmd = [sys.executable, __file__, "--run", state, "--input", str(inp), "--work", str(work)]
    proc = subprocess.Popen(
        [*cmd, "--partitions", str(partitions)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    memory = WorkerMemory(proc.pid)
    out, err = proc.communicate()
    peak = memory.stop()
    if proc.returncode != 0:
        raise SystemExit(f"the stream failed:\n{err[-4000:]}")
    return json.loads(out.strip().splitlines()[-1]), peak


def measure(store: str, users: int, args: argparse.Namespace) -> dict | None:
    root = Path(tempfile.mkdtemp(prefix="bench-state-size-"))
    tag = f"bss{uuid.uuid4().hex[:8]}"
    where = place(store, tag, root, args.cache_mb)
    if where is None:
        return None
    uri, remove = where
    try:
        inp, work = root / "in" / "event_date=2026-11-01" / "event_hour=12", root / "work"
        mtime = time.time() - 3600
        write_file(inp / "part-00000.json", NEW_USERS - 10 + np.arange(10), T0_US, mtime)
        fresh(root / "in", work, f"files:{root / 'state-small'}", args.partitions)
        build_s = build_state(str(work / "chk"), uri, users, args.partitions)
        for i in range(args.batches):
            batch = batch_users(users, args.events, i)
            write_file(
                inp / f"part-{i + 1:05d}.json", batch, T0_US + (i + 1) * MINUTE, mtime + i + 1
            )
        result, peak = fresh(root / "in", work, uri, args.partitions)
        batches = result["batches"]
        steady = batches[1:] or batches
        row = {
            "store": label(store, args),
            "users": users,
            "partitions": args.partitions,
            "build_s": round(build_s, 1),
            "first_s": batches[0]["trigger_s"],
            "batch_s": statistics.median(b["trigger_s"] for b in steady),
            "bytes_read": statistics.median(b["bytes_read"] for b in steady),
            "bytes_written": statistics.median(b["bytes_written"] for b in steady),
            "first_bytes_read": batches[0]["bytes_read"],
            "round_trips": statistics.median(b["round_trips"] for b in steady),
            "worker_peak_rss": peak,
            "load": os.getloadavg()[0],
            "batches": batches,
        }
        print(
            f"{row['store']:<9}{users:>10,}{row['build_s']:>9.1f}{row['first_s']:>9.2f}{row['batch_s']:>9.2f}"
            f"{row['first_bytes_read'] / 1e6:>11.1f}{row['bytes_read'] / 1e6:>9.1f}"
            f"{row['bytes_written'] / 1e6:>9.1f}{peak / 2**20:>9.0f}{row['load']:>7.1f}",
            flush=True,
        )
        return row
    finally:
        try:
            remove()
        except Exception as e:  # noqa: BLE001 - the measurement stands; the leftover is said
            print(f"{store}: {tag} not removed ({e}); remove it by hand", file=sys.stderr)
        shutil.rmtree(root, ignore_errors=True)


def label(store: str, args: argparse.Namespace) -> str:
    """The store's name in the results: `files` with a cache other than its default says so."""
    return f"files cache_mb={args.cache_mb}" if store == "files" and args.cache_mb else store


def merged(path: str, rows: list[dict]) -> list[dict]:
    """`rows` with the results of other stores and sizes already in `path` (runs of
    different sizes add up into one file; a store and size measured again replaces its row)."""
    mine = {(r["store"], r["users"]) for r in rows}
    try:
        kept = json.loads(Path(path).read_text())["results"]
    except (OSError, ValueError, KeyError):
        kept = []
    others = [r for r in kept if (r["store"], r["users"]) not in mine]
    return sorted(others + rows, key=lambda r: (r["users"], r["store"]))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--users", type=int, nargs="+", default=[10_000, 100_000, 1_000_000])
    ap.add_argument("--stores", nargs="+", default=["files", "postgres", "redis"])
    ap.add_argument("--partitions", type=int, default=8)
    ap.add_argument("--batches", type=int, default=3, help="10k-event batches per run")
    ap.add_argument("--events", type=int, default=10_000, help="events per batch")
    ap.add_argument(
        "--max-remote",
        type=int,
        default=1_000_000,
        help="the most users put in a remote store (its memory and time are shared)",
    )
    ap.add_argument(
        "--cache-mb",
        type=int,
        help="the files store's process cache (cache_mb; its default, 256, when left out)",
    )
    ap.add_argument("--json", help="add the results to this file (benchmarks/plot.py draws them)")
    ap.add_argument("--run", help=argparse.SUPPRESS)
    ap.add_argument("--input", help=argparse.SUPPRESS)
    ap.add_argument("--work", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.run:
        print(json.dumps(run_stream_here(args.input, args.work, args.run, args.partitions)))
        return
    print(f"load: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print(
        f"{'store':<9}{'users':>10}{'build s':>9}{'first s':>9}{'batch s':>9}"
        f"{'1st MB rd':>11}{'MB read':>9}{'MB wrtn':>9}{'RSS MB':>9}{'load':>7}"
    )
    rows = []
    for users in args.users:
        for store in args.stores:
            if store != "files" and users > args.max_remote:
                print(f"{store:<9}{users:>10,}  skipped: above --max-remote on a shared server")
                continue
            try:
                row = measure(store, users, args)
            except (SystemExit, Exception) as e:  # noqa: BLE001 - one store's failure, said
                print(f"{store:<9}{users:>10,}  failed: {str(e).strip().splitlines()[-1]}")
                continue
            if row is not None:
                rows.append(row)
                if args.json:
                    write_json(args.json, "state_size", merged(args.json, rows))
    for store in args.stores:
        mine = sorted(
            (r for r in rows if r["store"] == label(store, args)), key=lambda r: r["users"]
        )
        if len(mine) > 1:
            ratio = mine[-1]["batch_s"] / mine[0]["batch_s"]
            print(
                f"{store}: {mine[-1]['users']:,} users cost {ratio:.2f}x "
                f"what {mine[0]['users']:,} do per batch (goal: at most 1.5x at 5M)"
            )
    print(f"load: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
