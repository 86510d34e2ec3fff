"""Hypothesis properties of the session logic.

(a) With no late event, the emitted sessions and page views do not depend on how the events
    are split into micro-batches nor on their order within a batch — even when re-delivered
    copies of an event differ outside its key.
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

GAP = 10
FAR = 10**6  # a watermark past every generated event
SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])

events_st = st.builds(
    ev,
    user=st.integers(0, 3),
    t=st.integers(0, 80),
    page=st.sampled_from(["a", "b", "c"]),
    action=st.sampled_from(["view", "view", "view", "close"]),
    site=st.sampled_from([None, "x", "y"]),
    browser=st.sampled_from([None, "ff"]),
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
    """Re-deliveries of some events: exact copies, or copies differing outside the key."""
    copies = []
    for original in draw(st.lists(st.sampled_from(events), max_size=5), label="copied"):
        copy = dict(original)
        if draw(st.booleans(), label="differs"):
            copy["action"] = draw(st.sampled_from(["view", "close", "click"]))
            copy["site"] = draw(st.sampled_from([None, "x", "y"]))
        copies.append(copy)
    return copies


@st.composite
def on_time_batches(draw):
    """Events split into batches so that none is late under the watermark rule.

    Cut the time-sorted events into consecutive batches, then delay each event to any later
    batch whose watermark it is not below. Delays only lower the later watermarks, so no
    event becomes late; finally shuffle every batch.
    """
    lateness = draw(st.integers(0, 30), label="lateness")
    events = draw(st.lists(events_st, min_size=1, max_size=30))
    events = sorted(events + draw(copies_of(events)), key=lambda e: e["event_time"])
    n_batches = draw(st.integers(1, 5))
    cuts = sorted(draw(st.lists(st.integers(0, len(events)), min_size=n_batches - 1,
                                max_size=n_batches - 1)))  # fmt: skip
    bounds = [0, *cuts, len(events)]
    home = [b for b in range(n_batches) for _ in range(bounds[b], bounds[b + 1])]
    watermark_before, max_seen = [], None
    for b in range(n_batches):
        watermark_before.append(None if max_seen is None else max_seen - lateness)
        chunk = events[bounds[b] : bounds[b + 1]]
        if chunk:
            max_seen = max(max_seen or 0, chunk[-1]["event_time"])
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
    one_batch = run_stream(data, [[e for batch in batches for e in batch]], rules)
    assert run_stream(data, batches, rules) == one_batch


@st.composite
def steps_with_watermarks(draw):
    """Batches with arbitrary non-decreasing watermarks, late events and near-duplicates."""
    steps, watermark = [], draw(st.one_of(st.none(), st.integers(0, 40)), label="first wm")
    for _ in range(draw(st.integers(1, 4), label="steps")):
        events = draw(st.lists(events_st, max_size=20))
        if events:
            events = draw(st.permutations(events + draw(copies_of(events))))
        if watermark is None:
            after = draw(st.one_of(st.none(), st.integers(0, 100)), label="wm")
        else:
            after = watermark + draw(st.integers(0, 40), label="wm step")
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
