"""The parse alone, lines per second per core: the block reader against Spark's expressions.

    .venv/bin/python benchmarks/parse_speed.py [INPUT] [--lines 200000] [--repeat 2]

Without INPUT, generates one hour of the `throughput.py` default input (172k events, 5
files). Then, in one run, alternating:

- `blocks`: `events.blocks.read_block` in this process over the lines as the file source
  yields them (`sources.lines.decode_file`), timed by this process's CPU time (one core,
  whatever else runs); the lines it leaves to the exact path are counted;
- `spark`: a one-core Spark (`local[1]`) counting the valid events of `parsing.parse_exact`
  (every line through Spark's expressions: the parse before the block reader, and Spark's
  own `from_json`), warm, best wall time;
- `spark-blocks`: the same Spark counting the valid events of `parsing.parse` (the parse in
  use: the block reader in a Python task, `mapInArrow`, the lines it leaves to the exact
  path decided by Spark's expressions in the same projection).

Prints each figure with the load average at the time, then the ratio.
"""

from __future__ import annotations

import argparse
import glob
import os
import tempfile
import time

import pyarrow as pa

MAX_FUTURE_US = 86_400_000_000
NOW_US = 1 << 62


def _load() -> str:
    return " ".join(f"{x:.1f}" for x in os.getloadavg())


def _batches(root: str, limit: int) -> list[pa.RecordBatch]:
    from sessionize.sources.lines import decode_file

    out: list[pa.RecordBatch] = []
    n = 0
    for path in sorted(glob.glob(f"{root}/**/*.json", recursive=True)):
        for batch in decode_file(path):
            out.append(batch.slice(0, limit - n))
            n += len(out[-1])
            if n >= limit:
                return out
    return out


def blocks_rate(batches: list[pa.RecordBatch]) -> tuple[float, int, int]:
    """(lines/s of CPU time, valid events, lines left to the exact path)."""
    from sessionize.events import blocks

    plan = blocks.plan(None)
    lines = sum(len(b) for b in batches)
    t0 = time.process_time()
    valid = exact = 0
    for b in batches:
        out = blocks.read_block(b, plan, NOW_US, MAX_FUTURE_US)
        flags = out.column(blocks.EXACT).to_numpy(zero_copy_only=False)
        exact += int(flags.sum())
        valid += out.column("reason").null_count - int(flags.sum())
    return lines / (time.process_time() - t0), valid, exact


def spark_session():
    from sessionize.spark_session import get_spark

    spark = get_spark(
        "parse-speed",
        master="local[1]",
        shuffle_partitions=1,
        conf={"spark.ui.showConsoleProgress": "false"},
    )
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def spark_rate(spark, raw, lines: int) -> tuple[float, int]:
    from pyspark.sql import functions as F

    from sessionize.parsing import parse_exact

    t0 = time.perf_counter()
    valid = (
        parse_exact(raw, now=F.current_timestamp(), max_future_us=MAX_FUTURE_US)
        .where("reason is null")
        .count()
    )
    return lines / (time.perf_counter() - t0), valid


def spark_blocks_rate(spark, raw, lines: int) -> tuple[float, int]:
    from sessionize.parsing import parse

    t0 = time.perf_counter()
    now_us = int(time.time() * 1_000_000)
    parsed = parse(raw, now=now_us, max_future_us=MAX_FUTURE_US)
    valid = parsed.where("reason is null").count()
    return lines / (time.perf_counter() - t0), valid


def default_input(prefix: str, events: int = 172_000) -> str:
    """The benchmarks' default input, one hour of `events` events (172k), in a new temporary
    directory."""
    from bench_common import input_config, write_input

    root = tempfile.mkdtemp(prefix=prefix)
    ns = argparse.Namespace(hours=1, users=15_000, events_per_hour=events, files_per_hour=5)
    write_input(input_config(ns), root)
    return root


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("input", nargs="?")
    ap.add_argument("--lines", type=int, default=200_000)
    ap.add_argument("--repeat", type=int, default=2)
    args = ap.parse_args()
    root = args.input or default_input("parse-speed-")
    batches = _batches(root, args.lines)
    lines = sum(len(b) for b in batches)
    print(f"{lines:,} lines (load {_load()})", flush=True)
    spark = spark_session()
    raw = spark.createDataFrame(pa.Table.from_batches(batches)).repartition(1).cache()
    raw.count()
    spark_rate(spark, raw, lines)  # warm up
    spark_blocks_rate(spark, raw, lines)
    best = {"blocks": 0.0, "spark": 0.0, "spark-blocks": 0.0}
    for _ in range(args.repeat):
        rate, valid, exact = blocks_rate(batches)
        best["blocks"] = max(best["blocks"], rate)
        print(
            f"  blocks (CPU): {rate:,.0f} lines/s, {valid:,} valid, {exact:,} left to the "
            f"exact path (load {_load()})",
            flush=True,
        )
        rate, valid = spark_rate(spark, raw, lines)
        best["spark"] = max(best["spark"], rate)
        print(
            f"  spark local[1]: {rate:,.0f} lines/s, {valid:,} valid (load {_load()})", flush=True
        )
        rate, valid = spark_blocks_rate(spark, raw, lines)
        best["spark-blocks"] = max(best["spark-blocks"], rate)
        print(
            f"  spark-blocks local[1]: {rate:,.0f} lines/s, {valid:,} valid (load {_load()})",
            flush=True,
        )
    spark.stop()
    for name, rate in best.items():
        print(f"{name}: {rate:,.0f} lines/s")
    print(f"blocks / spark: {best['blocks'] / best['spark']:.2f}")
    print(f"spark-blocks / spark: {best['spark-blocks'] / best['spark']:.2f}")


if __name__ == "__main__":
    main()
