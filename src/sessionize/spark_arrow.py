"""Arrow tables into and out of Spark on every supported line (`spark_version`).

PySpark 4.0 takes a `pyarrow.Table` in `createDataFrame` and gives one back with
`DataFrame.toArrow`; PySpark 3.5 has neither, so there the table goes in through pandas with
its schema given, and comes back as the Arrow batches Spark collects (what `toPandas` reads).
"""

from __future__ import annotations

import pyarrow as pa

from sessionize import spark_version


def frame_of(spark, table: pa.Table):
    """`table` as a DataFrame of `spark`, its column types kept.

    Example:
        >>> frame_of(spark, pa.table({"p": [0, 2]})).count()
        2
    """
    if spark_version.has("arrow_frames"):
        return spark.createDataFrame(table)
    from pyspark.sql.pandas.types import from_arrow_schema

    return spark.createDataFrame(table.to_pandas(), schema=from_arrow_schema(table.schema))


def arrow_of(df) -> pa.Table:
    """The rows of `df`, collected as one Arrow table.

    Example:
        >>> arrow_of(spark.range(3)).num_rows
        3
    """
    if spark_version.has("arrow_frames"):
        return df.toArrow()
    from pyspark.sql.pandas.types import to_arrow_schema

    schema = to_arrow_schema(df.schema)
    return pa.Table.from_batches(df._collect_as_arrow(), schema=schema)
