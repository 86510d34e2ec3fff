"""One test per rule of docs/design.md, "Semantics", and per edge case, with expectations
written by hand.

Every test runs against both the vectorized `advance` and the plain-Python reference.
Times are T0 (2019-10-10T15:00:00Z) plus minutes; gap = lateness = 10 minutes.
"""

from __future__ import annotations

from datetime import date

import pytest

from .helpers import MIN, T0, ev, run_reference, run_vectorized, st

T0_MS = T0 // 1000


@pytest.fixture(params=[run_vectorized, run_reference], ids=["vectorized", "reference"])
def run(request):
    return request.param


def pages_of(outcome):
    return [s["pages"] for s in outcome.sessions]


# ---------------------------------------------------------------- rule 3: splitting


def test_event_exactly_gap_after_joins_session(run):
    out = run([], [ev(1, T0, "a"), ev(1, T0 + 10 * MIN, "b")], None, T0 + 20 * MIN + 1)
    assert pages_of(out) == [["a", "b"]]
    assert out.sessions[0]["closed_at"] == T0 + 20 * MIN


def test_gap_plus_one_microsecond_splits(run):
    out = run([], [ev(1, T0, "a"), ev(1, T0 + 10 * MIN + 1, "b")], None, T0 + 10 * MIN + 1)
    assert pages_of(out) == [["a"]]
    assert out.state_puts == [st(ev(1, T0 + 10 * MIN + 1, "b"), T0 + 20 * MIN + 1)]


def test_close_action_ends_session_and_next_event_starts_new(run):
    events = [ev(1, T0, "a"), ev(1, T0 + MIN, "b", "browser_close"), ev(1, T0 + 2 * MIN, "c")]
    out = run([], events, None, T0 + 2 * MIN)
    assert len(out.sessions) == 1
    s = out.sessions[0]
    assert (s["pages"], s["end_reason"], s["closed_at"]) == (["a", "b"], "explicit", T0 + MIN)
    assert out.state_puts == [st(ev(1, T0 + 2 * MIN, "c"), T0 + 12 * MIN)]


def test_explicit_close_closed_at_is_close_time(run):
    events = [ev(1, T0, "a"), ev(1, T0 + 3 * MIN, "b", "browser_close")]
    assert run([], events, None, T0 + 3 * MIN).sessions == []  # not strictly past
    out = run([], events, None, T0 + 3 * MIN + 1)
    s = out.sessions[0]
    assert (s["end_time"], s["closed_at"], s["end_reason"]) == (
        T0 + 3 * MIN,
        T0 + 3 * MIN,
        "explicit",
    )
    assert [p["time_on_page_ms"] for p in out.page_views] == [180_000, 0]


def test_out_of_order_event_merges_two_open_sessions(run):
    state = [st(ev(1, T0, "a")), st(ev(1, T0 + 15 * MIN, "c"))]
    out = run(state, [ev(1, T0 + 8 * MIN, "b")], T0, T0 + 5 * MIN)
    assert out.sessions == []
    assert out.state_puts == [
        st(ev(1, T0, "a"), T0 + 25 * MIN),
        st(ev(1, T0 + 8 * MIN, "b"), T0 + 25 * MIN),
        st(ev(1, T0 + 15 * MIN, "c"), T0 + 25 * MIN),
    ]
    assert out.stats["open_sessions_before"] == 2
    assert out.stats["open_sessions_after"] == 1
    assert out.state_removes == []


def test_out_of_order_events_within_batch_are_placed_by_time(run):
    events = [ev(1, T0 + 9 * MIN, "c"), ev(1, T0, "a"), ev(1, T0 + 5 * MIN, "b")]
    out = run([], events, None, T0 + 60 * MIN)
    assert pages_of(out) == [["a", "b", "c"]]


def test_events_at_same_time_are_ordered_by_page(run):
    out = run([], [ev(1, T0, "b"), ev(1, T0, "a")], None, T0 + 60 * MIN)
    assert pages_of(out) == [["a", "b"]]
    assert [(p["page"], p["position"], p["time_on_page_ms"]) for p in out.page_views] == [
        ("a", 1, 0),
        ("b", 2, 600_000),
    ]


