"""Arrow tables into and out of Spark on every supported line (`spark_version`).

PySpark 4.0 takes a `pyarrow.Table` in `createDataFrame` and gives one back with
`DataFrame.toArrow`; PySpark 3.5 has neither, so there the table goes in as rows with its
schema given, and comes back as the Arrow batches Spark collects (what `toPandas` reads).
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

    # As rows: pandas would turn an integer column with nulls into floats, which Spark 3.5's
    # conversion refuses for a long column.
    return spark.createDataFrame(table.to_pylist(), schema=from_arrow_schema(table.schema))


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


def arrow_schema(schema, timezone: str) -> pa.Schema:
    """Spark's `schema` as the Arrow schema its Python tasks receive, timestamps in
    `timezone` (the session's): PySpark 4.2's `to_arrow_schema(timezone=)`, which older lines
    lack (their timestamps come out in UTC, here set to `timezone`)."""
    from pyspark.sql.pandas.types import to_arrow_schema

    if spark_version.has("arrow_schema_zone"):
        return to_arrow_schema(schema, timezone=timezone)
    return pa.schema([f.with_type(_in_zone(f.type, timezone)) for f in to_arrow_schema(schema)])


def _in_zone(t: pa.DataType, zone: str) -> pa.DataType:
    if pa.types.is_timestamp(t) and t.tz is not None:
        return pa.timestamp(t.unit, tz=zone)
    if pa.types.is_struct(t):
        return pa.struct([f.with_type(_in_zone(f.type, zone)) for f in t])
    if pa.types.is_list(t):
        return pa.list_(t.value_field.with_type(_in_zone(t.value_type, zone)))
    if pa.types.is_map(t):
        return pa.map_(_in_zone(t.key_type, zone), _in_zone(t.item_type, zone))
    return t
