"""Soak: a stream of thousands of micro-batches, checked for what grows where it should not.

A feeder keeps the input two batches ahead of the stream (a JSON-lines file per batch in
the hourly tree, or a chunk of records on a Kafka topic), on a simulated clock that moves
`--sim-seconds` per batch (30 s: 2,000 batches are 16 simulated hours), while `sessionize
stream --trigger processing-time=...` runs in a process of its own. Every `--every`
batches the script samples the driver's Python and JVM and the Python workers (resident
memory, open file handles, threads; the JVM's heap after a full collection, which `jcmd`
starts), the checkpoint (Spark's logs and our records, without the state and the progress
log), the state, the progress log and the outputs (bytes and files), and the batch
duration, reading the batch count from the stream's own metrics endpoint
(`--metrics-port`). It prints each one's slope against the batch number (Theil-Sen, after
a warm-up) and exits 1 when one that should stay flat grows faster than its limit.

    python benchmarks/soak.py --batches 2000            # files, about 15 minutes quiet
    python benchmarks/soak.py --input kafka://127.0.0.1:9092/soak --batches 2000
    python benchmarks/soak.py --batches 100 --every 25 --json soak.json --plot soak.png
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from datetime import UTC, datetime, timedelta
from pathlib import Path

from bench_common import children, descendants

# What must stay flat, with the growth per batch it may show (noise, and the file source's
# log, whose two compacted files each keep one ~180-byte entry per file read for the life
# of the checkpoint).
FLAT = {
    "driver_py_rss_kb": 2.0,
    "workers_rss_kb": 4.0,
    "driver_py_fds": 0.01,
    "driver_jvm_fds": 0.01,
    "driver_py_threads": 0.01,
    "driver_jvm_threads": 0.02,
    "driver_jvm_heap_kb": 5.0,
    "checkpoint_kb": 0.5,
    "checkpoint_files": 0.02,
    "state_kb": 1.0,
    "state_files": 0.05,
}
USERS_DEFAULT = 3000
START = datetime(2026, 11, 1, tzinfo=UTC)


def _proc_status(pid: int) -> dict[str, int]:
    out = {}
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key in ("VmRSS", "Threads"):
                    out[key] = int(value.split()[0])
        out["fds"] = len(os.listdir(f"/proc/{pid}/fd"))
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return {}
    return out


def _cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace")
    except FileNotFoundError:
        return ""


def live_heap_kb(pid: int) -> int | None:
    """The JVM's heap after a full collection (`jcmd`, part of the JDK), in kB: what it
    holds, whereas its RSS also counts heap it committed and has not given back yet."""
    try:
        subprocess.run(["jcmd", str(pid), "GC.run"], capture_output=True, timeout=60, check=True)
        info = subprocess.run(
            ["jcmd", str(pid), "GC.heap_info"],
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    used = re.search(r"heap\s+total \d+K, used (\d+)K", info)
    return int(used.group(1)) if used else None


def processes(driver: int) -> dict[str, float]:
    """Memory (kB), handles and threads of the driver's Python and JVM and the workers; the
    JVM's after a full collection."""
    py = _proc_status(driver)
    jvm_pids = [p for p in children(driver) if "java" in _cmdline(p).split(" ")[0]]
    heap = live_heap_kb(jvm_pids[0]) if jvm_pids else None
    jvm = _proc_status(jvm_pids[0]) if jvm_pids else {}
    workers = [_proc_status(p) for p in (descendants(jvm_pids[0]) if jvm_pids else [])]
    workers = [w for w in workers if "VmRSS" in w]  # a worker exiting has no memory left
    return {
        "driver_py_rss_kb": py.get("VmRSS", 0),
        "driver_py_fds": py.get("fds", 0),
        "driver_py_threads": py.get("Threads", 0),
        "driver_jvm_rss_kb": jvm.get("VmRSS", 0),
        "driver_jvm_fds": jvm.get("fds", 0),
        "driver_jvm_threads": jvm.get("Threads", 0),
        **({"driver_jvm_heap_kb": heap} if heap is not None else {}),
        "workers": len(workers),
        "workers_rss_kb": sum(w["VmRSS"] for w in workers),
    }


