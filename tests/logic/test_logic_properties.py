"""Hypothesis properties of the session logic.

(a) With no late event, the emitted sessions and page views do not depend on how the events
    are split into micro-batches nor on the order they arrive in — even when re-delivered
    copies of an event differ outside its key, in any column.
(b) Step by step, with late events, re-deliveries, close actions and given watermarks,
    the vectorized logic gives exactly what the one-event-at-a-time reference gives.

Both drive `advance` like the engine does: a dict keyed by user stands for the state store,
each step hands in the users with new events, the users whose `expires_at` is below the new
watermark, and some arbitrary others, then applies `state_puts` and `state_removes`.
"""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sessionize.config import SessionRules
from sessionize.logic import advance

from .helpers import ev, events_table, outcome_of, rows_of, run_reference, state_table

# Times are realistic: an origin drawn per example (late in a day, one of them just before
# the epoch), plus whole steps of a minute and 457 µs, a day later now and then, and a
# microsecond either way. So events share instants (keys, ties broken by page), fall exactly
# at and just past the gap, carry sub-millisecond parts that make a floored difference
# differ from a difference of floored times, and sessions start on several dates, before
# and after the epoch, and run across midnight.
STEP = 60_000_457
DAY = 86_400_000_000
GAP = 10 * STEP
ORIGINS = (  # 40 steps after each, midnight has passed
    -DAY + 23 * 3_600_000_000 + 20 * 60_000_000 + 321,  # 1969-12-31T23:20:00.000321Z
    1_570_752_000_000_000 - 40 * STEP,  # 40 steps before 2019-10-11T00:00:00Z
    1_774_740_000_000_001,  # 2026-03-28T23:20:00.000001Z
)
FAR = max(ORIGINS) + 10 * DAY  # a watermark past every generated event
SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
# The columns that decide which copy of a duplicated event survives, in tie-break order.
TIE_BREAK = ("action", "site", "api_version", "browser", "language", "device_type")
VALUES = {
    "action": ["view", "view", "view", "close", "click"],
    "site": [None, "x", "y"],
    "api_version": [None, "v1", "v2"],
    "browser": [None, "ff", "Ff"],
    "language": [None, "en", "de"],
    "device_type": [None, "pc", "mobile"],
}


def instants(origin: int, steps: int = 80):
    """Times near `origin`: whole steps, sometimes a day later, sometimes 1 µs off."""
    return st.builds(
        lambda k, day, nudge: origin + k * STEP + day * DAY + nudge,
        st.integers(0, steps),
        st.sampled_from([0, 0, 0, 1]),
        st.sampled_from([0, 0, 0, 1, -1]),
    )


def events_st(origin: int):
    return st.builds(
        ev,
        user=st.integers(0, 3),
        t=instants(origin),
        page=st.sampled_from(["a", "b", "c"]),
        **{name: st.sampled_from(values) for name, values in VALUES.items()},
    )


def rules_with(lateness: int) -> SessionRules:
    return SessionRules(gap_us=GAP, lateness_us=lateness, close_actions=("close",))


class Store:
    """The state store as the engine sees it: user -> that user's state rows."""

    def __init__(self) -> None:
        self.rows: dict[int, list[dict]] = {}

    def handed_in(self, data, batch: list[dict], watermark_after: int | None) -> list[dict]:
        users = {e["user_id"] for e in batch}
        if watermark_after is not None:
            users |= {u for u, rows in self.rows.items() if rows[0]["expires_at"] < watermark_after}
        if self.rows:
            users |= data.draw(st.sets(st.sampled_from(sorted(self.rows))), label="extra users")
        self.users = users
        return [row for u in sorted(users) for row in self.rows.get(u, [])]

    def apply(self, puts: list[dict], removes: list[int]) -> None:
        put_users = {row["user_id"] for row in puts}
        assert put_users <= self.users
        assert set(removes) <= self.users & set(self.rows)
        assert not put_users & set(removes)
        assert self.users & set(self.rows) <= put_users | set(removes)
        for user in removes:
            del self.rows[user]
        new: dict[int, list[dict]] = {}
        for row in puts:
            new.setdefault(row["user_id"], []).append(row)
        for user, rows in new.items():
            assert len({row["expires_at"] for row in rows}) == 1
            self.rows[user] = rows


def run_stream(data, batches: list[list[dict]], rules: SessionRules):
    """Every batch with the watermark rule (docs/design.md, "Semantics", item 2), then a
    flush; all emitted rows."""
    store = Store()
    sessions, page_views = [], []
    watermark, max_seen = None, None
    for batch in [*batches, None]:
        if batch is None:  # flush: a watermark past everything, no events
            batch, after = [], FAR
        else:
            if batch:
                seen = max(e["event_time"] for e in batch)
                max_seen = seen if max_seen is None else max(max_seen, seen)
            after = None if max_seen is None else max_seen - rules.lateness_us
        state_rows = store.handed_in(data, batch, after)
        result = advance(
            state_table(state_rows),
            events_table(batch),
            rules=rules,
            watermark_before=watermark,
            watermark_after=after,
        )
        assert result.late.num_rows == 0
        store.apply(rows_of(result.state_puts), result.state_removes.to_pylist())
        sessions += rows_of(result.sessions)
        page_views += rows_of(result.page_views)
        watermark = after
    assert store.rows == {}
    sessions.sort(key=lambda s: (s["user_id"], s["start_time"], s["pages"]))
    page_views.sort(key=lambda p: (p["user_id"], p["event_time"], p["page"]))
    return sessions, page_views


