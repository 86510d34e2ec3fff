"""Spark's own jobs over the benchmark input, written the way a Spark user writes them.

A user reads the hourly tree with Spark's JSON reader and a schema (`spark.read.schema(S)
.json(...)`, `spark.readStream.schema(S).option("maxFilesPerTrigger", N).json(...)`), keeps
the rows that have the required fields, and for sessions adds `dropDuplicatesWithinWatermark`
and `session_window`. The peers run in a SparkSession as a user builds one: Spark's own
settings but for the master, the driver's memory and the shuffle partitions that every
contender shares; none of sessionize's (its driver JVM's compile thresholds, its class
archive, its Arrow batch size), which only `sessionize` commands get.

`exact=True` is the second, named variant (`stateless-exact`, `session-window-*-exact`):
the same jobs over sessionize's validating parse on Spark's expressions
(`parsing.parse_exact`), which checks every field's type and names what is wrong.
"""

from __future__ import annotations

from dataclasses import dataclass

# The event contract's fields a sessions job reads (docs/design.md, "Events").
EVENT_SCHEMA = (
    "user_id BIGINT, event_time TIMESTAMP, action STRING, "
    "page STRUCT<current: STRING, previous: STRING>, "
    "source STRUCT<site: STRING, api_version: STRING>, "
    "technical STRUCT<browser: STRING, lang: STRING, device: STRUCT<type: STRING>>"
)
PROVIDERS = {
    "hdfs": "org.apache.spark.sql.execution.streaming.state.HDFSBackedStateStoreProvider",
    "rocksdb": "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider",
}


@dataclass(frozen=True)
class Peer:
    """A peer contender by name: `stateless`, `session-window-hdfs|rocksdb`, each with an
    `-exact` variant."""

    kind: str  # stateless | session-window
    provider: str | None  # the state store of a session-window peer
    exact: bool


def peer_of(name: str) -> Peer | None:
    """The peer a contender's name denotes, or None for one of sessionize's.

    >>> peer_of("session-window-hdfs-exact")
    Peer(kind='session-window', provider='hdfs', exact=True)
    """
    exact = name.endswith("-exact")
    base = name.removesuffix("-exact")
    if base == "stateless":
        return Peer("stateless", None, exact)
    if base.startswith("session-window-") and base.split("-")[-1] in PROVIDERS:
        return Peer("session-window", base.split("-")[-1], exact)
    return None


def plain_spark(name: str, partitions: int):
    """A SparkSession as a user's job builds it, up and warm (its start is not timed)."""
    import os
    import sys

    from pyspark.sql import SparkSession

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)  # the job's venv, as on a cluster
    spark = (
        SparkSession.builder.appName(f"bench-{name}")
        .master(os.environ.get("SESSIONIZE_SPARK_MASTER", "local[2]"))
        .config("spark.driver.memory", "2g")
        .config("spark.sql.shuffle.partitions", str(partitions))
        .config("spark.ui.enabled", "false")
        .config("spark.sql.session.timeZone", "UTC")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    spark.range(1).count()
    return spark


def _events(frame):
    """The rows with the required fields, flattened as the sessions job reads them."""
    from pyspark.sql import functions as F

    return frame.where(
        F.col("user_id").isNotNull()
        & F.col("event_time").isNotNull()
        & F.col("page.current").isNotNull()
    ).select(
        "user_id",
        "event_time",
        F.coalesce("action", F.lit("view")).alias("action"),
        F.col("page.current").alias("page"),
        F.col("source.site").alias("site"),
        F.col("technical.browser").alias("browser"),
    )


def _exact_events(frame):
    from pyspark.sql import functions as F

    from sessionize.parsing import parse_exact

    return parse_exact(frame).where(F.col("reason").isNull())


def stateless(spark, inp: str, work: str, exact: bool = False) -> int:
    """Read, parse, keep the valid events, write them as Parquet: one batch job. Returns
    the lines read."""
    if exact:
        from sessionize.sources.files import file_batch

        events = _exact_events(file_batch(spark, [inp]))
    else:
        events = _events(spark.read.schema(EVENT_SCHEMA).json(inp))
    events.write.mode("overwrite").parquet(f"{work}/out")
    return spark.read.text(inp, recursiveFileLookup=True).count()


def session_window_stream(
    spark, provider: str, inp: str, work: str, files: int | None, exact: bool = False
) -> tuple[int, int]:
    """Spark's streaming `session_window` over the valid events, duplicates dropped within
    the watermark, on the state store `provider` (`hdfs`, `rocksdb`); returns the lines read
    and the micro-batches run."""

    spark.conf.set("spark.sql.streaming.stateStore.providerClass", PROVIDERS[provider])
    options = {"maxFilesPerTrigger": str(files)} if files else {}
    if exact:
        from sessionize.sources.files import file_stream

        events = _exact_events(file_stream(spark, inp, options))
    else:
        events = _events(spark.readStream.schema(EVENT_SCHEMA).options(**options).json(inp))
    query = session_window_query(events, work, availableNow=True)
    query.awaitTermination()
    batches = len({_of(p, "batchId") for p in query.recentProgress if _of(p, "numInputRows")})
    return spark.read.text(inp, recursiveFileLookup=True).count(), batches


def session_window_query(events, work: str, **trigger):
    """Spark's streaming `session_window` over `events` as users write it (a 10-minute gap
    and watermark, duplicates dropped within the watermark, an event count per window),
    into Parquet under `work/out` in append mode, started with `trigger` (the keywords of
    `DataStreamWriter.trigger`)."""
    from pyspark.sql import functions as F

    sessions = (
        events.withWatermark("event_time", "10 minutes")
        .dropDuplicatesWithinWatermark(["user_id", "event_time", "page"])
        .groupBy("user_id", F.session_window("event_time", "10 minutes").alias("w"))
        .agg(F.count(F.lit(1)).alias("event_count"))
    )
    return (
        sessions.writeStream.format("parquet")
        .option("path", f"{work}/out")
        .option("checkpointLocation", f"{work}/chk")
        .outputMode("append")
        .trigger(**trigger)
        .start()
    )


def _of(progress, name: str):
    """A field of a query's progress: a dict on PySpark 3.5, an object from 4.0 on."""
    return progress[name] if isinstance(progress, dict) else getattr(progress, name)
