"""Properties of the vectorized `advance` itself: exact schemas, determinism, inputs, stats."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from sessionize import schema
from sessionize.config import SessionRules
from sessionize.logic import StepStats, advance
from sessionize.logic.sort_order import sort_order

from .helpers import (
    MIN,
    RULES,
    T0,
    ev,
    events_table,
    run_reference,
    run_vectorized,
    st,
    state_table,
)

STATE = [st(ev(1, T0, "a", site="s")), st(ev(2, T0 + MIN, "b"))]
EVENTS = [
    ev(1, T0 + 2 * MIN, "b", "browser_close"),
    ev(1, T0 + 25 * MIN, "c", browser="Firefox 53"),
    ev(2, T0 + 40 * MIN, "x"),
    ev(3, T0 - 20 * MIN, "late"),
    ev(2, T0 + 40 * MIN, "x"),
]


def step(state_rows=STATE, events=EVENTS, wb=T0 - 5 * MIN, wa=T0 + 30 * MIN):
    return advance(
        state_table(state_rows),
        events_table(events),
        rules=RULES,
        watermark_before=wb,
        watermark_after=wa,
    )


def test_outputs_conform_exactly_to_schemas():
    result = step()
    assert result.sessions.num_rows and result.page_views.num_rows  # every output non-empty
    assert result.late.num_rows and result.state_puts.num_rows
    assert result.sessions.schema.equals(schema.SESSIONS)
    assert result.page_views.schema.equals(schema.PAGE_VIEWS)
    assert result.late.schema.equals(schema.LATE_EVENTS)
    assert result.state_puts.schema.equals(schema.STATE)
    assert result.state_removes.type == pa.int64()
    for table in (result.sessions, result.page_views, result.late, result.state_puts):
        table.validate(full=True)


def test_empty_outputs_conform_to_schemas():
    result = step([], [], None, None)
    assert result.sessions.schema.equals(schema.SESSIONS)
    assert result.page_views.schema.equals(schema.PAGE_VIEWS)
    assert result.late.schema.equals(schema.LATE_EVENTS)
    assert result.state_puts.schema.equals(schema.STATE)
    assert len(result.state_removes) == 0


@pytest.mark.parametrize("seed", range(5))
def test_result_does_not_depend_on_input_order(seed):
    rng = np.random.default_rng(seed)
    expected = step()
    shuffled = step(
        [STATE[i] for i in rng.permutation(len(STATE))],
        [EVENTS[i] for i in rng.permutation(len(EVENTS))],
    )
    for name in ("sessions", "page_views", "late", "state_puts", "state_removes"):
        assert getattr(shuffled, name).equals(getattr(expected, name)), name
    assert shuffled.stats == expected.stats


def test_inputs_with_extra_columns_other_nullability_and_many_chunks_are_accepted():
    table = events_table(EVENTS)
    loose = pa.schema([f.with_nullable(True) for f in schema.EVENT]).append(
        pa.field("visit_id", pa.string())
    )
    loose_table = pa.Table.from_pylist(
        [{**row, "visit_id": "v"} for row in table.to_pylist()], loose
    )
    chunked = pa.concat_tables([loose_table.slice(0, 2), loose_table.slice(2)])
    result = advance(
        state_table(STATE),
        chunked,
        rules=RULES,
        watermark_before=T0 - 5 * MIN,
        watermark_after=T0 + 30 * MIN,
    )
    expected = step()
    assert result.sessions.equals(expected.sessions)
    assert result.state_puts.equals(expected.state_puts)


def test_missing_column_is_refused():
    with pytest.raises(ValueError, match="page"):
        advance(
            state_table([]),
            events_table(EVENTS).drop_columns(["page"]),
            rules=RULES,
            watermark_before=None,
            watermark_after=None,
        )


@pytest.mark.parametrize(("wb", "wa"), [(10, 9), (10, None)])
def test_watermark_going_back_is_refused(wb, wa):
    with pytest.raises(ValueError, match="never goes back"):
        step(wb=wb, wa=wa)


def test_stats_add_up_field_by_field():
    a = StepStats(1, 2, 3, 4, 5, 6, 7, 8, 9)
    b = StepStats(10, 20, 30, 40, 50, 60, 70, 80, 90)
    assert a + b == StepStats(11, 22, 33, 44, 55, 66, 77, 88, 99)
    assert sum([a, b], StepStats()) == a + b


def test_counters_of_a_mixed_step():
    assert step().stats == StepStats(
        events_in=5,
        on_time=4,
        late=1,
        duplicates=1,
        sessions_out=2,  # user 1: [a, b] closed by b; user 2: [b]
        page_views_out=3,
        open_sessions_before=2,
        open_sessions_after=2,  # user 1: [c]; user 2: [x]
        open_users_after=2,
    )


def test_custom_close_actions_and_gap():
    rules = SessionRules(gap_us=5, lateness_us=0, close_actions=("logout", "close"))
    events = [ev(1, 0, "a"), ev(1, 5, "b", "logout"), ev(1, 6, "c"), ev(1, 12, "d")]
    result = advance(
        state_table([]),
        events_table(events),
        rules=rules,
        watermark_before=None,
        watermark_after=10_000,
    )
    assert result.sessions["pages"].to_pylist() == [["a", "b"], ["c"], ["d"]]
    assert result.sessions["end_reason"].to_pylist() == ["explicit", "inactivity", "inactivity"]


# ---------------------------------------------------------------- the packed sort key


@pytest.mark.parametrize(
    ("user_range", "time_range", "pages"),
    [
        ((0, 1_000), (0, 3_600_000_000), 50),  # packs as is
        ((-(2**62), 2**62), (0, 3_600_000_000), 50),  # packs once users are ranked
        ((0, 1_000), (-(2**61), 2**61), 1_000),  # too wide: falls back to lexsort
        ((5, 6), (-(2**63), 2**63 - 1), 1),  # one user and page, times wider than 63 bits
    ],
)
def test_sort_order_sorts_by_user_time_page_for_any_key_range(user_range, time_range, pages):
    rng = np.random.default_rng(1)
    n = 5_000
    user = rng.integers(*user_range, n, dtype=np.int64)
    time = rng.integers(*time_range, n, dtype=np.int64)
    time[: n // 2] = time[n // 2 :]  # many equal times
    page = rng.integers(0, pages, n).astype(np.int64)
    order = sort_order(user, time, page)
    keys = list(zip(user[order].tolist(), time[order].tolist(), page[order].tolist(), strict=True))
    assert keys == sorted(keys)
    assert sorted(order.tolist()) == list(range(n))


def test_huge_user_ids_and_far_apart_times_match_reference():
    users = [-(2**63), 2**63 - 1, 0]
    year_1, year_9999 = -62_135_596_800_000_000, 253_370_764_800_000_000
    times = [year_1, year_9999, 0, 1]
    events = [ev(u, t, p) for u in users for t in times for p in ("b", "a")]
    for wa in (None, 0, year_9999 + MIN):
        assert run_vectorized([], events, None, wa) == run_reference([], events, None, wa)
