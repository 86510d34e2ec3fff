"""What a valid event is, engine-neutral (docs/design.md, "Events").

`rules` holds the one table of the fields read, their types, reasons and limits; `keys`
the 64-bit store key of a string user id; `times` ISO-8601 and epoch times as microseconds;
`json_lines` JSON lines -> typed Arrow columns in the tasks that read them. Nothing here
imports Spark: the Spark-side parsers (`parsing`, `columns`) read the same table.
"""
