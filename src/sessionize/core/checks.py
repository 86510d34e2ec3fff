"""The `Update` a processor returned, checked against its declarations and the keys it was
given. Every failure is one ProcessorError line naming the processor, the output or column,
and what was wrong."""

from __future__ import annotations

import operator
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from sessionize.core.conform import conform
from sessionize.core.declared import NEVER_US, Declared
from sessionize.core.update import Update
from sessionize.errors import ProcessorError

Fail = Callable[[str], ProcessorError]  # makes the error naming the processor

AT = "at"


@dataclass(frozen=True)
class Checked:
    """An Update in the core's form: typed arrays and tables, nothing missing."""

    state: pa.Table  # state_schema
    remove: pa.Array  # unique keys, the key's type
    outputs: dict[str, pa.Table]
    deletes: dict[str, pa.Table]
    timer_keys: pa.Array  # unique keys
    timer_at: np.ndarray  # int64 microseconds, NEVER_US where `at` was null
    counters: dict[str, int]


def check_update(update: Any, d: Declared, given: pa.Array) -> Checked:
    """Check `update` (what `process` returned) for a call handed the keys `given`."""

    def fail(text: str) -> ProcessorError:
        return ProcessorError(f"processor {d.name}: {text}")

    if not isinstance(update, Update):
        raise fail(f"process returned {type(update).__name__}, not a stateful.Update")
    state = d.state_schema.empty_table()
    if update.state is not None:
        state = conform(update.state, d.state_schema, who=d.name, what="state")
        _only_given(state.column(d.key), given, "state has rows for", fail)
    remove = _keys(update.remove, d, fail)
    _only_given(remove, given, "remove names", fail)
    both = pc.is_in(remove, value_set=state.column(d.key).unique())
    if pc.any(both).as_py():
        raise fail(f"key(s) {_sample(remove.filter(both))} are both in state and remove")
    outputs = {
        name: conform(table, d.outputs[name].schema, who=d.name, what=f"output '{name}'")
        for name, table in _declared(update.outputs, "outputs", d, fail).items()
    }
    deletes = {}
    for name, table in _declared(update.deletes, "deletes", d, fail).items():
        out = d.outputs[name]
        if out.mode != "replace":
            raise fail(f"deletes name output '{name}', which is appended, not replaced by key")
        key_schema = pa.schema([out.schema.field(c) for c in out.key])
        deletes[name] = conform(table, key_schema, who=d.name, what=f"deletes of '{name}'")
    timer_keys, timer_at = _timers(update.timers, d, given, fail)
    return Checked(
        state, remove, outputs, deletes, timer_keys, timer_at, _counters(update.counters, fail)
    )


def _declared(tables: Any, field: str, d: Declared, fail: Fail) -> dict[str, Any]:
    if tables is None:
        return {}
    if not isinstance(tables, Mapping):
        raise fail(f"Update.{field} must be a dict of output name -> table")
    unknown = [name for name in tables if name not in d.outputs]
    if unknown:
        raise fail(f"Update.{field} names undeclared output(s) {unknown}")
    return dict(tables)


def _keys(values: Any, d: Declared, fail: Fail) -> pa.Array:
    if values is None:
        return pa.array([], d.key_type)
    try:
        if isinstance(values, pa.ChunkedArray):
            values = values.combine_chunks()
        array = values if isinstance(values, pa.Array) else pa.array(values, d.key_type)
        array = array.cast(d.key_type)
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError, TypeError) as e:
        raise fail(f"remove must be an array of {d.key_type} keys: {e}") from e
    if array.null_count:
        raise fail("remove has null keys")
    return array.unique()


def _only_given(keys: Any, given: pa.Array, what: str, fail: Fail) -> None:
    unknown = pc.invert(pc.is_in(keys, value_set=given))
    if pc.any(unknown).as_py():
        raise fail(f"{what} key(s) {_sample(pc.filter(keys, unknown))} it was not given")


def _timers(timers: Any, d: Declared, given: pa.Array, fail: Fail) -> tuple[pa.Array, np.ndarray]:
    if timers is None:
        return pa.array([], d.key_type), np.empty(0, np.int64)
    if d.event_time is None and (not isinstance(timers, pa.Table) or timers.num_rows):
        raise fail("has no event_time, so no watermark: it cannot set timers")
    if isinstance(timers, pa.RecordBatch):
        timers = pa.Table.from_batches([timers])
    if not isinstance(timers, pa.Table) or sorted(timers.column_names) != sorted([d.key, AT]):
        raise fail(f"timers must be a table of exactly the columns '{d.key}' and '{AT}'")
    keys = timers.column(d.key).combine_chunks()
    if keys.type != d.key_type:
        raise fail(f"timers column '{d.key}' is {keys.type}, declared {d.key_type}")
    if keys.null_count:
        raise fail(f"timers column '{d.key}' has nulls")
    at = timers.column(AT).combine_chunks()
    if pa.types.is_timestamp(at.type):
        at = at.cast(pa.timestamp("us", tz=at.type.tz)).cast(pa.int64())
    elif at.type != pa.int64():
        raise fail(f"timers column '{AT}' is {at.type}; use int64 microseconds or a timestamp")
    if len(keys.unique()) != len(keys):
        raise fail(f"timers name a key more than once: {_sample(_repeated(keys))}")
    _only_given(keys, given, "timers name", fail)
    at_us = at.fill_null(NEVER_US).to_numpy(zero_copy_only=False)
    if (at_us > NEVER_US).any():
        raise fail(f"timers column '{AT}' is after 9999-12-31, the latest a timer can be")
    return keys, at_us


def _repeated(keys: pa.Array) -> pa.Array:
    counts = pc.value_counts(keys)
    return counts.field("values").filter(pc.greater(counts.field("counts"), 1))


def _counters(counters: Any, fail: Fail) -> dict[str, int]:
    if counters is None:
        return {}
    if not isinstance(counters, Mapping):
        raise fail("Update.counters must be a dict of name -> integer")
    out = {}
    for name, value in counters.items():
        if not isinstance(name, str) or not name.isidentifier():
            raise fail(f"counter name {name!r} must be letters, digits and _")
        if isinstance(value, bool | float):
            raise fail(f"counter '{name}' is {value!r}, not an integer")
        try:
            out[name] = operator.index(value)
        except TypeError:
            raise fail(f"counter '{name}' is {value!r}, not an integer") from None
    return out


def _sample(keys: Any, at_most: int = 3) -> str:
    values = keys.to_pylist()
    more = f" and {len(values) - at_most} more" if len(values) > at_most else ""
    return f"{values[:at_most]}{more}"
