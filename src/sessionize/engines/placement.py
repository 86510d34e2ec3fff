"""Where a user's state lives: Spark's hash partitioning of `user_id` into N partitions.

Everything that places users (the engine's shuffle, its batch marks, `sessionize state
repartition` and `import`) goes through here, so that a user's state is always where the
engine looks for it.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from sessionize.spark_arrow import arrow_of, frame_of


def partition_users(df: DataFrame, partitions: int, key: str = "user_id") -> DataFrame:
    """`df` shuffled into `partitions` partitions by its `key` column (a processor's key)."""
    return df.repartition(partitions, key)


def user_partitions(spark: SparkSession, users: pa.Array, partitions: int) -> np.ndarray:
    """The partition of each of `users` (in their order), as `partition_users` places them."""
    df = frame_of(spark, pa.table({"user_id": users, "i": np.arange(len(users))}))
    placed = partition_users(df, partitions).select("i", F.spark_partition_id().alias("p"))
    table = arrow_of(placed)
    out = np.empty(len(users), dtype=np.int64)
    out[table["i"].to_numpy()] = table["p"].to_numpy()
    return out
