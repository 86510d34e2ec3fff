"""`try_cast` on every Spark line: a cast that gives NULL where the value does not fit.

`Column.try_cast` came with Spark 4.0. Spark 3.5 has the same cast (SQL's `try_cast`, a
`Cast` in TRY mode) but no Python method for it, so there the expression is built through
the JVM. Only classic sessions need it: sessionize runs Spark Connect on 4.0+ only.
"""

from __future__ import annotations

from sessionize import spark_version


def try_cast(column, type_name: str):
    """`column` cast to `type_name` (a DDL name: "double", "long"), NULL where it does not fit,
    whatever `spark.sql.ansi.enabled` says.

    Example:
        >>> from pyspark.sql import functions as F
        >>> spark.range(1).select(try_cast(F.lit("12"), "long").alias("n")).first().n
        12
    """
    if spark_version.has("column_try_cast"):
        return column.try_cast(type_name)
    from pyspark import SparkContext
    from pyspark.sql import Column

    jvm = SparkContext._jvm
    if jvm is None:  # no classic session in this process
        raise RuntimeError("try_cast on Spark 3.5 needs an active SparkSession")
    catalyst = jvm.org.apache.spark.sql.catalyst.expressions
    mode = getattr(catalyst, "EvalMode$").__getattr__("MODULE$").TRY()
    data_type = jvm.org.apache.spark.sql.types.DataType.fromDDL(type_name)
    cast = catalyst.Cast(column._jc.expr(), data_type, jvm.scala.Option.apply(None), mode)
    return Column(jvm.org.apache.spark.sql.Column(cast))
