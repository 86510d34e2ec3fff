"""The rules of the keyed core's step (docs/design.md, "The keyed core"), one test each."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from sessionize import stateful
from sessionize.core.step import step

from .helpers import (
    NEVER,
    OUT,
    TS,
    Probe,
    StringProbe,
    as_rows,
    events,
    run,
    spark_xxhash64,
    stored,
)


def test_rows_older_than_watermark_before_go_late_with_the_watermark_never_to_process():
    p = Probe()
    result = run(p, None, events([1, 1, 2], [99, 100, 150]), before=100, after=100)
    late = result.outputs["late"]
    assert late.column_names == ["k", "t", "watermark"]
    assert late.column("k").to_pylist() == [1]
    assert late.column("watermark").cast(pa.int64()).to_pylist() == [100]
    (state, rows, ctx) = p.calls[0]
    assert rows.column("t").cast(pa.int64()).to_pylist() == [100, 150]  # equal: on time
    assert result.counts["late"] == 1 and result.counts["rows"] == 3


def test_late_rows_are_sorted_by_their_columns_whatever_their_arrival():
    p = Probe()
    result = run(p, None, events([2, 1, 2, 1], [7, 9, 3, 8]), before=10, after=10)
    late = result.outputs["late"]
    keys, times = late.column("k").to_pylist(), late.column("t").cast(pa.int64()).to_pylist()
    assert list(zip(keys, times, strict=True)) == [(1, 8), (1, 9), (2, 3), (2, 7)]


def test_dropped_rows_reach_neither_process_nor_the_late_output_and_are_counted():
    class Drops(Probe):
        def drop(self, rows):
            return pc.equal(rows.column("k"), 2)

    p = Drops()
    result = run(p, None, events([1, 2, 2, 3], [50, 5, 50, 5]), before=10, after=60)
    assert p.calls[0][1].column("k").to_pylist() == [1]
    assert result.outputs["late"].column("k").to_pylist() == [3]
    assert result.counts["dropped"] == 2 and result.counts["rows"] == 2


def test_every_key_hands_in_every_stored_key_due_or_not():
    p = Probe()
    state = stored(p, [(1, 10, None), (2, 20, 500), (3, 30, 5)])
    result = step(
        p,
        state,
        events([4], [50]),
        batch_id=0,
        partition=0,
        watermark_before=None,
        watermark_after=60,
        every_key=True,
    )
    (given, rows, ctx) = p.calls[0]
    assert sorted(given.column("k").to_pylist()) == [1, 2, 3]
    assert ctx.due.to_pylist() == [3] and result.counts["keys"] == 4


def test_no_watermark_before_means_nothing_is_late():
    p = Probe()
    result = run(p, None, events([1], [-(10**12)]), before=None, after=5)
    assert result.outputs["late"].num_rows == 0
    assert p.calls[0][1].num_rows == 1


def test_a_declared_late_output_takes_its_declared_columns():
    class Declares(Probe):
        late_output = "too_late"
        outputs = {"too_late": pa.schema([("k", pa.int64()), ("watermark", TS)])}

    p = Declares()
    rows = events([1, 2], [5, 50]).append_column("extra", pa.array(["a", "b"]))
    result = run(p, None, rows, before=10, after=50)
    assert result.outputs["too_late"].to_pylist()[0]["k"] == 1
    assert result.outputs["too_late"].column_names == ["k", "watermark"]
    assert "late" not in result.outputs
    assert p.calls[0][1].column_names == ["k", "t", "extra"]


def test_without_event_time_there_is_no_late_output_and_no_timer_fires():
    class Untimed(Probe):
        event_time = None

    p = Untimed()
    state = stored(p, [(7, 1, None)])
    result = run(p, state, events([1, 2]), before=None, after=None)
    assert "late" not in result.outputs
    assert len(p.calls[0][2].due) == 0
    assert p.calls[0][0].column("k").to_pylist() == []  # key 7: no rows, no call for it


def test_keys_with_rows_or_a_timer_strictly_below_watermark_after_are_handed_in():
    p = Probe()
    state = stored(p, [(1, 10, None), (2, 20, 99), (3, 30, 100), (4, 40, 101), (5, 50, 5)])
    run(p, state, events([1, 1], [120, 130]), before=90, after=100)
    (given, rows, ctx) = p.calls[0]
    assert sorted(given.column("k").to_pylist()) == [1, 2, 5]  # 3: at 100, not below
    assert sorted(ctx.due.to_pylist()) == [2, 5]
    assert given.column_names == ["k", "v"]  # the core's columns are not shown


def test_a_due_key_with_rows_is_in_due_and_has_its_rows():
    p = Probe()
    state = stored(p, [(1, 10, 50)])
    run(p, state, events([1], [200]), before=100, after=200)
    (given, rows, ctx) = p.calls[0]
    assert ctx.due.to_pylist() == [1] and rows.num_rows == 1 and given.num_rows == 1


def test_process_is_not_called_without_keys_and_late_rows_still_go_out():
    p = Probe()
    state = stored(p, [(1, 10, 500)])
    result = run(p, state, events([2], [5]), before=10, after=20)
    assert p.calls == []
    assert result.outputs["late"].num_rows == 1
    assert result.puts.num_rows == 0 and len(result.removes) == 0
    assert result.outputs["out"].schema == OUT


def test_rows_sorted_by_key_then_event_time_and_state_by_key():
    p = Probe()
    state = stored(p, [(3, 1, None), (1, 2, None), (3, 3, None), (2, 4, None)])
    run(p, state, events([3, 1, 2, 1, 3], [9, 8, 7, 1, 2]), before=None, after=9)
    (given, rows, ctx) = p.calls[0]
    assert given.column("k").to_pylist() == [1, 2, 3, 3]
    keys = rows.column("k").to_pylist()
    times = rows.column("t").cast(pa.int64()).to_pylist()
    assert list(zip(keys, times, strict=True)) == [(1, 1), (1, 8), (2, 7), (3, 2), (3, 9)]


def test_sorted_rows_false_hands_rows_in_the_batchs_order():
    class Unsorted(Probe):
        sorted_rows = False

    p = Unsorted()
    run(p, None, events([3, 1, 2, 1], [9, 8, 7, 1]), before=None, after=9)
    assert p.calls[0][1].column("k").to_pylist() == [3, 1, 2, 1]


def test_context_tells_batch_partition_and_watermarks():
    p = Probe()
    run(p, None, events([1], [5]), before=3, after=4, batch_id=17)
    ctx = p.calls[0][2]
    assert (ctx.batch_id, ctx.partition, ctx.watermark_before, ctx.watermark_after) == (
        17,
        3,
        3,
        4,
    )


def _answer(**fields):
    return lambda state, rows, ctx: stateful.Update(**fields)


def test_new_rows_replace_a_key_as_a_whole_and_keep_its_timer():
    p = Probe(_answer(state=pa.table({"k": [1], "v": [99]})))
    state = stored(p, [(1, 10, 500), (1, 11, 500), (2, 20, 600)])
    result = run(p, state, events([1], [100]), before=None, after=100)
    assert as_rows(result, p) == [(1, 99, 500)]
    assert len(result.removes) == 0


def test_a_fired_timer_is_cleared_unless_set_again():
    p = Probe()
    state = stored(p, [(1, 10, 50), (1, 11, 50), (2, 20, 60)])
    result = run(p, state, events([9], [100]), before=None, after=100)
    assert as_rows(result, p) == [(1, 10, None), (1, 11, None), (2, 20, None)]


def test_timers_set_a_new_timer_and_keys_absent_keep_theirs():
    timers = pa.table({"k": [1], "at": pa.array([700], pa.int64())})
    p = Probe(_answer(timers=timers))
    state = stored(p, [(1, 10, 50), (2, 20, 60), (3, 30, 900)])
    result = run(p, state, events([3], [100]), before=None, after=100)
    # 1 fired and is set anew; 2 fired and is cleared; 3 has rows, untouched: no write
    assert as_rows(result, p) == [(1, 10, 700), (2, 20, None)]


def test_timers_accept_timestamps_and_a_null_at_clears():
    timers = pa.table({"k": [1, 2], "at": pa.array([7_000, None], pa.int64()).cast(TS)})
    p = Probe(_answer(timers=timers))
    state = stored(p, [(1, 10, None), (2, 20, 900)])
    result = run(p, state, events([1, 2], [100, 100]), before=None, after=100)
    assert as_rows(result, p) == [(1, 10, 7_000), (2, 20, None)]


def test_new_key_without_timer_has_none_and_with_one_gets_it():
    new = pa.table({"k": [1, 2], "v": [1, 2]})
    timers = pa.table({"k": [2], "at": pa.array([400], pa.int64())})
    p = Probe(_answer(state=new, timers=timers))
    result = run(p, None, events([1, 2], [100, 100]), before=None, after=100)
    assert as_rows(result, p) == [(1, 1, None), (2, 2, 400)]


def test_remove_deletes_the_key_and_an_untouched_key_is_not_written():
    p = Probe(_answer(remove=[1, 3]))  # 3: given, but never stored: nothing to delete
    state = stored(p, [(1, 10, None), (2, 20, None)])
    result = run(p, state, events([1, 2, 3], [100, 100, 100]), before=None, after=100)
    assert result.removes.to_pylist() == [1]
    assert result.puts.num_rows == 0
    assert result.counts["state_keys_removed"] == 1


def test_outputs_and_counters_pass_through_and_undeclared_names_are_empty():
    out = pa.table({"k": [1], "n": [2]})
    p = Probe(_answer(outputs={"out": out}, counters={"seen": 3}))
    result = run(p, None, events([1], [100]), before=None, after=100)
    assert result.outputs["out"].to_pylist() == [{"k": 1, "n": 2}]
    assert result.counters == {"seen": 3}
    assert result.counts["keys"] == 1


def test_string_keys_are_stored_under_sparks_xxhash64():
    new = pa.table({"k": ["a", "b"], "v": [1, 2]})
    p = StringProbe(_answer(state=new))
    result = run(p, None, events(["a", "b"], [1, 1], pa.string()), before=None, after=1)
    keys = dict(
        zip(
            result.puts.column("k").to_pylist(), result.puts.column("_key").to_pylist(), strict=True
        )
    )
    assert keys == {"a": spark_xxhash64("a"), "b": spark_xxhash64("b")}


def _collide(key: str) -> int:
    return 42  # every key shares one store key, as keys whose hashes collide do


def test_colliding_string_keys_are_kept_apart():
    new = pa.table({"k": ["a"], "v": [100]})
    p = StringProbe(_answer(state=new))
    state = stored(p, [("a", 1, None), ("b", 2, 700)], store_key=_collide)
    result = run(p, state, events(["a"], [1], pa.string()), before=None, after=1)
    given = p.calls[0][0]
    assert given.column("k").to_pylist() == ["a"]  # b shares the store key, not handed in
    # the store key is rewritten whole: a's new row, b's row as it was
    assert as_rows(result, p) == [("a", 100, None), ("b", 2, 700)]
    assert len(result.removes) == 0


def test_a_store_key_is_removed_only_when_no_key_sharing_it_has_rows():
    p = StringProbe(_answer(remove=["a"]))
    state = stored(p, [("a", 1, None), ("b", 2, None)], store_key=_collide)
    result = run(p, state, events(["a"], [1], pa.string()), before=None, after=1)
    assert as_rows(result, p) == [("b", 2, None)] and len(result.removes) == 0
    p = StringProbe(_answer(remove=["a", "b"]))
    result = run(p, state, events(["a", "b"], [1, 1], pa.string()), before=None, after=1)
    assert result.puts.num_rows == 0 and result.removes.to_pylist() == [42]


def test_watermarks_must_not_go_back():
    with pytest.raises(ValueError, match="before watermark_before"):
        run(Probe(), None, events([], []), before=10, after=9)


def test_string_keys_accept_large_strings_and_int_keys_smaller_ints():
    p = Probe()
    run(p, None, pa.table({"k": pa.array([1], pa.int32()), "t": pa.array([1], TS)}), after=1)
    assert p.calls[0][1].column("k").type == pa.int64()
    s = StringProbe()
    rows = pa.table({"k": pa.array(["x"], pa.large_string()), "t": pa.array([1], TS)})
    run(s, None, rows, after=1)
    assert s.calls[0][1].column("k").type == pa.string()
    assert NEVER > 0
