"""Revisions (`--revise-within`, docs/design.md "Revisions"): late events of the window
revise the sessions they join, and the current sessions (`sessions`, then each batch's
`session_revisions`) after every batch are those a plain loop gives by cutting again every
event known so far, for any arrival order and cut into batches."""

from __future__ import annotations

import random

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sessionize import schema
from sessionize.config import SessionRules
from sessionize.core.local import run_local
from sessionize.errors import ConfigError
from sessionize.logic.processor import SessionProcessor
from sessionize.mapping import EventMapping

from .helpers import MIN, ev, events_table, rows_of
from .reference import nulls_last
from .reference_rules import Rules, closing, ids_and_releases, split

MIDNIGHT = 1_570_752_000_000_000  # 2019-10-11T00:00:00Z
T0 = MIDNIGHT - 40 * MIN
HOUR = 60 * MIN
SESSION_FIELDS = ("user_id", "start_time", "end_time", "closed_at", "event_count", "pages")


def processor(window_us: int, max_duration_us: int | None = None, midnight: bool = False):
    rules = SessionRules(
        gap_us=10 * MIN,
        lateness_us=0,
        close_actions=("close",),
        max_duration_us=max_duration_us,
        split_at_midnight=midnight,
        revise_within_us=window_us,
    )
    return SessionProcessor(rules)


def current(run) -> tuple[dict[str, dict], list[list[dict]]]:
    """The current sessions by id after the run, folded batch by batch as the docs' query
    does (the latest row of an id wins, a retraction removes it), and each batch's
    `session_revisions` rows."""
    now: dict[str, dict] = {}
    per_batch = []
    for written, revised in zip(
        run.outputs["sessions"], run.outputs["session_revisions"], strict=True
    ):
        for row in rows_of(written):
            assert row["session_id"] not in now, "a first write of a current id"
            now[row["session_id"]] = row
        revisions = rows_of(revised)
        for row in map(dict, revisions):
            if row.pop("retracted"):
                del now[row["session_id"]]
            else:
                row.pop("revision")
                now[row["session_id"]] = row
        per_batch.append(revisions)
    return now, per_batch


def summary(rows: dict[str, dict]) -> dict[str, tuple]:
    return {sid: tuple(r[f] for f in SESSION_FIELDS) for sid, r in rows.items()}


# ---------------------------------------------------------------------------- reference


def users_cut(known: list[dict], rules: Rules):
    """Per user (in order), its known events cut again one at a time, the smallest copy of
    a duplicate kept."""
    kept: dict[tuple, dict] = {}
    for e in known:
        key = (e["user_id"], e["event_time"], e["page"])
        if key not in kept or nulls_last(e) < nulls_last(kept[key]):
            kept[key] = e
    for user in sorted({k[0] for k in kept}):
        events = sorted(
            (e for k, e in kept.items() if k[0] == user), key=lambda e: (e["event_time"], e["page"])
        )
        yield user, split(events, rules)


def reference(known: list[dict], rules: Rules, watermark: int | None) -> dict[str, tuple]:
    """Every known event cut again per user, one at a time (the smallest copy of a
    duplicate kept): the sessions the watermark has passed, by id."""
    out = {}
    for user, cut in users_cut(known, rules):
        closed = closing(cut, rules)
        named = ids_and_releases(user, cut, [c for c, _ in closed])
        for session, (closed_at, _), (sid, release) in zip(cut, closed, named, strict=True):
            if watermark is None or not release < watermark:
                continue
            times = [e["event_time"] for e in session.events]
            pages = [e["page"] for e in session.events]
            out[sid] = (user, times[0], times[-1], closed_at, len(times), pages)
    return out


def batches_of(draw, events: list[dict]) -> list[list[dict]]:
    order = draw(st.permutations(events))
    cuts = sorted(draw(st.sets(st.integers(1, max(len(order) - 1, 1)), max_size=4)))
    bounds = [0, *cuts, len(order)]
    return [list(order[a:b]) for a, b in zip(bounds, bounds[1:], strict=False) if b > a]