def tree(path: Path, skip: tuple[str, ...] = ()) -> tuple[float, int]:
    """kB and files under `path`, leaving out the top-level entries named in `skip`."""
    size = count = 0
    for root, dirs, files in os.walk(path):
        if Path(root) == path:
            dirs[:] = [d for d in dirs if d not in skip]
            files = [f for f in files if not f.startswith(skip)] if skip else files
        for name in files:
            try:
                size += os.path.getsize(os.path.join(root, name))
            except FileNotFoundError:
                continue
            count += 1
    return size / 1024, count


def slope(xs: list[float], ys: list[float]) -> float:
    """The Theil-Sen slope of ys against xs: the median of the slopes between every two
    samples. A sample of a running stream can catch a batch's transient memory (a heap
    sample 100 MB above its neighbours); a least-squares line lets a few of those decide,
    the median does not, while a steady growth moves every pairwise slope."""
    pairs = sorted(
        (ys[j] - ys[i]) / (xs[j] - xs[i])
        for i in range(len(xs))
        for j in range(i + 1, len(xs))
        if xs[j] != xs[i]
    )
    if not pairs:
        return 0.0
    mid = len(pairs) // 2
    return pairs[mid] if len(pairs) % 2 else (pairs[mid - 1] + pairs[mid]) / 2


class Feeder:
    """Events of `users` users on a simulated clock: one file (or Kafka chunk) per call."""

    def __init__(self, target: str, events: int, users: int, sim_seconds: int, seed: int = 7):
        self.target, self.events, self.users = target, events, users
        self.step = timedelta(seconds=sim_seconds)
        self.clock = START
        self.rng = random.Random(seed)
        self.written = 0
        self.unit = 1  # the lag of one batch: a file, or `events` records
        self._producer = None
        if target.startswith("kafka://"):
            from confluent_kafka import Producer

            self.topic = target.removeprefix("kafka://").split("/", 1)[1].split("?")[0]
            servers = target.removeprefix("kafka://").split("/", 1)[0]
            self._producer = Producer({"bootstrap.servers": servers, "linger.ms": 5})
            self.unit = events

    def lines(self) -> list[str]:
        out = []
        span = self.step.total_seconds()
        for _ in range(self.events):
            t = self.clock + timedelta(seconds=self.rng.random() * span)
            action = "browser_close" if self.rng.random() < 0.05 else "view"
            out.append(
                json.dumps(
                    {
                        "user_id": 100_000 + self.rng.randrange(self.users),
                        "event_time": t.isoformat(timespec="milliseconds"),
                        "action": action,
                        "page": {"current": f"page {self.rng.randrange(50)}"},
                    }
                )
            )
        return out

    def feed(self) -> None:
        lines = self.lines()
        if self._producer is not None:
            for line in lines:
                self._producer.produce(self.topic, line.encode())
            self._producer.flush()
        else:
            hour = (
                Path(self.target)
                / f"event_date={self.clock:%Y-%m-%d}"
                / (f"event_hour={self.clock:%H}")
            )
            hour.mkdir(parents=True, exist_ok=True)
            tmp = hour / f".part-{self.written:06d}.json.tmp"  # hidden from Spark until renamed
            tmp.write_text("\n".join(lines) + "\n")
            tmp.rename(hour / f"part-{self.written:06d}.json")
        self.written += 1
        self.clock += self.step


