"""Admission control of Python streaming sources: Spark's classes from 4.2, stand-ins before.

From Spark 4.2 Spark asks a reader whose `latestOffset` takes (start, limit) for each
micro-batch's end with its start and a read limit (`maxRecordsPerTrigger`), and tells a
`SupportsTriggerAvailableNow` reader when an available-now run starts. Spark 4.0 and 4.1
have neither: they call `latestOffset()` with no argument (`record_source.RecordReader`
then plans from the end it planned last and reads all the input holds), and an
available-now run takes the end it is given once, at its start. Where Spark lacks these
classes, the plain stand-ins below keep the readers one code for every line; Spark never
sees them there.
"""

from __future__ import annotations

from dataclasses import dataclass

from sessionize import spark_version

if spark_version.has("source_admission_control"):
    from pyspark.sql.streaming.datasource import (
        ReadAllAvailable,
        ReadLimit,
        ReadMaxRows,
        SupportsTriggerAvailableNow,
    )
else:

    class ReadLimit:  # type: ignore[no-redef]
        """How much one micro-batch may read."""

    @dataclass
    class ReadAllAvailable(ReadLimit):  # type: ignore[no-redef]
        """All that the input holds."""

    @dataclass
    class ReadMaxRows(ReadLimit):  # type: ignore[no-redef]
        """At most `max_rows` records."""

        max_rows: int

    class SupportsTriggerAvailableNow:  # type: ignore[no-redef]
        """Told when an available-now run starts (Spark 4.2+ only)."""

        def prepareForTriggerAvailableNow(self) -> None:
            raise NotImplementedError


__all__ = ["ReadAllAvailable", "ReadLimit", "ReadMaxRows", "SupportsTriggerAvailableNow"]
