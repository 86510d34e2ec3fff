"""One partition and one micro-batch of the keyed core: pure and vectorized (pyarrow and
numpy, no Spark). The engine reads the state, calls `step`, and writes what it returns.

In order:

0. the rows the processor's `drop` names are set aside (counted, written nowhere);
1. rows with an event time strictly below `watermark_before` are late: they go to the
   processor's late output with the watermark, sorted by their columns (so their order
   never depends on arrival), never to `process`;
2. the keys handed in are those with on-time rows and those whose timer is strictly below
   `watermark_after` (`ctx.due`), or with `every_key` all keys of the state given;
3. `process` is called once with their state rows (sorted by key) and their rows (sorted by
   key and event time, unless the processor declares `sorted_rows = False`); not at all
   when no key is handed in;
4. its `Update` is checked (checks.py);
5. timers are applied (timers.py), and the stored rows of every changed key are rebuilt:
   a changed key's store key is rewritten whole, with the rows of keys sharing it (string
   keys whose hashes collide) kept as they were; a store key left without rows is removed.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from sessionize.core.checks import Checked, check_update
from sessionize.core.conform import conform
from sessionize.core.context import Context
from sessionize.core.declared import NEVER_US, TIMER_TYPE, WATERMARK, Declared, declared
from sessionize.core.keys import store_keys
from sessionize.core.processor import Processor
from sessionize.core.timers import due_mask, per_key, timers_after
from sessionize.errors import ProcessorError


@dataclass(frozen=True)
class PartitionStep:
    """What the engine writes for one partition and batch."""

    puts: pa.Table  # stored rows (Declared.rows) of every store key to replace, whole
    removes: pa.Int64Array  # store keys to delete
    outputs: dict[str, pa.Table]  # every declared output and the late output, maybe empty
    deletes: dict[str, pa.Table]  # replaced-by-key outputs: key rows to delete
    counters: dict[str, int]  # the processor's own
    counts: dict[str, int]  # the core's: rows, late, keys, due, state rows read and written


def step(
    processor: Processor,
    state: pa.Table | None,
    rows: pa.Table | pa.RecordBatch,
    *,
    batch_id: int,
    partition: int,
    watermark_before: int | None,
    watermark_after: int | None,
    every_key: bool = False,
) -> PartitionStep:
    """Advance one partition of `processor` by one micro-batch.

    Args:
        processor: the processor.
        state: stored rows (`declared(processor).rows`) of some store keys, each store key
            with all its rows: at least those of the batch's keys and of the keys whose
            timer is below `watermark_after`; others are left untouched.
        rows: the batch's rows of this partition (the input's columns, any order; an empty
            table of them when the batch has none: `process` sees those columns).
        batch_id, partition: as `Context` tells them.
        watermark_before, watermark_after: int64 microseconds since the epoch, or None.
        every_key: hand every key of `state` to `process`, due or not (to rebuild an
            output replaced by key from the whole state).

    Returns:
        The stored rows to put, store keys to remove, outputs and counters.

    Raises:
        ProcessorError: the processor is declared wrongly, raised, or returned what its
            declaration does not allow (one line naming it and what).
    """
    d = declared(processor)
    _check_watermarks(watermark_before, watermark_after)
    state = d.rows.conform(state if state is not None else d.rows.empty())
    rows = _input(rows, d)
    rows, dropped = _drop(processor, rows, d)
    rows, late = _split_late(rows, d, watermark_before)

    timer_us = state.column(d.timer).cast(pa.int64()).to_numpy(zero_copy_only=False)
    key_column = state.column(d.key).combine_chunks()
    fired = due_mask(timer_us, watermark_after if d.event_time else None)
    due = key_column.filter(pa.array(fired)).unique()
    given = pa.concat_arrays([rows.column(d.key).combine_chunks(), due]).unique()
    if every_key:
        given = pa.concat_arrays([given, key_column]).unique()
    handed = pc.is_in(key_column, value_set=given)
    mine = state.filter(handed)
    mine = mine.take(pc.sort_indices(mine, [(d.key, "ascending")]))
    if processor.sorted_rows:
        order = [(d.key, "ascending")] + ([(d.event_time, "ascending")] if d.event_time else [])
        rows = rows.take(pc.sort_indices(rows, order))

    outputs = {name: out.schema.empty_table() for name, out in d.outputs.items()}
    if late is not None and d.late_output is not None:
        outputs[d.late_output] = late
    counts = {
        "rows": rows.num_rows + (late.num_rows if late is not None else 0),
        "late": late.num_rows if late is not None else 0,
        "keys": len(given),
        "due": len(due),
        "state_rows_read": mine.num_rows,
        "dropped": dropped,
    }
    if len(given) == 0:
        empty = d.rows.empty()
        return PartitionStep(
            empty,
            pa.array([], pa.int64()),
            outputs,
            {},
            {},
            {**counts, "state_rows_written": 0, "state_keys_removed": 0},
        )

    ctx = Context(batch_id, partition, watermark_before, watermark_after, due, every_key)
    try:
        update = processor.process(mine.select(d.state_schema.names), rows, ctx)
    except Exception as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else ""
        raise ProcessorError(f"processor {d.name} raised {type(e).__name__}: {first}") from e
    checked = check_update(update, d, given)
    puts, removes = _stored_changes(d, state, mine, checked, due, rows)
    for name, table in checked.outputs.items():
        outputs[name] = pa.concat_tables([outputs[name], table]) if name in outputs else table
    counts |= {"state_rows_written": puts.num_rows, "state_keys_removed": len(removes)}
    return PartitionStep(puts, removes, outputs, checked.deletes, checked.counters, counts)


def _stored_changes(
    d: Declared,
    state: pa.Table,
    mine: pa.Table,
    checked: Checked,
    due: pa.Array,
    rows: pa.Table,
) -> tuple[pa.Table, pa.Int64Array]:
    """Step 5 of the module doc: the stored rows to put and the store keys to remove."""
    new_keys = checked.state.column(d.key).combine_chunks().unique()
    old_key_col = mine.column(d.key).combine_chunks()
    old_keys, old_at = per_key(old_key_col, mine.column(d.timer).cast(pa.int64()).to_numpy())
    kept = pc.invert(pc.is_in(old_keys, value_set=pa.concat_arrays([new_keys, checked.remove])))
    with_rows = pa.concat_arrays([new_keys, old_keys.filter(kept)])
    set_live = pc.is_in(checked.timer_keys, value_set=with_rows)
    homeless = pc.and_(pc.invert(set_live), pa.array(checked.timer_at < NEVER_US))
    if pc.any(homeless).as_py():
        shown = checked.timer_keys.filter(homeless).to_pylist()[:3]
        raise ProcessorError(
            f"processor {d.name}: timers name key(s) {shown} that have no state rows after "
            "this update (a timer lives with its key's rows)"
        )
    changed = pa.concat_arrays([new_keys, checked.remove, checked.timer_keys, due]).unique()

    known = _known_store_keys(d, mine, rows) if d.string_keys else None

    def store_key(keys: pa.Array) -> pa.Array:
        """A stored key keeps the store key it has, a new one the input's or its hash."""
        if known is None:
            return keys
        return _store_key(keys, *known)

    def timed(table: pa.Table) -> pa.Table:
        """State rows of changed keys -> stored rows, with each key's timer after the call."""
        keys = table.column(d.key).combine_chunks()
        at = timers_after(
            keys,
            set_keys=checked.timer_keys,
            set_at=checked.timer_at,
            due=due,
            old_keys=old_keys,
            old_at=old_at,
        )
        table = table.select(d.state_schema.names)
        table = table.append_column(d.timer, pa.array(at, pa.int64()).cast(TIMER_TYPE))
        if d.string_keys:
            table = table.append_column(d.store_key, store_key(keys))
        return table.cast(d.rows.schema)

    # keys that keep their rows but whose timer was set or fired: same rows, new timer
    retimed = mine.filter(
        pc.and_(
            pc.is_in(old_key_col, value_set=changed),
            pc.is_in(old_key_col, value_set=old_keys.filter(kept)),
        )
    )
    parts = [timed(checked.state), timed(retimed)]
    touched = store_key(changed).unique()
    if d.string_keys:  # keys sharing a store key with a changed one are rewritten as they were
        state_store = state.column(d.store_key)
        siblings = pc.and_(
            pc.is_in(state_store, value_set=touched),
            pc.invert(pc.is_in(state.column(d.key), value_set=changed)),
        )
        parts.append(state.filter(siblings))
    puts = pa.concat_tables(parts)
    left = pc.is_in(touched, value_set=puts.column(d.store_key).combine_chunks().unique())
    gone = touched.filter(pc.invert(left))
    # Only what is stored can be removed: a key the processor removes before it was ever
    # stored (new in this batch) leaves nothing to delete.
    stored = state.column(d.store_key).combine_chunks()
    return puts, gone.filter(pc.is_in(gone, value_set=stored))


