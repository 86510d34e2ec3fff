"""Per-core figures for docs/scaling.md: Spark's parsing of JSON lines on one core
(local[1], written to the `noop` sink) and the session logic (`logic.advance`) on one
core in this process, over the same generated events.

    .venv/bin/python benchmarks/cluster_figures.py [--events-per-hour N] [--hours H]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

import pyarrow.compute as pc
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from sessionize.config import SessionRules
from sessionize.generate.writer import GeneratorConfig, write_files
from sessionize.logic import advance
from sessionize.parsing import event_columns, parse
from sessionize.schema import layout


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--events-per-hour", type=int, default=50_000)
    ap.add_argument("--hours", type=int, default=2)
    args = ap.parse_args()
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ["PYSPARK_PYTHON"] = sys.executable
    root = Path(tempfile.mkdtemp(prefix="sessionize-figures-"))
    cfg = GeneratorConfig(
        start=datetime(2026, 11, 1, tzinfo=UTC),
        hours=args.hours,
        users=20_000,
        events_per_hour=args.events_per_hour,
        seed=3,
        duplicate_rate=0.01,
        late_rate=0.0,
        invalid_rate=0.001,
        close_rate=0.1,
        files_per_hour=2,
    )
    write_files(cfg, str(root / "in"))
    spark = (
        SparkSession.builder.master("local[1]")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.session.timeZone", "UTC")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    raw = spark.read.text(str(root / "in"), recursiveFileLookup=True).select(
        "value", F.lit(None).cast("string").alias("error"), F.lit("f").alias("source")
    )
    n = raw.count()
    parsed = parse(raw)
    parsed.write.format("noop").mode("overwrite").save()  # warm-up
    t0 = time.perf_counter()
    parsed.write.format("noop").mode("overwrite").save()
    t_parse = time.perf_counter() - t0
    lay = layout()
    events = parsed.where("reason is null").select(*event_columns(None)).toArrow()
    events = events.cast(lay.stored.remove(lay.stored.get_field_index("expires_at")))
    rules = SessionRules()
    wm = pc.max(events["event_time"]).value - rules.lateness_us
    state = lay.state.empty_table()
    advance(
        state,
        events.slice(0, 1000),
        rules=rules,
        watermark_before=None,
        watermark_after=wm,
        layout=lay,
    )
    t0 = time.perf_counter()
    step = advance(
        state, events, rules=rules, watermark_before=None, watermark_after=wm, layout=lay
    )
    t_logic = time.perf_counter() - t0
    print(
        f"lines {n:,}; parse on 1 core {n / t_parse:,.0f} lines/s ({t_parse:.2f}s); "
        f"session logic on 1 core {events.num_rows / t_logic:,.0f} events/s "
        f"({t_logic:.2f}s, {step.sessions.num_rows:,} sessions, "
        f"{step.state_puts.num_rows:,} open-state rows, "
        f"{step.state_puts.nbytes / max(1, step.state_puts.num_rows):.0f} B/row in memory)"
    )
    spark.stop()


if __name__ == "__main__":
    main()