@st.composite
def scenarios(draw):
    """Events of two users around midnight (some µs apart, some copies), in batches in any
    order, with rules and a window; sometimes the window covers the input's lateness."""
    n = draw(st.integers(1, 16))
    events = []
    for _ in range(n):
        minute = draw(st.integers(0, 80))
        events.append(
            ev(
                draw(st.sampled_from([1, 2])),
                T0 + minute * MIN + draw(st.sampled_from([0, 0, 0, 1])),
                draw(st.sampled_from(["a", "b"])),
                draw(st.sampled_from(["view", "view", "view", "close"])),
                site=draw(st.sampled_from([None, "x", "y"])),
            )
        )
    events += draw(st.lists(st.sampled_from(events), max_size=3))  # re-deliveries
    batches = batches_of(draw, events)
    window = draw(st.sampled_from([5 * MIN, 20 * MIN, 3 * HOUR]))
    max_duration = draw(st.sampled_from([None, 25 * MIN]))
    midnight = draw(st.booleans())
    return batches, window, max_duration, midnight


@settings(max_examples=40, deadline=None)
@given(scenarios())
def test_current_sessions_equal_a_recut_of_every_known_event_after_each_batch(scenario):
    batches, window, max_duration, midnight = scenario
    flush = [ev(9, T0 + 10 * HOUR, "end")]  # a later event moves the watermark past all
    p = processor(window, max_duration, midnight)
    rules = Rules(10 * MIN, ("close",), max_duration, "UTC", midnight)
    run = run_local(p, [events_table(b) for b in [*batches, flush]])
    known: list[dict] = []
    latest = None
    written: dict[str, int] = {}
    for i, batch in enumerate([*batches, flush]):
        before = latest
        for e in batch:
            if before is None or e["event_time"] >= before - window:
                known.append(e)
        late = sorted(
            (e["user_id"], e["event_time"], e["page"])
            for e in batch
            if before is not None and e["event_time"] < before - window
        )
        latest = max([latest or 0, *(e["event_time"] for e in batch)])
        partial = type(run)(state=run.state)
        partial.outputs = {k: v[: i + 1] for k, v in run.outputs.items()}
        now, per_batch = current(partial)
        got = summary({k: v for k, v in now.items() if v["user_id"] != 9})
        want = {k: v for k, v in reference(known, rules, latest).items() if v[0] != 9}
        assert got == want, f"after batch {i}"
        got_late = rows_of(run.outputs["late_events"][i])
        assert sorted((r["user_id"], r["event_time"], r["page"]) for r in got_late) == late
        for row in per_batch[-1]:  # a revision outnumbers every earlier write of its id
            assert row["revision"] > written.get(row["session_id"], -1)
            written[row["session_id"]] = row["revision"]
        for row in rows_of(run.outputs["sessions"][i]):
            written[row["session_id"]] = 0
    if window == 3 * HOUR:  # it covers the input's lateness: as one batch of every event
        everything = [e for b in batches for e in b] + flush
        once = run_local(processor(window, max_duration, midnight), [events_table(everything)])
        assert summary(current(run)[0]) == summary(current(once)[0])
    # Page views follow their session: the current ones are those of its latest write.
    views: dict[str, list] = {}
    for first, again in zip(
        run.outputs["page_views"], run.outputs["page_view_revisions"], strict=True
    ):
        for out in (first, again):
            fresh: dict[str, list] = {}
            for r in rows_of(out):
                fresh.setdefault(r["session_id"], []).append(r["page"])
            views.update(fresh)
    now, _ = current(run)
    for sid, row in now.items():
        assert views[sid] == row["pages"]


# ---------------------------------------------------------------------------- cases


def run_of(batches: list[list[dict]], window: int = HOUR):
    return run_local(processor(window), [events_table(b) for b in batches])


def revisions_of(run, batch: int) -> list[tuple]:
    rows = rows_of(run.outputs["session_revisions"][batch])
    return [(r["session_id"], r["revision"], r["retracted"], r["event_count"]) for r in rows]