def _known_store_keys(d: Declared, mine: pa.Table, rows: pa.Table) -> tuple[pa.Array, pa.Array]:
    """(keys, their store keys) as stored, then as the input carries them: an input that
    carries them (the session input: the parser's xxhash64) names the store key the engine
    read a new key under, so the key is written where the next batch reads it."""
    keys = [mine.column(d.key).combine_chunks()]
    store = [mine.column(d.store_key).combine_chunks().cast(pa.int64())]
    if d.store_key in rows.column_names:
        keys.append(rows.column(d.key).combine_chunks())
        store.append(rows.column(d.store_key).combine_chunks().cast(pa.int64()))
    return pa.concat_arrays(keys), pa.concat_arrays(store)


def _store_key(keys: pa.Array, stored_keys: pa.Array, stored_store_keys: pa.Array) -> pa.Array:
    """The store key of each of `keys`: the one it is stored under, else its hash."""
    at = pc.index_in(keys, value_set=stored_keys)
    known = stored_store_keys.take(at)
    if known.null_count == 0:
        return known
    new = known.is_null().to_numpy(zero_copy_only=False)
    out = known.fill_null(0).to_numpy(zero_copy_only=False).copy()
    out[new] = store_keys(keys.filter(pa.array(new))).to_numpy()
    return pa.array(out, pa.int64())