def test_close_action_then_event_at_same_time_starts_new_session(run):
    # Page order decides: "a" closes, "b" starts a new session at the same instant (and,
    # the id being user + start millisecond, the second one gets the suffix -2).
    out = run([], [ev(1, T0, "b"), ev(1, T0, "a", "browser_close")], None, T0 + 60 * MIN)
    assert [(s["session_id"], s["pages"], s["end_reason"]) for s in out.sessions] == [
        (f"1-{T0_MS}", ["a"], "explicit"),
        (f"1-{T0_MS}-2", ["b"], "inactivity"),
    ]
    # The other way round the close comes last and ends the one session.
    out = run([], [ev(1, T0, "b", "browser_close"), ev(1, T0, "a")], None, T0 + 60 * MIN)
    assert [(s["pages"], s["end_reason"]) for s in out.sessions] == [(["a", "b"], "explicit")]


def test_users_are_split_independently(run):
    events = [ev(2, T0 + MIN, "x"), ev(1, T0, "a"), ev(2, T0 + 5 * MIN, "y")]
    out = run([], events, None, T0 + 60 * MIN)
    assert [(s["user_id"], s["pages"]) for s in out.sessions] == [(1, ["a"]), (2, ["x", "y"])]


# ---------------------------------------------------------------- rule 2: dedup


def test_duplicate_within_batch_counted_once(run):
    events = [ev(1, T0, "a"), ev(1, T0, "a"), ev(1, T0 + MIN, "b"), ev(1, T0, "a")]
    out = run([], events, None, None)
    assert out.state_puts == [
        st(ev(1, T0, "a"), T0 + 11 * MIN),
        st(ev(1, T0 + MIN, "b"), T0 + 11 * MIN),
    ]
    assert (out.stats["events_in"], out.stats["on_time"], out.stats["duplicates"]) == (4, 4, 2)


@pytest.mark.parametrize("reverse", [False, True])
def test_duplicate_copy_kept_is_smallest_by_other_columns_whatever_the_order(run, reverse):
    events = [
        ev(1, T0, "a", "view", site="x"),
        ev(1, T0, "a", "click", site="z"),  # smallest action wins
        ev(2, T0, "a", "view"),
        ev(2, T0, "a", "view", site="x"),  # nulls sort last
        ev(2, T0, "a", "view", site="y"),
    ]
    out = run([], events[::-1] if reverse else events, None, None)
    assert [(r["user_id"], r["action"], r["site"]) for r in out.state_puts] == [
        (1, "click", "z"),
        (2, "view", "x"),
    ]
    assert out.stats["duplicates"] == 3


def test_duplicate_of_state_event_dropped(run):
    state = [st(ev(1, T0, "a", "view", site="z"))]
    out = run(state, [ev(1, T0, "a", "view", site="z")], T0, T0)
    assert out.state_puts == [st(ev(1, T0, "a", "view", site="z"), T0 + 10 * MIN)]
    assert (out.stats["on_time"], out.stats["duplicates"]) == (1, 1)


def test_smaller_copy_replaces_state_copy_as_if_both_came_in_one_batch(run):
    state = [st(ev(1, T0, "a", "view", site="z")), st(ev(1, T0 + MIN, "b"))]
    events = [ev(1, T0, "a", "browser_close", site="z"), ev(1, T0 + MIN, "b", site="y")]
    out = run(state, events, T0, T0 + 1000)
    # "browser_close" < "view": "a" now closes a session of its own, emitted at once
    # (once the watermark is past its millisecond: no later session can share its id).
    assert [(s["pages"], s["end_reason"], s["closed_at"]) for s in out.sessions] == [
        (["a"], "explicit", T0)
    ]
    # "y" < None (nulls last): the batch copy of "b" replaces the state's.
    assert out.state_puts == [st(ev(1, T0 + MIN, "b", site="y"), T0 + 11 * MIN)]
    assert (out.stats["duplicates"], out.stats["open_sessions_before"]) == (2, 1)


def test_same_time_different_page_is_not_a_duplicate(run):
    out = run([], [ev(1, T0, "a"), ev(1, T0, "b")], None, None)
    assert len(out.state_puts) == 2
    assert out.stats["duplicates"] == 0


