"""Read + parse + count of one input tree with Spark's `text` format vs the file source.

    python benchmarks/file_reader.py INPUT [--repeat 2]

Both read every file of INPUT in one batch job, parse every line (`parsing.parse`) and
count the valid ones; each is timed after one warm-up, in the same SparkSession, and the
ratio is printed. Generate INPUT with e.g. `sessionize generate --output INPUT --hours 6
--users 15000 --events-per-hour 170000 --files-per-hour 5` (about a million lines).
"""

from __future__ import annotations

import argparse
import time

from pyspark.sql import functions as F

from sessionize.parsing import parse
from sessionize.sources.files import file_batch
from sessionize.spark_session import get_spark


def _text(spark, path):
    df = spark.read.format("text").option("recursiveFileLookup", "true").load(path)
    return df.select(
        "value",
        F.lit(None).cast("string").alias("error"),
        F.col("_metadata.file_path").alias("source"),
    )


def _count(raw) -> tuple[int, int]:
    row = parse(raw).agg(F.count(F.lit(1)), F.count_if(F.col("reason").isNull())).collect()[0]
    return row[0], row[1]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("input")
    ap.add_argument("--repeat", type=int, default=2)
    args = ap.parse_args()
    spark = get_spark("file-reader-bench", shuffle_partitions=2)
    readers = {
        "text": lambda: _text(spark, args.input),
        "files": lambda: file_batch(spark, [args.input]),
    }
    best = {}
    for name, make in readers.items():
        _count(make())  # warm-up: JIT, Python workers
        times = []
        for _ in range(args.repeat):
            t0 = time.perf_counter()
            counts = _count(make())
            times.append(time.perf_counter() - t0)
        best[name] = min(times)
        print(
            f"{name}: {counts[0]:,} lines, {counts[1]:,} valid, best {best[name]:.2f}s "
            f"({counts[0] / best[name]:,.0f} lines/s)"
        )
    print(f"files / text time ratio: {best['files'] / best['text']:.2f}")


if __name__ == "__main__":
    main()