def _input(rows: pa.Table | pa.RecordBatch, d: Declared) -> pa.Table:
    """The batch's rows with the key as declared and a valid event time column."""
    if isinstance(rows, pa.RecordBatch):
        rows = pa.Table.from_batches([rows])
    if not isinstance(rows, pa.Table):
        raise TypeError(f"the batch's rows must be a pyarrow Table, not {type(rows).__name__}")
    for column in [d.key] + ([d.event_time] if d.event_time else []):
        if column not in rows.column_names:
            raise ProcessorError(f"processor {d.name}: the input has no column '{column}'")
        if rows.column(column).null_count:
            raise ProcessorError(f"processor {d.name}: input column '{column}' has nulls")
    key = rows.column(d.key)
    if key.type != d.key_type:
        fits = pa.types.is_integer if d.key_type == pa.int64() else pa.types.is_large_string
        if not fits(key.type):
            raise ProcessorError(
                f"processor {d.name}: input column '{d.key}' is {key.type}, the key is {d.key_type}"
            )
        rows = rows.set_column(rows.column_names.index(d.key), d.key, key.cast(d.key_type))
    if d.event_time and not pa.types.is_timestamp(rows.column(d.event_time).type):
        raise ProcessorError(
            f"processor {d.name}: input column '{d.event_time}' is "
            f"{rows.column(d.event_time).type}, not a timestamp"
        )
    return rows


def _drop(processor: Processor, rows: pa.Table, d: Declared) -> tuple[pa.Table, int]:
    """Step 0: the rows without those `processor.drop` names, and how many those are."""
    try:
        mask = processor.drop(rows)
    except Exception as e:
        raise ProcessorError(f"processor {d.name}: drop raised {type(e).__name__}: {e}") from e
    if mask is None:
        return rows, 0
    if isinstance(mask, pa.ChunkedArray):
        mask = mask.combine_chunks()
    if not isinstance(mask, pa.Array) or mask.type != pa.bool_() or len(mask) != rows.num_rows:
        raise ProcessorError(
            f"processor {d.name}: drop must return a boolean array as long as the rows"
        )
    dropped = pc.sum(mask).as_py() or 0
    return (rows.filter(pc.invert(mask.fill_null(False))), dropped) if dropped else (rows, 0)


def _split_late(
    rows: pa.Table, d: Declared, watermark_before: int | None
) -> tuple[pa.Table, pa.Table | None]:
    """(on-time rows, late rows as the late output); None without event time."""
    if d.event_time is None:
        return rows, None
    schema = d.late_schema(rows.schema)
    if watermark_before is None:
        return rows, schema.empty_table()
    times = rows.column(d.event_time)
    us = pc.cast(times, pa.timestamp("us", tz=times.type.tz), safe=False).cast(pa.int64())
    is_late = pc.less(us, watermark_before - d.allowed_lateness_us)
    late = rows.filter(is_late)
    mark = pa.array(np.full(late.num_rows, watermark_before, np.int64)).cast(TIMER_TYPE)
    if d.late_names:
        late = late.rename_columns([d.late_names.get(n, n) for n in late.column_names])
    late = late.append_column(pa.field(WATERMARK, TIMER_TYPE, nullable=False), mark)
    late = late.select([n for n in schema.names if n in late.column_names])
    order = [(f.name, "ascending") for f in late.schema if _sortable(f.type)]
    if late.num_rows > 1 and order:
        late = late.take(pc.sort_indices(late, order))  # nulls last
    what = f"late output '{d.late_output}'"
    return rows.filter(pc.invert(is_late)), conform(late, schema, who=d.name, what=what)


def _sortable(t: pa.DataType) -> bool:
    return not (pa.types.is_nested(t) or pa.types.is_dictionary(t) or pa.types.is_null(t))


def _check_watermarks(before: int | None, after: int | None) -> None:
    for value in (before, after):
        if value is not None and (not isinstance(value, int) or isinstance(value, bool)):
            raise ValueError(f"watermarks are int microseconds or None, not {value!r}")
    if before is not None and (after is None or after < before):
        raise ValueError(f"watermark_after {after} is before watermark_before {before}")
