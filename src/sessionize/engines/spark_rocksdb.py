"""The spark-rocksdb state's processor: `transformWithState`'s Row-based API, which came
with PySpark 4.1, so this module is imported only once `spark_version.require(
"transform_with_state", ...)` has passed (`engines/spark_state.py`). The step it runs and
the rows it returns are those of `spark_processor.py`, shared with the HDFS-backed state.
"""

from __future__ import annotations

from collections.abc import Iterator

import pyarrow as pa
from pyspark.sql.streaming import StatefulProcessor

from sessionize.config import SessionRules
from sessionize.engines.spark_processor import (
    Shapes,
    _events_from_rows,
    _invalid_from_rows,
    _state_from_tuples,
    _state_tuples,
    _timer,
    expiry_us,
    step,
    step_tuples,
    wide_tuples,
)
from sessionize.mapping import EventMapping


class RocksSessionProcessor(StatefulProcessor):
    """The StatefulProcessor of the spark-rocksdb state."""

    def __init__(self, rules: SessionRules, mapping: EventMapping | None = None):
        self.rules = rules
        self.sh = Shapes(mapping or EventMapping())

    def init(self, handle) -> None:
        self.handle = handle
        self.open_events = handle.getListState("open_events", self.sh.open_event_ddl)

    def handleInputRows(self, key, rows, timerValues) -> Iterator:
        valid: list[pa.Table] = []
        invalid: list[pa.Table] = []
        for row in rows:
            (valid if row[self.sh.reason_pos] is None else invalid).append(row)
        for values in wide_tuples(self.sh, "invalid_events", _invalid_from_rows(self.sh, invalid)):
            yield self.sh.out_row(*values)
        if valid:
            events = _events_from_rows(self.sh, valid)
            yield from self._step(key[0], events, timerValues.getCurrentWatermarkInMs(), None)

    def handleExpiredTimer(self, key, timerValues, expiredTimerInfo) -> Iterator:
        fired = expiredTimerInfo.getExpiryTimeInMs()
        wm = timerValues.getCurrentWatermarkInMs()
        yield from self._step(key[0], self.sh.layout.event.empty_table(), wm, fired)

    def close(self) -> None:
        pass

    def _step(self, user, events: pa.Table, wm_ms: int, fired: int | None) -> Iterator:
        state = _state_from_tuples(self.sh, user, list(self.open_events.get()))
        res = step(self.rules, state, events, wm_ms, self.sh.layout)
        old, new = _timer(expiry_us(state)), _timer(expiry_us(res.state_puts))
        if res.state_puts.num_rows:
            if events.num_rows or res.sessions.num_rows:
                self.open_events.put(_state_tuples(self.sh, res.state_puts))
        elif state.num_rows:
            self.open_events.clear()
        if fired is not None and new == fired:
            # Spark deletes the fired timer after this call, which would strand the user's
            # sessions; cannot happen while the bounds in the module doc hold.
            raise RuntimeError(f"timer {fired} of user {user} fired without emitting")
        if old != new:
            if old is not None and fired is None:
                self.handle.deleteTimer(old)  # a fired timer is deleted by Spark
            if new is not None:
                self.handle.registerTimer(new)
        for values in step_tuples(self.sh, res, state.num_rows > 0):
            yield self.sh.out_row(*values)
