"""A streaming query in its own process, for tests that kill it with SIGKILL.

    python query_process.py kafka|kinesis URI ROOT OPTIONS_JSON

Reads the source into an exactly-once Parquet sink (ROOT/out, checkpoint ROOT/checkpoint)
with a 1-second processing-time trigger, until killed.
"""

from __future__ import annotations

import json
import os
import sys


def main() -> None:
    kind, uri, root, options = sys.argv[1], sys.argv[2], sys.argv[3], json.loads(sys.argv[4])
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ["PYSPARK_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    spark = (
        SparkSession.builder.master("local[2]")
        .appName("sessionize-kill-test")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.session.timeZone", "UTC")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    if kind == "kafka":
        from sessionize.sources.kafka import kafka_stream as stream
    else:
        from sessionize.sources.kinesis import kinesis_stream as stream
    query = (
        stream(spark, uri, options)
        .writeStream.format("parquet")
        .option("path", f"{root}/out")
        .option("checkpointLocation", f"{root}/checkpoint")
        .trigger(processingTime="1 second")
        .start()
    )
    query.awaitTermination()


if __name__ == "__main__":
    main()