def test_late_event_extends_a_session_which_keeps_its_id():
    a = ev(1, T0, "a")
    run = run_of(
        [[a, ev(1, T0 + 5 * MIN, "b")], [ev(2, T0 + 30 * MIN, "z")], [ev(1, T0 + 14 * MIN, "c")]]
    )
    first = rows_of(run.outputs["sessions"][1])
    assert [(r["session_id"], r["event_count"]) for r in first] == [(f"1-{T0 // 1000}", 2)]
    assert revisions_of(run, 2) == [(f"1-{T0 // 1000}", 1, False, 3)]


def test_late_event_bridging_two_sessions_keeps_the_earlier_id_and_retracts_the_later():
    early, later = f"1-{T0 // 1000}", f"1-{(T0 + 18 * MIN) // 1000}"
    run = run_of(
        [
            [ev(1, T0, "a"), ev(1, T0 + 18 * MIN, "b")],
            [ev(2, T0 + 60 * MIN, "z")],
            [ev(1, T0 + 9 * MIN, "c")],
        ]
    )
    written = [r["session_id"] for b in (0, 1) for r in rows_of(run.outputs["sessions"][b])]
    assert written == [early, later]
    assert revisions_of(run, 2) == [(early, 1, False, 3), (later, 1, True, None)]
    views = rows_of(run.outputs["page_view_revisions"][2])
    assert [(v["session_id"], v["page"], v["position"]) for v in views] == [
        (early, "a", 1),
        (early, "c", 2),
        (early, "b", 3),
    ]


def test_late_event_before_a_session_moves_its_start_and_so_its_id():
    old, new = f"1-{T0 // 1000}", f"1-{(T0 - 5 * MIN) // 1000}"
    run = run_of([[ev(1, T0, "a")], [ev(2, T0 + 30 * MIN, "z")], [ev(1, T0 - 5 * MIN, "b")]])
    assert revisions_of(run, 2) == [(new, 1, False, 2), (old, 1, True, None)]


def test_late_event_between_sessions_is_a_first_write():
    run = run_of(
        [
            [ev(1, T0, "a"), ev(1, T0 + 40 * MIN, "b")],
            [ev(2, T0 + 60 * MIN, "z")],
            [ev(1, T0 + 20 * MIN, "c")],
        ]
    )
    assert [r["session_id"] for r in rows_of(run.outputs["sessions"][2])] == [
        f"1-{(T0 + 20 * MIN) // 1000}"
    ]
    assert revisions_of(run, 2) == []


def test_redelivered_kept_event_writes_nothing():
    a = ev(1, T0, "a", site="x")
    run = run_of([[a], [ev(2, T0 + 30 * MIN, "z")], [a]])
    assert rows_of(run.outputs["sessions"][2]) == []
    assert revisions_of(run, 2) == []


def test_event_older_than_the_window_is_late_and_the_kept_session_leaves_the_state():
    run = run_of(
        [[ev(1, T0, "a")], [ev(2, T0 + 2 * HOUR, "z")], [ev(1, T0 + 5 * MIN, "b")]], window=HOUR
    )
    late = rows_of(run.outputs["late_events"][2])
    assert [(r["user_id"], r["page"]) for r in late] == [(1, "b")]
    assert revisions_of(run, 2) == []
    assert 1 not in run.state.column("user_id").to_pylist()


def test_kept_session_is_dropped_by_its_timer_once_the_window_passed():
    run = run_of([[ev(1, T0, "a")], [ev(2, T0 + 30 * MIN, "z")], [ev(3, T0 + 3 * HOUR, "y")]])
    users_after = run.state.column("user_id").to_pylist()
    assert 1 not in users_after


def test_revisions_are_part_of_the_rules_recorded():
    assert processor(HOUR).params()["revise_within"] == "1h"
    assert "revise_within" not in SessionProcessor(SessionRules()).params()


