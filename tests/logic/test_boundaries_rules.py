"""The optional session rules, case by case, through both the vectorized logic and the
reference (docs/design.md, "Semantics")."""

from __future__ import annotations

import pytest

from .reference_rules import Rules
from .test_boundaries_properties import (
    MIN,
    midnight_us,
    run_reference,
    run_vectorized,
    shaped,
)

H = 60 * MIN
NY_MIDNIGHT = midnight_us("America/New_York", (2026, 3, 8))  # a DST day: 23 hours
FAR = NY_MIDNIGHT + 1000 * H


def rules(**kw) -> Rules:
    return Rules(**{"gap_us": 10 * MIN, "close_actions": ("close",), **kw})


def e(t: int, page: str = "p", action: str = "view", change=None, gap=None, user=1) -> dict:
    event = {
        "user_id": user,
        "event_time": t,
        "page": page,
        "action": action,
        "change_value": change,
        "gap_us": gap,
    }
    return event


@pytest.fixture(params=["vectorized", "reference"])
def sessions(request):
    run = run_vectorized if request.param == "vectorized" else run_reference

    def go(r: Rules, events: list[dict]):
        out = run(r, [], [shaped(x, r) for x in events], None, FAR)
        return [(s["pages"], s["closed_at"], s["end_reason"]) for s in out.sessions], out

    return go


def test_max_duration_is_strict_and_closes_at_start_plus_d(sessions):
    t0 = NY_MIDNIGHT - 5 * H
    got, _ = sessions(
        rules(max_duration_us=20 * MIN), [e(t0, "a"), e(t0 + 10 * MIN, "b"), e(t0 + 20 * MIN, "c")]
    )
    assert got == [
        (["a", "b"], t0 + 20 * MIN, "max_duration"),
        (["c"], t0 + 30 * MIN, "inactivity"),
    ]


def test_a_session_ending_at_2358_with_a_midnight_split_closes_at_midnight(sessions):
    r = rules(timezone="America/New_York", split_at_midnight=True)
    got, out = sessions(
        r, [e(NY_MIDNIGHT - 5 * MIN, "a"), e(NY_MIDNIGHT - 2 * MIN, "b"), e(NY_MIDNIGHT, "c")]
    )
    assert got == [
        (["a", "b"], NY_MIDNIGHT, "midnight"),
        (["c"], NY_MIDNIGHT + 10 * MIN, "inactivity"),
    ]
    assert [str(s["session_date"]) for s in out.sessions] == ["2026-03-07", "2026-03-08"]


def test_midnight_that_dst_skips_is_the_end_of_the_gap(sessions):
    # Santiago, 2022-09-11: clocks go from 00:00 to 01:00, at 04:00 UTC.
    gap_end = midnight_us("America/Santiago", (2022, 9, 11))
    r = rules(timezone="America/Santiago", split_at_midnight=True)
    got, _ = sessions(r, [e(gap_end - 5 * MIN, "a"), e(gap_end - 1, "b"), e(gap_end, "c")])
    assert [g[0] for g in got] == [["a", "b"], ["c"]]
    assert got[0][1:] == (gap_end, "midnight")


def test_field_change_splits_and_nulls_never_do(sessions):
    t0 = NY_MIDNIGHT - 5 * H
    got, _ = sessions(
        rules(change=True),
        [
            e(t0, "a"),
            e(t0 + MIN, "b", change="c1"),
            e(t0 + 2 * MIN, "c"),
            e(t0 + 3 * MIN, "d", change="c1"),
            e(t0 + 4 * MIN, "e", change=""),
        ],
    )
    # "" is a value: it differs from "c1"; the session taking "c1" did so without a split.
    assert got == [
        (["a", "b", "c", "d"], t0 + 4 * MIN, "field_change"),
        (["e"], t0 + 14 * MIN, "inactivity"),
    ]


def test_a_value_does_not_carry_over_into_a_session_another_rule_started(sessions):
    t0 = NY_MIDNIGHT - 5 * H
    got, _ = sessions(
        rules(change=True, max_duration_us=5 * MIN),
        [
            e(t0, "a", change="c1"),
            e(t0 + 5 * MIN, "b"),
            e(t0 + 6 * MIN, "c", change="c2"),
        ],
    )
    assert [g[0] for g in got] == [["a"], ["b", "c"]]


def test_a_change_at_the_end_of_the_gap_is_an_inactivity_split_first(sessions):
    t0 = NY_MIDNIGHT - 5 * H
    got, _ = sessions(
        rules(change=True), [e(t0, "a", change="c1"), e(t0 + 10 * MIN, "b", change="c2")]
    )
    # Joins by the inclusive gap, so the change splits, at the gap's end: field_change wins.
    assert got[0] == (["a"], t0 + 10 * MIN, "field_change")


def test_gap_field_extends_and_shortens_inactivity(sessions):
    t0 = NY_MIDNIGHT - 5 * H
    got, _ = sessions(
        rules(gap_field=True),
        [
            e(t0, "a", gap=30 * MIN),
            e(t0 + 2 * MIN, "b", gap=MIN),
            e(t0 + 30 * MIN, "c"),
            e(t0 + 41 * MIN, "d"),
        ],
    )
    # "a" covers "c" (30 minutes, inclusive) though "b" asked for one minute only.
    assert got == [
        (["a", "b", "c"], t0 + 40 * MIN, "inactivity"),
        (["d"], t0 + 51 * MIN, "inactivity"),
    ]


def test_sessions_in_one_millisecond_get_suffixes(sessions):
    t0 = NY_MIDNIGHT - 5 * H
    _, out = sessions(
        rules(change=True),
        [
            e(t0, "a", "close"),
            e(t0 + 1, "b", change="x"),
            e(t0 + 2, "c", change="y"),
        ],
    )
    ms = t0 // 1000
    assert [s["session_id"] for s in out.sessions] == [f"1-{ms}", f"1-{ms}-2", f"1-{ms}-3"]
