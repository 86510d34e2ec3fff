"""What `Processor.process` is told about the call besides the tables."""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa


@dataclass(frozen=True)
class Context:
    """The micro-batch and partition of one `process` call.

    Args:
        batch_id: the micro-batch (the state version this call helps commit).
        partition: the state partition.
        watermark_before: rows with an event time strictly below it were late and did not
            reach `process` (int64 microseconds since the epoch; None before the first
            watermark, or without `event_time`).
        watermark_after: the watermark once this batch is done: timers strictly below it
            fired (same unit; None: no timer fires).
        due: every key whose timer fired in this batch, with or without rows (the key
            column's type).
        every_key: every key of the state is handed in, due or not, because an output
            replaced by key is rebuilt from the whole state (after a removal of batches):
            write every handed key's rows, changed or not.

    Example:
        >>> import pyarrow as pa
        >>> Context(7, 0, None, 1_000_000, pa.array([], pa.int64())).batch_id
        7
    """

    batch_id: int
    partition: int
    watermark_before: int | None
    watermark_after: int | None
    due: pa.Array
    every_key: bool = False
