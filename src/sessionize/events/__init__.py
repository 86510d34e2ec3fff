"""What a valid event is, engine-neutral (docs/design.md, "Events").

`rules` holds the one table of the fields read, their types, reasons and limits; `times`
ISO-8601 and epoch times as microseconds, vectorized; `blocks` JSON lines -> typed Arrow
event columns per block, in the task that read them; `marks` the batch marks' columns
and rows that the reading task sends every state partition. Nothing here imports Spark: the
Spark-side parsers (`parsing`, `columns`) read the same table.
"""
