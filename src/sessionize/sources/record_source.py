"""The Python data source that the Kafka and Kinesis inputs share: raw records (`value`,
`error`, `source`), a reader per subclass.

Python streaming data sources with admission control came with Spark 4.2, so this module
is imported only once `spark_version.require("python_stream_sources", ...)` has passed
(`sources/registry.py`);
the URIs and options of `sources/uri.py` need no PySpark.
"""

from __future__ import annotations

from typing import ClassVar

from pyspark.sql.datasource import DataSource, DataSourceStreamReader

from sessionize.sources.lines import SPARK_SCHEMA


class RecordSource(DataSource):
    """A Python data source of raw records; subclasses name their format and reader."""

    format: ClassVar[str]
    reader: ClassVar[type[DataSourceStreamReader]]

    @classmethod
    def name(cls) -> str:
        return cls.format

    def schema(self) -> str:
        return SPARK_SCHEMA

    def streamReader(self, schema) -> DataSourceStreamReader:
        return self.reader(dict(self.options))
