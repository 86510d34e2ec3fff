"""What `Processor.process` returns."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import pyarrow as pa


@dataclass(frozen=True)
class Update:
    """The changes of one `process` call; every field is optional.

    Args:
        state: the complete new rows (`state_schema`) of every changed key: a key's stored
            rows are replaced as a whole; keys absent keep their rows.
        remove: keys whose rows are deleted (an array or list of the key's type). A key may
            not be both in `state` and in `remove`.
        outputs: output name -> a table with exactly the declared columns and types.
        timers: a table of the key column and `at` (int64 microseconds since the epoch, or a
            timestamp): each key's next timer; a null `at` clears the key's timer. A timer
            fires in the first batch whose `watermark_after` is above it; only keys that
            have state rows after this update can hold one.
        counters: counter name -> integer, added up per batch and in total.
        deletes: for outputs declared `Output(..., mode="replace")`: output name -> a table
            of the output's key columns whose rows are deleted. Deletes apply before the
            batch's rows of that output: a key both deleted and written keeps the new rows.

    Example:
        >>> import pyarrow as pa
        >>> Update(remove=[3, 4], counters={"expired": 2}).remove
        [3, 4]
    """

    state: pa.Table | None = None
    remove: Any = None
    outputs: Mapping[str, pa.Table] | None = None
    timers: pa.Table | None = None
    counters: Mapping[str, int] | None = None
    deletes: Mapping[str, pa.Table] | None = None