def test_revisions_refuse_what_they_do_not_revise_yet():
    rules = SessionRules(revise_within_us=HOUR)
    with pytest.raises(ConfigError, match="--open-sessions"):
        SessionProcessor(rules, open_sessions=True)
    with pytest.raises(ConfigError, match="--session-columns 3"):
        SessionProcessor(rules, schema.layout(EventMapping(session_columns=3)))


def test_state_rows_carry_the_marks():
    assert processor(HOUR).state_schema.names[-2:] == ["emitted_session", "emitted_revision"]
    assert pa.types.is_string(processor(HOUR).state_schema.field("emitted_session").type)


# ---------------------------------------------------------------------------- many users


def kept_reference(known: list[dict], rules: Rules, watermark: int, window: int) -> dict:
    """Per user, what the state must hold after a batch: the keys of the events of its
    sessions still open or emitted within the window (release + window not passed), and
    its timer, the earliest of the open ones' releases and the kept ones' release +
    window. One user at a time, every known event cut again."""
    out = {}
    for user, cut in users_cut(known, rules):
        named = ids_and_releases(user, cut, [c for c, _ in closing(cut, rules)])
        keys, timers = [], []
        for session, (_, release) in zip(cut, named, strict=True):
            hold = release + window if release < watermark else release
            if hold >= watermark:
                keys += [(e["event_time"], e["page"]) for e in session.events]
                timers.append(hold)
        if keys:
            out[user] = (keys, min(timers))
    return out


def test_on_time_users_keep_their_sessions_while_a_few_late_ones_revise():
    """Forty users over two and a half hours across midnight, batches of eight minutes:
    most users only send on-time events (their kept sessions stay as they are, out of the
    re-cut), a few per batch send one behind the watermark but within the window. After
    every batch the current sessions, the late events and the state's events and timers
    equal a plain re-cut of every known event."""
    rng = random.Random(52)
    window = 3 * HOUR
    rules = Rules(10 * MIN, ("close",), 25 * MIN, "UTC", True)
    batches: list[list[dict]] = []
    latest = T0
    for _ in range(19):
        batch = [
            ev(
                rng.randrange(1, 41),
                latest + rng.randrange(0, 8 * MIN),
                rng.choice("ab"),
                rng.choice(["view"] * 5 + ["close"]),
            )
            for _ in range(12)
        ]
        for _ in range(rng.randrange(0, 3)):  # late, some within the window, rarely not
            back = rng.choice([MIN, 20 * MIN, 70 * MIN, 4 * HOUR])
            batch.append(ev(rng.randrange(1, 41), latest - back, rng.choice("ab")))
        batches.append(batch)
        latest = max(e["event_time"] for e in batch)
    flush = [ev(99, latest + 10 * HOUR, "end")]
    p = processor(window, 25 * MIN, midnight=True)
    known: list[dict] = []
    watermark = None
    for i, batch in enumerate([*batches, flush]):
        run = run_local(p, [events_table(b) for b in [*batches, flush][: i + 1]])
        before = watermark
        known += [e for e in batch if before is None or e["event_time"] >= before - window]
        watermark = max([watermark or 0, *(e["event_time"] for e in batch)])
        now, _ = current(run)
        got = summary({k: v for k, v in now.items() if v["user_id"] != 99})
        want = {k: v for k, v in reference(known, rules, watermark).items() if v[0] != 99}
        assert got == want, f"after batch {i}"
        late = rows_of(run.outputs["late_events"][i])
        assert len(late) == sum(before is not None and e["event_time"] < before - window
                                for e in batch)  # fmt: skip
        state: dict[int, tuple] = {}
        for r in sorted(rows_of(run.state), key=lambda r: (r["event_time"], r["page"])):
            keys, timers = state.setdefault(r["user_id"], ([], set()))
            keys.append((r["event_time"], r["page"]))
            timers.add(r["expires_at"])
        want_state = kept_reference(known, rules, watermark, window)
        got_state = {u: (keys, timers) for u, (keys, timers) in state.items() if u != 99}
        assert got_state == {u: (k, {t}) for u, (k, t) in want_state.items() if u != 99}