def scrape(port: int) -> dict[str, float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30) as r:
        text = r.read().decode()
    out: dict[str, float] = {}
    for line in text.splitlines():
        if line.startswith("sessionize_") and " " in line:
            name, _, value = line.rpartition(" ")
            key = name.split("{")[0]
            out[key] = out.get(key, 0.0) + float(value)
    return out


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run(args: argparse.Namespace, work: Path) -> tuple[list[dict], dict[str, float]]:
    inp = args.input or str(work / "in")
    feeder = Feeder(inp, args.events, args.users, args.sim_seconds)
    if not inp.startswith("kafka://"):
        Path(inp).mkdir(parents=True, exist_ok=True)
    for _ in range(2):
        feeder.feed()
    port = _free_port()
    chk, out = work / "chk", work / "out"
    cmd = [
        sys.executable,
        "-m",
        "sessionize",
        "stream",
        "--input",
        inp,
        "--output",
        str(out),
        "--checkpoint",
        str(chk),
        "--trigger",
        f"processing-time={args.trigger}",
        "--partitions",
        str(args.partitions),
        "--metrics-port",
        str(port),
        "--conf",
        "spark.ui.enabled=false",
        # The store's home stays CHK/state; `--snapshot-every` shortens its delta chains.
        "--state",
        f"files:{chk}/state?snapshot_every={args.snapshot_every}",
    ]
    if not inp.startswith("kafka://"):
        cmd += ["--max-files-per-trigger", "1"]
    if args.compact_every:
        cmd += ["--compact-every", str(args.compact_every)]
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    env.setdefault("SESSIONIZE_SPARK_MASTER", "local[2]")
    log = open(work / "stream.log", "w")  # noqa: SIM115 - open for the life of the stream
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env)
    samples: list[dict] = []
    durations: list[float] = []
    try:
        last, seen_sum, seen_count = -1, 0.0, 0.0
        while last + 1 < args.batches:
            if proc.poll() is not None:
                tail = (work / "stream.log").read_text()[-3000:]
                raise SystemExit(f"the stream ended early:\n{tail}")
            try:
                m = scrape(port)
            except OSError:
                time.sleep(0.5)
                continue
            last = int(m.get("sessionize_last_batch_id", -1))
            # Two batches ahead: two files, or two chunks of records on the topic.
            behind = m.get("sessionize_input_unread_files", m.get("sessionize_input_lag_records"))
            if behind is not None and behind < 2 * feeder.unit:
                feeder.feed()
            total = m.get("sessionize_batch_duration_seconds_sum", 0.0)
            count = m.get("sessionize_batch_duration_seconds_count", 0.0)
            if count > seen_count:
                durations.append((total - seen_sum) / (count - seen_count))
                seen_sum, seen_count = total, count
            if last + 1 >= (len(samples) + 1) * args.every:
                samples.append(sample(last + 1, proc.pid, chk, out, durations))
                durations = []
                print(json.dumps(samples[-1]), flush=True)
            time.sleep(0.2)
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=120)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()
    return samples, judge(samples, args.warmup)


def sample(batches: int, driver: int, chk: Path, out: Path, durations: list[float]) -> dict:
    ck_kb, ck_files = tree(chk, ("state", "progress.jsonl"))
    st_kb, st_files = tree(chk / "state")
    log_kb = sum(p.stat().st_size for p in chk.glob("progress.jsonl*")) / 1024
    # a compacted output's OUT/NAME (a symlink) and its views are hard links of the files
    # under _batches and _compacted: counted there, once
    entries = (
        [p for p in out.iterdir() if p.is_dir() and not p.is_symlink() and p.name != "_views"]
        if out.exists()
        else []
    )
    outputs = {p.name: tree(p)[1] for p in entries}
    return {
        "batches": batches,
        **processes(driver),
        "checkpoint_kb": round(ck_kb, 1),
        "checkpoint_files": ck_files,
        "state_kb": round(st_kb, 1),
        "state_files": st_files,
        "progress_log_kb": round(log_kb, 1),
        "output_files": sum(outputs.values()),
        **{f"{k}_files": v for k, v in outputs.items()},
        "batch_s": round(sum(durations) / len(durations), 3) if durations else None,
    }


def judge(samples: list[dict], warmup: float) -> dict[str, float]:
    """The slope per batch of every sampled number, after the first `warmup` share."""
    start = samples[-1]["batches"] * warmup
    kept = [s for s in samples if s["batches"] >= start] or samples
    keys = dict.fromkeys(k for s in kept for k, v in s.items() if isinstance(v, int | float))
    keys.pop("batches", None)
    slopes = {}
    for k in keys:
        # A number some samples lack (jcmd not answering) is judged on those that have it.
        has = [s for s in kept if isinstance(s.get(k), int | float)]
        if len(has) >= 2:
            slopes[k] = slope([float(s["batches"]) for s in has], [float(s[k]) for s in has])
    return slopes