@st.composite
def copies_of(draw, events: list[dict]) -> list[dict]:
    """Re-deliveries of some events: exact copies, or copies equal to the original in the
    first tie-break columns and drawn anew from some column on, so that every column gets
    to decide which copy survives."""
    copies = []
    for original in draw(st.lists(st.sampled_from(events), max_size=5), label="copied"):
        copy = dict(original)
        same = draw(st.integers(0, len(TIE_BREAK)), label="columns kept")
        for name in TIE_BREAK[same:]:
            copy[name] = draw(st.sampled_from(VALUES[name]))
        copies.append(copy)
    return copies


@st.composite
def on_time_batches(draw):
    """Events split into batches so that none is late under the watermark rule.

    Cut the time-sorted events into consecutive batches, then delay each event to any later
    batch whose watermark it is not below. Delays only lower the later watermarks, so no
    event becomes late; finally shuffle every batch.
    """
    origin = draw(st.sampled_from(ORIGINS), label="origin")
    lateness = draw(st.integers(0, 30), label="lateness") * STEP
    events = draw(st.lists(events_st(origin), min_size=1, max_size=30))
    events = sorted(events + draw(copies_of(events)), key=lambda e: e["event_time"])
    n_batches = draw(st.integers(1, 5))
    cuts = sorted(
        draw(st.lists(st.integers(0, len(events)), min_size=n_batches - 1, max_size=n_batches - 1))
    )
    bounds = [0, *cuts, len(events)]
    home = [b for b in range(n_batches) for _ in range(bounds[b], bounds[b + 1])]
    watermark_before, max_seen = [], None
    for b in range(n_batches):
        watermark_before.append(None if max_seen is None else max_seen - lateness)
        chunk = events[bounds[b] : bounds[b + 1]]
        if chunk:
            seen = chunk[-1]["event_time"]
            max_seen = seen if max_seen is None else max(max_seen, seen)
    batches = [[] for _ in range(n_batches)]
    for event, b in zip(events, home, strict=True):
        allowed = [
            j
            for j in range(b, n_batches)
            if watermark_before[j] is None or event["event_time"] >= watermark_before[j]
        ]
        batches[draw(st.sampled_from(allowed))].append(event)
    batches = [draw(st.permutations(batch)) for batch in batches]
    return lateness, batches


@SETTINGS
@given(on_time_batches(), st.data())
def test_sessions_do_not_depend_on_batch_split_or_order(split, data):
    lateness, batches = split
    rules = rules_with(lateness)
    # One batch in another arrival order: the copy that survives must not depend on it.
    arrived = data.draw(st.permutations([e for batch in batches for e in batch]), label="order")
    one_batch = run_stream(data, [arrived], rules)
    assert run_stream(data, batches, rules) == one_batch


@st.composite
def steps_with_watermarks(draw):
    """Batches with arbitrary non-decreasing watermarks, late events and near-duplicates."""
    origin = draw(st.sampled_from(ORIGINS), label="origin")
    steps, watermark = [], draw(st.one_of(st.none(), instants(origin, 40)), label="first wm")
    for _ in range(draw(st.integers(1, 4), label="steps")):
        events = draw(st.lists(events_st(origin), max_size=20))
        if events:
            events = draw(st.permutations(events + draw(copies_of(events))))
        if watermark is None:
            after = draw(st.one_of(st.none(), instants(origin, 100)), label="wm")
        else:
            step = draw(st.integers(0, 40), label="wm step") * STEP
            after = watermark + step + draw(st.sampled_from([0, 1]), label="wm nudge")
        steps.append((events, watermark, after))
        watermark = after
    return steps


@SETTINGS
@given(steps_with_watermarks(), st.data())
def test_vectorized_equals_reference_step_by_step(steps, data):
    rules = rules_with(0)  # unused: the watermarks are given
    store = Store()
    for events, before, after in [*steps, ([], steps[-1][2], FAR)]:
        state_rows = store.handed_in(data, events, after)
        got = outcome_of(
            advance(
                state_table(state_rows),
                events_table(events),
                rules=rules,
                watermark_before=before,
                watermark_after=after,
            )
        )
        expected = run_reference(state_rows, events, before, after, rules)
        assert got == expected
        store.apply(got.state_puts, got.state_removes)
    assert store.rows == {}
