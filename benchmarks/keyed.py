"""Running totals per customer on Spark, three ways, side by side in one run.

    .venv/bin/python benchmarks/keyed.py [--orders 1000000] [--customers 50000]
        [--files 40] [--files-per-trigger 4] [--partitions 4]

Writes the orders once (JSON lines, `--files` files), then runs each contender in a fresh
process (no JVM or cache carries over), timing from the query's start to its end; every
stream reads `--files-per-trigger` files per micro-batch and writes each batch's changed
totals as Parquet:

- ours: examples/running_totals.py through `stateful.stream` on the store engine, state
  `files` (exactly once: staged and published outputs, job records);
- spark-jvm: Spark's streaming `groupBy(customer_id).agg(count, sum)` in update mode, state
  in Spark's HDFS-backed state store;
- spark-pandas: `applyInPandasWithState`, one Python call per customer and batch, computing
  the same totals (state in the HDFS-backed store).

Prints each one's seconds and orders/s, and its ratio to ours, all measured in this run.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

CONTENDERS = ("ours", "spark-jvm", "spark-pandas")
HDFS = "org.apache.spark.sql.execution.streaming.state.HDFSBackedStateStoreProvider"

# The orders as every contender reads them: Spark's JSON reader with this schema.
COLUMNS = "customer_id long, amount double"


def write_orders(inp: Path, orders: int, customers: int, files: int) -> None:
    rng = np.random.default_rng(7)
    inp.mkdir(parents=True)
    per_file = -(-orders // files)
    for n in range(files):
        count = min(per_file, orders - n * per_file)
        ids = rng.integers(1, customers + 1, count)
        cents = rng.integers(1, 100_000, count)
        path = inp / f"{n:05d}.jsonl"
        with path.open("w") as out:
            for c, a in zip(ids.tolist(), cents.tolist(), strict=True):
                out.write(f'{{"customer_id": {c}, "amount": {a / 100}}}\n')
        os.utime(path, (1_000_000 + n, 1_000_000 + n))  # read in this order


def run_one(name: str, inp: str, work: str, partitions: int, per_trigger: int) -> dict:
    """One contender in this process; returns its seconds and batches."""
    from examples.running_totals import RunningTotals
    from sessionize import stateful
    from sessionize.spark_session import get_spark

    conf = {"spark.sql.streaming.stateStore.providerClass": HDFS}
    spark = get_spark(f"keyed-{name}", shuffle_partitions=partitions, conf=conf)
    spark.range(1).collect()  # the JVM is up before the clock starts
    rows = spark.readStream.schema(COLUMNS).option("maxFilesPerTrigger", per_trigger)
    rows = rows.json(inp)
    out, chk = f"{work}/out", f"{work}/chk"
    start = time.perf_counter()
    if name == "ours":
        run = stateful.start(
            rows,
            RunningTotals(),
            output=out,
            checkpoint=chk,
            state="files",
            partitions=partitions,
            on_batch=lambda line: None,
        )
        batches = len(run.wait())
    else:
        query = (
            _spark_totals(rows, name)
            .writeStream.outputMode("update")
            .foreachBatch(
                lambda df, batch_id: df.write.mode("append").parquet(f"{out}/batch_id={batch_id}")
            )
            .option("checkpointLocation", chk)
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination()
        batches = len(query.recentProgress)
    return {"name": name, "seconds": time.perf_counter() - start, "batches": batches}


def _spark_totals(rows, name: str):
    from pyspark.sql import functions as F

    if name == "spark-jvm":
        return rows.groupBy("customer_id").agg(
            F.count(F.lit(1)).alias("orders"), F.sum("amount").alias("total")
        )
    import pandas as pd
    from pyspark.sql.streaming.state import GroupStateTimeout

    def totals(key, frames, state):
        orders, total = state.get if state.exists else (0, 0.0)
        for frame in frames:
            orders += len(frame)
            total += float(frame["amount"].fillna(0.0).sum())
        state.update((orders, total))
        yield pd.DataFrame({"customer_id": [key[0]], "orders": [orders], "total": [total]})

    return rows.groupBy("customer_id").applyInPandasWithState(
        totals,
        "customer_id long, orders long, total double",
        "orders long, total double",
        "Update",
        GroupStateTimeout.NoTimeout,
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--orders", type=int, default=1_000_000)
    ap.add_argument("--customers", type=int, default=50_000)
    ap.add_argument("--files", type=int, default=40)
    ap.add_argument("--files-per-trigger", type=int, default=4)
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--only", nargs="*", choices=CONTENDERS, default=list(CONTENDERS))
    ap.add_argument("--run", choices=CONTENDERS, help=argparse.SUPPRESS)
    ap.add_argument("--input", help=argparse.SUPPRESS)
    ap.add_argument("--work", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.run:
        result = run_one(args.run, args.input, args.work, args.partitions, args.files_per_trigger)
        print(json.dumps(result))
        return
    with tempfile.TemporaryDirectory(prefix="keyed-bench-") as tmp:
        inp = Path(tmp) / "orders"
        write_orders(inp, args.orders, args.customers, args.files)
        print(
            f"{args.orders:,} orders of {args.customers:,} customers in {args.files} files, "
            f"{args.files_per_trigger} per trigger, {args.partitions} partitions; "
            f"load {os.getloadavg()[0]:.1f}"
        )
        results = []
        for name in args.only:
            env = {
                **os.environ,
                "SESSIONIZE_SPARK_MASTER": os.environ.get("SESSIONIZE_SPARK_MASTER", "local[2]"),
            }
            done = subprocess.run(
                [
                    sys.executable,
                    __file__,
                    "--run",
                    name,
                    "--input",
                    str(inp),
                    "--work",
                    f"{tmp}/{name}",
                    "--partitions",
                    str(args.partitions),
                    "--files-per-trigger",
                    str(args.files_per_trigger),
                ],
                capture_output=True,
                text=True,
                env=env,
                check=False,
            )
            if done.returncode != 0:
                raise SystemExit(f"{name} failed:\n{done.stderr[-4000:]}")
            results.append(json.loads(done.stdout.strip().splitlines()[-1]))
        ours = next((r["seconds"] for r in results if r["name"] == "ours"), None)
        for r in results:
            ratio = f"{r['seconds'] / ours:.2f}x ours" if ours else ""
            print(
                f"{r['name']:>13}: {r['seconds']:7.1f} s  {args.orders / r['seconds']:>10,.0f} "
                f"orders/s  {r['batches']} batches  {ratio}"
            )


if __name__ == "__main__":
    main()
