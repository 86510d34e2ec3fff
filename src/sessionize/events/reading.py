"""The reading task of `parsing.parse`: records -> typed event rows, then the batch marks.

Spark hands the task batches of records (`value`, `error`, `source`), or, given a source's
`decode`, whatever the source's task reads them from (a listing of files): the task then
decodes the lines itself, so they never cross into the JVM before they are parsed. Either
way every batch goes through `blocks.read_block`, and with mark keys the task's rows are
followed by its mark rows (`marks.pass_and_mark`) and leave packed by partition
(`packing.pack`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pyarrow as pa
import pyarrow.compute as pc

from sessionize.base_schema import MAPPED_COLUMNS
from sessionize.events import batch_time, blocks
from sessionize.events.marks import RECORDS, pass_and_mark
from sessionize.events.packing import pack
from sessionize.spark_session import ARROW_BATCH_BYTES

# A source's task function: its input batches -> records (`value`, `error`, `source`).
Decode = Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]
# Lines per batch the block reader is handed from a `decode`: what Spark hands a Python task
# (`spark.sql.execution.arrow.maxRecordsPerBatch`, and at most ARROW_BATCH_BYTES of lines),
# so that a task holds no more than when Spark passes it the lines.
DECODED_LINES = 10_000


def read_task(
    plan: blocks.BlockPlan,
    now_us: int | str | None,
    max_future_us: int | None,
    keep_lines: bool,
    valid_sources: bool,
    keys: pa.Array | None,
    decode: Decode | None,
    batches: Iterator[pa.RecordBatch],
) -> Iterator[pa.RecordBatch]:
    """The block reader's task (`parsing.parse`): `plan.schema` rows; with `keys`, the
    rows then the task's marks, and the batch's time on every row (`NOW_COLUMN`, for the
    exact path); with `decode`, the lines it decodes from `batches`.

    `now_us`: the batch's time, or `batch_time.FROM_JOB`. `keep_lines`: every line keeps
    its `raw` text (Spark judges the time limit later, so any line may become invalid)."""
    now_us = batch_time.now_in_task(now_us)
    if decode is not None:
        batches = bounded(decode(batches))

    def read() -> Iterator[pa.RecordBatch]:
        for batch in batches:
            out = blocks.read_block(batch, plan, now_us, max_future_us, valid_sources)
            if keep_lines:
                raw = batch.column("value")
                out = out.set_column(out.schema.get_field_index("raw"), "raw", raw)
            yield out

    if keys is None:
        yield from read()
        return
    # A line of the exact path is judged later (`parsing._exact_marks`): it and the marks
    # travel as rows, every other row packed by partition (`packing`).
    marked = pass_and_mark(read(), keys, "user_id", "event_time", _judged_here)
    finished = [n for n in plan.schema.names if n != blocks.EXACT]
    shared = [n for n in MAPPED_COLUMNS if n in finished]  # long and repeated: once each
    for out in pack(marked, keys, "user_id", _packable, finished, shared):
        now = pa.repeat(pa.scalar(now_us, pa.int64()), out.num_rows)
        yield out.append_column(batch_time.NOW_COLUMN, now)


def bounded(
    batches: Iterator[pa.RecordBatch], max_lines: int = DECODED_LINES
) -> Iterator[pa.RecordBatch]:
    """`batches` cut into slices of at most `max_lines` lines and ARROW_BATCH_BYTES of text
    (a longer line alone), as Spark would hand them over; no empty batch, as Spark hands a
    task none (a task given no lines sends no marks).

    Example:
        >>> [b.num_rows for b in bounded(iter([batch_of_25_000_lines]))]
        [10000, 10000, 5000]
    """
    for batch in batches:
        values = batch.column("value")
        start, n = 0, batch.num_rows
        while start < n:
            end = min(start + max_lines, n)
            while end - start > 1 and _text_bytes(values.slice(start, end - start)) > (
                ARROW_BATCH_BYTES
            ):
                end = start + (end - start) // 2
            yield batch.slice(start, end - start)
            start = end


def _text_bytes(values: pa.Array) -> int:
    """The bytes of text in a (sliced) string array."""
    return pc.sum(pc.binary_length(values)).as_py() or 0


def _packable(batch: pa.RecordBatch) -> pa.Array:
    """The rows the reader has finished: neither a mark nor left to the exact path."""
    return pc.and_(
        pc.is_null(batch.column(RECORDS)), pc.invert(batch.column(blocks.EXACT).fill_null(False))
    )


def _judged_here(batch: pa.RecordBatch) -> pa.Array:
    """The block reader's rows it found valid (not those left to the exact path)."""
    return pc.and_(pc.is_null(batch.column("reason")), pc.invert(batch.column(blocks.EXACT)))
