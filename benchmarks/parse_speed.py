"""The parse alone, lines per second per core: the Python reading vs Spark's expressions.

    python benchmarks/parse_speed.py INPUT [--lines 200000] [--repeat 2]

Reads up to `--lines` lines of INPUT (an hourly tree, e.g. `sessionize generate --output
INPUT --hours 1 --users 15000 --events-per-hour 172000`), then, in one run:

- `python`: `events.json_lines.parse_batch` in this process, batches of 10k lines, timed by
  this process's CPU time (one core), next to `orjson.loads` alone on the same lines;
- `spark-jvm` and `spark-python`: a one-core Spark (`local[1]`) counting the valid events of
  `parsing.parse_in_jvm` (every line through Spark's expressions, as before) and of
  `parsing.parse` (the Python reading plus the exact fallback), alternated, best wall time.

Prints each figure with the load average at the time, then the ratios.
"""

from __future__ import annotations

import argparse
import glob
import os
import time

import pyarrow as pa


def _load() -> str:
    return " ".join(f"{x:.1f}" for x in os.getloadavg())


def _lines(root: str, limit: int) -> list[str]:
    out: list[str] = []
    for path in sorted(glob.glob(f"{root}/**/*.json", recursive=True)):
        with open(path, encoding="utf-8") as f:
            out += f.read().splitlines()[: limit - len(out)]
        if len(out) >= limit:
            break
    return out


def decoder_rate(lines: list[str], repeat: int) -> float:
    """The decoder alone, the floor of any reading built on it."""
    import orjson

    best = 0.0
    for _ in range(repeat):
        t0 = time.process_time()
        for line in lines:
            orjson.loads(line)
        best = max(best, len(lines) / (time.process_time() - t0))
    return best


def python_rate(lines: list[str], repeat: int) -> float:
    from sessionize.events import json_lines

    plan = json_lines.plan(None)
    n = 10_000
    batches = [
        pa.RecordBatch.from_pydict(
            {
                "value": lines[i : i + n],
                "error": [None] * len(lines[i : i + n]),
                "source": ["bench"] * len(lines[i : i + n]),
            },
        )  # fmt: skip
        for i in range(0, len(lines), n)
    ]
    best = 0.0
    for _ in range(repeat):
        t0 = time.process_time()
        valid = 0
        for b in batches:
            out = json_lines.parse_batch(b, plan, 1 << 62, 86_400_000_000)
            valid += out.column("reason").null_count
        assert valid == len(lines), f"{len(lines) - valid} lines invalid"
        best = max(best, len(lines) / (time.process_time() - t0))
    return best


def spark_rates(lines: list[str], repeat: int) -> dict[str, float]:
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F

    from sessionize.parsing import parse, parse_in_jvm

    spark = (
        SparkSession.builder.master("local[1]").appName("parse-speed")
        .config("spark.ui.enabled", "false").config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.shuffle.partitions", "1").getOrCreate()
    )  # fmt: skip
    spark.sparkContext.setLogLevel("ERROR")
    table = pa.table({"value": lines, "error": pa.nulls(len(lines), pa.string()),
                      "source": ["bench"] * len(lines)})  # fmt: skip
    raw = spark.createDataFrame(table).repartition(1).cache()
    raw.count()
    parsers = {"spark-jvm": parse_in_jvm, "spark-python": parse}
    best = dict.fromkeys(parsers, 0.0)
    for _ in range(repeat + 1):  # the first round warms up
        for name, parser in parsers.items():
            t0 = time.perf_counter()
            parser(raw, now=F.current_timestamp(), max_future_us=86_400_000_000).where(
                "reason is null"
            ).count()
            rate = len(lines) / (time.perf_counter() - t0)
            best[name] = max(best[name], rate)
            print(f"  {name}: {rate:,.0f} lines/s (load {_load()})", flush=True)
    spark.stop()
    return best


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("input")
    ap.add_argument("--lines", type=int, default=200_000)
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--no-spark", action="store_true")
    args = ap.parse_args()
    lines = _lines(args.input, args.lines)
    size = sum(len(s) for s in lines) / max(len(lines), 1)
    print(f"{len(lines):,} lines, {size:.0f} characters each")
    rates = {"orjson-alone": decoder_rate(lines, args.repeat)}
    print(f"orjson.loads alone (CPU time): {rates['orjson-alone']:,.0f} lines/s (load {_load()})")
    rates["python"] = python_rate(lines, args.repeat)
    print(f"python (CPU time): {rates['python']:,.0f} lines/s per core (load {_load()})")
    print(f"python / orjson.loads alone: {rates['python'] / rates['orjson-alone']:.2f}")
    if not args.no_spark:
        rates.update(spark_rates(lines, args.repeat))
        print(f"spark-python / spark-jvm: {rates['spark-python'] / rates['spark-jvm']:.2f}")
    for name, rate in rates.items():
        print(f"{name}: {rate:,.0f} lines/s")


if __name__ == "__main__":
    main()
