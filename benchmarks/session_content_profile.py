"""Where the cost of reading the page URL, referrer and user agent goes, per mapping of
`session_content.py --job` (plain schema 1; schema 1 reading the three fields; schema 3).

    .venv/bin/python benchmarks/session_content_profile.py [--hours 2 --users 6000
        --events-per-hour 100000]
    .venv/bin/python benchmarks/session_content_profile.py --split [...]

The default runs one `sessionize batch` job per mapping after a warm-up job of each, in
one Spark session with its UI on a free port, and prints the CPU seconds of the driver's
Python, the JVM and the Python workers (from /proc), each kind of stage's CPU and bytes
(Spark's REST API: what the shuffle wrote) and the state's bytes on disk.

`--split` runs the Python side of the same jobs in this process, without Spark, the
best of three: the reading task's block reader (`events.blocks.read_block`), the packing
of its rows by partition and their unpacking (`events.packing`), the session logic
(`logic.advance`, hour after hour over the state it leaves) and the state's Parquet
encoding, with the bytes packed and the state's size.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import shutil
import tempfile
import time
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from urllib.request import urlopen

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from bench_common import descendants, input_config, process_stats, write_input

from sessionize.config import SessionRules
from sessionize.content import Conversion, SessionContent
from sessionize.events import blocks
from sessionize.events.packing import PACKED, pack, unpack
from sessionize.logic import advance
from sessionize.mapping import EventMapping
from sessionize.schema import layout

WEB_FIELDS = {"url": "page.url", "referrer": "page.referrer", "user_agent": "technical.user_agent"}
CONTENT = SessionContent(ping_action="ping", conversions=(Conversion("purchase", "purchase"),))
MAPPINGS = {
    "plain": EventMapping(session_columns=1),
    "fields": EventMapping(**WEB_FIELDS, session_columns=1),
    "schema 3": EventMapping(**WEB_FIELDS, session_columns=3, content=CONTENT),
}
HALF_HOUR_US = 1_800_000_000


def cpu_split(stats: dict[int, list[str]]) -> dict[str, float]:
    """CPU seconds so far of this process (the driver's Python), the Spark JVM and the
    Python workers below it (exited ones through their parents' counts), from /proc."""
    tick = os.sysconf("SC_CLK_TCK")

    def own(pid: int) -> float:
        return sum(int(x) for x in stats[pid][11:13]) / tick

    def reaped(pid: int) -> float:
        return sum(int(x) for x in stats[pid][13:15]) / tick

    me = os.getpid()
    out = {"driver python": own(me), "jvm": 0.0, "python workers": 0.0}
    for pid in descendants(me, stats):
        java = int(stats[pid][1]) == me
        if java:
            out["jvm"] += own(pid)
            out["python workers"] += reaped(pid)
        else:
            out["python workers"] += own(pid)
    return out


def stage_metrics(spark) -> dict[int, dict[str, float]]:
    """Per finished stage of this session: its name, tasks' CPU and the bytes it read,
    shuffled and wrote (Spark's REST API of the session's UI)."""
    sc = spark.sparkContext
    url = f"{sc.uiWebUrl}/api/v1/applications/{sc.applicationId}/stages?status=complete"
    with urlopen(url) as reply:
        stages = json.load(reply)
    return {
        s["stageId"] * 1000 + s["attemptId"]: {
            "name": s["name"].split(" at ")[0],
            "cpu s": s["executorCpuTime"] / 1e9,
            "run s": s["executorRunTime"] / 1e3,
            "input bytes": s["inputBytes"],
            "shuffle write bytes": s["shuffleWriteBytes"],
            "shuffle write records": s["shuffleWriteRecords"],
            "shuffle read bytes": s["shuffleReadBytes"],
            "output bytes": s["outputBytes"],
        }
        for s in stages
    }


def profile(args: argparse.Namespace) -> None:
    """One job per mapping after a warm-up of each: where its CPU goes (the driver's
    Python, the JVM, the Python workers), its stages' CPU and bytes (Spark's metrics), and
    the state's bytes on disk after the run."""
    from sessionize import spark_session
    from sessionize.commands.batch import BatchOptions, run_batch

    root = Path(tempfile.mkdtemp(prefix="sessionize-content-profile-"))
    try:
        cfg = replace(input_config(args), web_data=True)
        write_input(cfg, str(root / "in"))
        # the UI on a free port: its REST API serves the stages' metrics
        spark = spark_session.get_spark(
            "bench-content-profile",
            shuffle_partitions=2,
            conf={"spark.ui.enabled": "true", "spark.ui.port": "0"},
        )
        spark.range(1).count()
        first = datetime(2026, 11, 1, tzinfo=UTC)
        last = datetime(2026, 11, 1, args.hours - 1, tzinfo=UTC)
        for i in range(2):
            for name, mapping in MAPPINGS.items():
                out = root / f"out-{i}-{name.replace(' ', '')}"
                opts = BatchOptions(
                    input=str(root / "in"),
                    output=str(out),
                    start=first,
                    end=last,
                    partitions=2,
                    mapping=mapping,
                )
                before_stages, before_cpu = stage_metrics(spark), cpu_split(process_stats())
                run_batch(opts, spark, lambda _: None)
                after_cpu = cpu_split(process_stats())
                stages = {k: v for k, v in stage_metrics(spark).items() if k not in before_stages}
                state = sum(f.stat().st_size for f in (out / "_state").rglob("*") if f.is_file())
                if i == 0:
                    shutil.rmtree(out, ignore_errors=True)
                    continue
                print(f"== {name}: state on disk {state:,} bytes")
                print(
                    "   CPU s: "
                    + ", ".join(f"{k} {after_cpu[k] - before_cpu[k]:.2f}" for k in after_cpu)
                )
                by_name: dict[str, dict[str, float]] = {}
                for s in stages.values():
                    acc = by_name.setdefault(s["name"], {"stages": 0})
                    acc["stages"] += 1
                    for k, v in s.items():
                        if k != "name":
                            acc[k] = acc.get(k, 0) + v
                for stage, acc in sorted(by_name.items(), key=lambda kv: -kv[1]["cpu s"]):
                    print(
                        f"   {stage}: "
                        + ", ".join(
                            f"{k} {v:,.2f}" if isinstance(v, float) else f"{k} {v:,}"
                            for k, v in acc.items()
                        )
                    )
                shutil.rmtree(out, ignore_errors=True)
    finally:
        shutil.rmtree(root, ignore_errors=True)


def hours_of(root: Path) -> list[list[str]]:
    """The generated lines of each hour folder, in order."""
    out: dict[str, list[str]] = {}
    for path in sorted(root.rglob("*")):
        if path.is_file() and not path.name.startswith(("_", ".")):
            out.setdefault(path.parent.name, []).extend(path.read_text().splitlines())
    return [out[k] for k in sorted(out)]


def packed_rows(parts: list[pa.RecordBatch], keys: pa.Array, lay) -> pa.Table:
    """`parts` packed by partition as the reading task packs them (`events.reading`)."""
    every = pa.array([True] * max(p.num_rows for p in parts))
    out = pack(
        iter(parts), keys, "user_id", lambda b: every[: b.num_rows], lay.event.names, lay.mapped
    )
    return pa.Table.from_batches(list(out))


def split(args: argparse.Namespace) -> None:
    """The Python side of each mapping's job, part by part (see the module doc)."""
    root = Path(tempfile.mkdtemp(prefix="sessionize-content-split-"))
    try:
        cfg = replace(input_config(args), web_data=True)
        write_input(cfg, str(root / "in"))
        hours = hours_of(root / "in")
        keys = pa.array([0, 1], pa.int64())  # two partitions
        best: dict[str, dict[str, float]] = {}
        sizes: dict[str, tuple[int, int]] = {}
        for _ in range(3):
            for name, m in MAPPINGS.items():
                p, lay = blocks.plan(m), layout(m)
                took = dict.fromkeys(("read", "pack", "unpack", "logic", "state"), 0.0)
                state, watermark, packed, stored = lay.state.empty_table(), None, 0, 0

                def timed(part: str, f, *a, took=took, **k):
                    t0 = time.process_time()
                    out = f(*a, **k)
                    took[part] += time.process_time() - t0
                    return out

                for lines in hours:
                    parts = []
                    for i in range(0, len(lines), 10_000):
                        chunk = lines[i : i + 10_000]
                        batch = pa.record_batch(
                            {
                                "value": pa.array(chunk, pa.string()),
                                "error": pa.nulls(len(chunk), pa.string()),
                                "source": pa.array(["f"] * len(chunk)),
                            }
                        )
                        out = timed("read", blocks.read_block, batch, p)
                        valid = pc.and_(pc.is_null(out["reason"]), pc.invert(out[blocks.EXACT]))
                        parts.append(out.filter(valid).select(lay.event.names))
                    rows = timed("pack", packed_rows, parts, keys, lay)
                    packed += rows.column(PACKED).nbytes
                    events = timed("unpack", unpack, rows)
                    latest = pc.max(events["event_time"]).cast(pa.int64()).as_py()
                    after = latest - HALF_HOUR_US
                    res = timed(
                        "logic",
                        advance,
                        state,
                        events,
                        rules=SessionRules(),
                        watermark_before=watermark,
                        watermark_after=after,
                        layout=lay,
                    )
                    watermark = after
                    gone = pa.concat_arrays(
                        [
                            res.state_removes.cast(pa.int64()),
                            pc.unique(res.state_puts["user_id"].combine_chunks()),
                        ]
                    )
                    kept = state.filter(pc.invert(pc.is_in(state["user_id"], value_set=gone)))
                    puts = res.state_puts.select(state.column_names).cast(state.schema)
                    state = pa.concat_tables([kept, puts])
                    sink = io.BytesIO()
                    timed("state", pq.write_table, state, sink)
                    stored += len(sink.getvalue())
                mine = best.setdefault(name, dict(took))
                for part, seconds in took.items():
                    mine[part] = min(mine[part], seconds)
                sizes[name] = (packed, stored)
        for name, took in best.items():
            print(
                f"{name}: "
                + ", ".join(f"{part} {s:.2f}" for part, s in took.items())
                + f"; total {sum(took.values()):.2f} CPU s; packed {sizes[name][0]:,} bytes, "
                f"state {sizes[name][1]:,} bytes (Parquet, summed over the hours)"
            )
    finally:
        shutil.rmtree(root, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--users", type=int, default=6000)
    parser.add_argument("--hours", type=int, default=2)
    parser.add_argument("--events-per-hour", type=int, default=100_000)
    parser.add_argument("--split", action="store_true", help="the Python side, part by part")
    args = parser.parse_args()
    print(f"load average {os.getloadavg()[0]:.1f}", flush=True)
    split(args) if args.split else profile(args)
    print(f"load average {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
