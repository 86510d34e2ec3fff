"""The Python data source that the Kafka and Kinesis inputs share: raw records (`value`,
`error`, `source`), a reader per subclass, and how a reader plans on every Spark line.

Python streaming data sources came with Spark 4.0, so this module is imported only once
`spark_version.require("python_stream_sources", ...)` has passed (`sources/registry.py`);
the URIs and options of `sources/uri.py` need no PySpark.

Spark 4.0 and 4.1 ask a reader for the next micro-batch's end without its start
(`latestOffset()`, no admission control: `sources/admission.py`). `RecordReader` then
plans from the end Spark last planned with it: on a restart Spark hands the reader the
offset log's last end first (`partitions(end, end)`, its `setLatestSeenOffset`), and a new
query asks for an end before its initial offset, which is then the start. The initial
offset is read once per reader, so that the start Spark logs is the one planned from.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import ClassVar

from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition

from sessionize.sources.admission import ReadAllAvailable, ReadLimit, SupportsTriggerAvailableNow
from sessionize.sources.lines import SPARK_SCHEMA
from sessionize.sources.uri import LazyClient


class RecordReader(LazyClient, DataSourceStreamReader, SupportsTriggerAvailableNow):
    """A stream reader of records that plans the same on every line; subclasses give the
    offsets (`first_offset`, `end_offset`) and the ranges of a batch (`ranges`)."""

    _initial: dict | None = None  # the initial offset, read once
    _planned: dict | None = None  # the end of the last batch Spark planned with this reader

    def __init__(self, options: Mapping[str, str]) -> None:
        """Each source's reader parses the options Spark hands its data source."""
        raise NotImplementedError

    def first_offset(self) -> dict:
        raise NotImplementedError

    def end_offset(self, start: dict, limit: ReadLimit) -> dict:
        raise NotImplementedError

    def ranges(self, start: dict, end: dict) -> Sequence[InputPartition]:
        raise NotImplementedError

    def initialOffset(self) -> dict:
        if self._initial is None:
            self._initial = self.first_offset()
        return self._initial

    def latestOffset(self, start: dict | None = None, limit: ReadLimit | None = None) -> dict:
        """The next batch's end. Spark 4.2+ gives the start and limit; before, neither."""
        if start is None:
            start = self._planned if self._planned is not None else self.initialOffset()
        return self.end_offset(start, ReadAllAvailable() if limit is None else limit)

    def partitions(self, start: dict, end: dict) -> Sequence[InputPartition]:
        self._planned = end
        return self.ranges(start, end)


class RecordSource(DataSource):
    """A Python data source of raw records; subclasses name their format and reader."""

    format: ClassVar[str]
    stream_reader: ClassVar[type[RecordReader]]  # not `reader`: DataSource.reader reads a batch

    @classmethod
    def name(cls) -> str:
        return cls.format

    def schema(self) -> str:
        return SPARK_SCHEMA

    def streamReader(self, schema) -> DataSourceStreamReader:
        return self.stream_reader(dict(self.options))