def test_late_copies_are_all_reported_not_deduplicated(run):
    out = run([], [ev(1, T0, "a"), ev(1, T0, "a")], T0 + MIN, T0 + MIN)
    assert out.late == [{**ev(1, T0, "a"), "watermark": T0 + MIN}] * 2
    assert (out.stats["late"], out.stats["on_time"], out.stats["duplicates"]) == (2, 0, 0)


# ---------------------------------------------------------------- rule 1: lateness


def test_late_event_goes_to_late_with_watermark(run):
    wm = T0 + 30 * MIN
    late = ev(1, wm - 1, "a", "view", site="s", browser="Firefox 53")
    out = run([], [late, ev(1, wm, "b")], wm, wm)
    assert out.late == [{**late, "watermark": wm}]
    assert out.state_puts == [st(ev(1, wm, "b"), wm + 10 * MIN)]  # exactly at it: on time
    assert (out.stats["events_in"], out.stats["on_time"], out.stats["late"]) == (2, 1, 1)


def test_event_exactly_at_watermark_is_on_time(run):
    out = run([], [ev(1, T0, "a")], T0, T0)
    assert out.late == []
    assert out.stats["on_time"] == 1


def test_without_watermark_nothing_is_late(run):
    out = run([], [ev(1, 0, "a")], None, None)
    assert out.late == []
    assert out.state_puts == [st(ev(1, 0, "a"), 10 * MIN)]


def test_late_events_are_sorted_by_their_columns(run):
    events = [ev(2, T0, "a"), ev(1, T0 + 1, "a"), ev(1, T0, "b"), ev(1, T0, "a", site="x")]
    out = run([], events, T0 + MIN, T0 + MIN)
    assert [(r["user_id"], r["event_time"], r["page"]) for r in out.late] == [
        (1, T0, "a"),
        (1, T0, "b"),
        (1, T0 + 1, "a"),
        (2, T0, "a"),
    ]


# ---------------------------------------------------------------- rule 4: emission


def test_emission_requires_watermark_strictly_past_closed_at(run):
    out = run([], [ev(1, T0, "a")], None, T0 + 10 * MIN)
    assert out.sessions == []
    assert out.state_puts == [st(ev(1, T0, "a"), T0 + 10 * MIN)]
    out = run([], [ev(1, T0, "a")], None, T0 + 10 * MIN + 1)
    assert [s["closed_at"] for s in out.sessions] == [T0 + 10 * MIN]
    assert (out.state_puts, out.state_removes) == ([], [])


def test_without_watermark_after_nothing_is_emitted(run):
    out = run([], [ev(1, 0, "a", "browser_close")], None, None)
    assert out.sessions == []
    # Its expiry is the end of its millisecond: a later session could start in it.
    assert out.state_puts == [st(ev(1, 0, "a", "browser_close"), 999)]


def test_emitted_sessions_leave_state_and_expiry_is_earliest_open_close(run):
    state = [st(ev(1, T0, "a"))]
    events = [ev(1, T0 + 30 * MIN, "b"), ev(1, T0 + 45 * MIN, "c")]
    out = run(state, events, T0 + 20 * MIN, T0 + 35 * MIN)
    assert pages_of(out) == [["a"]]
    assert out.state_puts == [
        st(ev(1, T0 + 30 * MIN, "b"), T0 + 40 * MIN),
        st(ev(1, T0 + 45 * MIN, "c"), T0 + 40 * MIN),
    ]
    assert out.stats == {
        "events_in": 2,
        "on_time": 2,
        "late": 0,
        "duplicates": 0,
        "sessions_out": 1,
        "page_views_out": 1,
        "open_sessions_before": 1,
        "open_sessions_after": 2,
        "open_users_after": 1,
        "bot_events": 0,
    }


# ---------------------------------------------------------------- outputs


def test_session_row_has_every_column():
    attrs = dict(
        site="mysite.com", api_version="v3", browser="Firefox 53", language="en", device_type="pc"
    )
    events = [ev(7, T0 + 1_500, "home", **attrs), ev(7, T0 + 2 * MIN, "cart", site="other")]
    for run in (run_vectorized, run_reference):
        out = run([], events, None, T0 + 60 * MIN)
        assert out.sessions == [
            {
                "session_id": f"7-{T0_MS + 1}",  # start in whole epoch milliseconds
                "user_id": 7,
                "start_time": T0 + 1_500,
                "end_time": T0 + 2 * MIN,
                "closed_at": T0 + 12 * MIN,
                "duration_ms": 119_998,  # 119_998.5 ms, floored
                "event_count": 2,
                "pages": ["home", "cart"],
                "end_reason": "inactivity",
                **attrs,
                "session_date": date(2019, 10, 10),
            }
        ]