def plot(samples: list[dict], slopes: dict[str, float], path: str, warmup: float) -> None:
    """Each sampled number against the batch number, one panel each, with its slope (the
    part before the warm-up's end shaded), as a PNG for the benchmark page."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    keys = list(slopes)
    cols = 4
    rows = -(-len(keys) // cols)
    fig = Figure(figsize=(4 * cols, 2.6 * rows), layout="constrained")
    FigureCanvasAgg(fig)
    xs = [s["batches"] for s in samples]
    start = xs[-1] * warmup
    for i, key in enumerate(keys):
        ax = fig.add_subplot(rows, cols, i + 1)
        ax.plot(xs, [s.get(key) or 0 for s in samples], marker=".", color="tab:blue")
        ax.axvspan(0, start, color="0.92")
        mark = " GROWS" if key in FLAT and slopes[key] > FLAT[key] else ""
        ax.set_title(f"{key}: {slopes[key]:+.3g}/batch{mark}", fontsize=9)
        ax.tick_params(labelsize=8)
        ax.set_xlabel("batch", fontsize=8)
    fig.suptitle(f"soak: {xs[-1]} batches, sampled every {xs[0]} (shaded: warm-up)")
    fig.savefig(path, dpi=90)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batches", type=int, default=2000)
    ap.add_argument("--every", type=int, default=50, help="batches between samples")
    ap.add_argument("--input", help="kafka://HOST:PORT/TOPIC (default: a file tree)")
    ap.add_argument("--events", type=int, default=200, help="events per batch")
    ap.add_argument("--users", type=int, default=USERS_DEFAULT)
    ap.add_argument("--sim-seconds", type=int, default=30, help="simulated time per batch")
    ap.add_argument("--trigger", default="200ms")
    ap.add_argument("--partitions", type=int, default=2)
    ap.add_argument(
        "--snapshot-every",
        type=int,
        default=50,
        help="the files store's longest delta chain (state kept: retained + this)",
    )
    ap.add_argument("--warmup", type=float, default=0.25, help="share of batches left out")
    ap.add_argument("--json", help="write the samples and slopes here")
    ap.add_argument("--keep", help="work directory to keep (default: a temporary one)")
    ap.add_argument("--plot", metavar="FILE.png", help="draw every sampled number per batch")
    ap.add_argument("--compact-every", type=int, help="the stream compacts its outputs every N")
    args = ap.parse_args()
    if args.keep:
        work = Path(args.keep)
        work.mkdir(parents=True, exist_ok=True)
        samples, slopes = run(args, work)
    else:
        with tempfile.TemporaryDirectory(prefix="sessionize-soak-") as tmp:
            samples, slopes = run(args, Path(tmp))
    failed = {k: v for k, v in slopes.items() if k in FLAT and v > FLAT[k]}
    if "driver_jvm_heap_kb" not in slopes:
        print(
            "driver_jvm_heap_kb not sampled: `jcmd` (part of the JDK) was not found or did "
            "not answer (Debian: apt-get install openjdk-17-jdk-headless)"
        )
    print(
        f"load {os.getloadavg()[0]:.2f}; slopes per batch over the last "
        f"{1 - args.warmup:.0%} of {samples[-1]['batches']} batches:"
    )
    for key, value in slopes.items():
        limit = f"(limit {FLAT[key]:g})" if key in FLAT else ""
        mark = "GROWS " if key in failed else ""
        print(f"  {mark}{key:24s} {value:+12.4f} {limit}")
    if args.json:
        doc = {
            "benchmark": "soak",
            "load": list(os.getloadavg()),
            "args": vars(args),
            "samples": samples,
            "slopes": slopes,
            "grows": sorted(failed),
        }
        Path(args.json).write_text(json.dumps(doc, indent=1) + "\n")
    if args.plot:
        plot(samples, slopes, args.plot, args.warmup)
    if failed:
        print(f"grows where it should be flat: {', '.join(sorted(failed))}")
        sys.exit(1)


if __name__ == "__main__":
    main()