def test_page_views_time_on_page_last_page_uses_closed_at(run):
    events = [ev(3, T0, "a"), ev(3, T0 + 3 * MIN, "b"), ev(3, T0 + 4 * MIN + 500, "c")]
    out = run([], events, None, T0 + 60 * MIN)
    sid = f"3-{T0_MS}"
    assert out.page_views == [
        {
            "session_id": sid,
            "user_id": 3,
            "event_time": T0,
            "page": "a",
            "position": 1,
            "time_on_page_ms": 180_000,
        },
        {
            "session_id": sid,
            "user_id": 3,
            "event_time": T0 + 3 * MIN,
            "page": "b",
            "position": 2,
            "time_on_page_ms": 60_000,
        },
        {
            "session_id": sid,
            "user_id": 3,
            "event_time": T0 + 4 * MIN + 500,
            "page": "c",
            "position": 3,
            "time_on_page_ms": 600_000,
        },
    ]


def test_session_date_is_utc_date_of_start(run):
    start = T0 + 8 * 60 * MIN + 55 * MIN  # 2019-10-10T23:55Z
    out = run([], [ev(1, start, "a"), ev(1, start + 9 * MIN, "b")], None, start + 60 * MIN)
    assert out.sessions[0]["session_date"] == date(2019, 10, 10)
    assert out.sessions[0]["end_time"] == start + 9 * MIN  # 2019-10-11T00:04Z


def test_session_id_and_date_before_epoch_are_floored(run):
    out = run([], [ev(1, -1_500, "a")], None, 10 * MIN)
    s = out.sessions[0]
    assert (s["session_id"], s["session_date"]) == ("1--2", date(1969, 12, 31))


# ---------------------------------------------------------------- state


def test_users_only_in_state_expire_without_new_events(run):
    state = [st(ev(5, T0, "a"), T0 + 10 * MIN)]
    out = run(state, [ev(6, T0 + 30 * MIN, "x")], T0 + 20 * MIN, T0 + 20 * MIN)
    assert [(s["user_id"], s["pages"]) for s in out.sessions] == [(5, ["a"])]
    assert out.state_removes == [5]
    assert out.state_puts == [st(ev(6, T0 + 30 * MIN, "x"), T0 + 40 * MIN)]
    assert out.stats["open_sessions_before"] == 1
    assert out.stats["open_users_after"] == 1


def test_state_removes_list_only_users_that_were_in_state(run):
    out = run([], [ev(8, T0, "a", "browser_close")], None, T0 + 1000)
    assert len(out.sessions) == 1
    assert (out.state_puts, out.state_removes) == ([], [])


def test_state_puts_hold_every_open_row_of_the_user(run):
    state = [st(ev(1, T0, "a"), expires_at=123)]  # stale expiry: recomputed
    out = run(state, [ev(1, T0 + 2 * MIN, "b")], T0, T0 + MIN)
    assert out.state_puts == [
        st(ev(1, T0, "a"), T0 + 12 * MIN),
        st(ev(1, T0 + 2 * MIN, "b"), T0 + 12 * MIN),
    ]
    assert out.state_removes == []


def test_handed_in_user_without_changes_is_put_back_unchanged(run):
    state = [st(ev(2, T0, "a"), T0 + 10 * MIN)]
    out = run(state, [], T0 + 5 * MIN, T0 + 5 * MIN)
    assert out.state_puts == state
    assert (out.sessions, out.state_removes) == ([], [])
    assert out.stats["open_sessions_before"] == out.stats["open_sessions_after"] == 1


def test_empty_inputs(run):
    out = run([], [], None, None)
    assert (out.sessions, out.page_views, out.late, out.state_puts, out.state_removes) == (
        [],
        [],
        [],
        [],
        [],
    )
    assert set(out.stats.values()) == {0}
