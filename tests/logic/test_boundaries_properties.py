"""Hypothesis properties of the optional session rules (max duration, local midnight, field
change, per-event gap) against the per-user reference in `reference_rules`.

Events fall on a minute grid around a local midnight, some of them a DST day, with a few
sub-millisecond offsets: so events land exactly on start + D, on midnight, on the end of
a gap, and sessions start within one millisecond. Re-delivered copies differ only in a
rule's field; watermarks are arbitrary, so events also arrive late.
"""

from __future__ import annotations

from datetime import datetime
from zoneinfo import ZoneInfo

import pyarrow as pa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sessionize import schema
from sessionize.config import SessionRules
from sessionize.logic import advance
from sessionize.mapping import EventMapping

from .helpers import Outcome, outcome_of
from .reference import EVENT_COLUMNS, reference_advance
from .reference_rules import Rules, to_us

MIN = 60_000_000
SETTINGS = settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
# (zone, a local date whose midnight the events straddle): DST days, a skipped midnight
# (Santiago), a half-hour DST shift (Lord Howe), a half-hour zone.
DAYS = [
    ("UTC", (2026, 3, 8)),
    ("America/New_York", (2026, 3, 8)),
    ("America/New_York", (2026, 11, 2)),
    ("Europe/London", (2026, 3, 29)),
    ("America/Santiago", (2022, 9, 11)),
    ("America/Santiago", (2022, 4, 3)),
    ("Australia/Lord_Howe", (2026, 4, 5)),
    ("Asia/Kolkata", (2026, 1, 1)),
]


def midnight_us(zone: str, day: tuple[int, int, int]) -> int:
    return to_us(datetime(*day, tzinfo=ZoneInfo(zone)))


@st.composite
def scenarios(draw):
    zone, day = draw(st.sampled_from(DAYS))
    base = midnight_us(zone, day) - 90 * MIN
    rules = Rules(
        gap_us=draw(st.sampled_from([5, 10, 30])) * MIN,
        close_actions=("close",),
        max_duration_us=draw(st.sampled_from([None, 20 * MIN, 45 * MIN, 2 * MIN])),
        timezone=zone,
        split_at_midnight=draw(st.booleans()),
        change=draw(st.booleans()),
        gap_field=draw(st.booleans()),
    )

    def event():
        return st.fixed_dictionaries(
            {
                "user_id": st.integers(0, 2),
                "event_time": st.builds(
                    lambda m, us: base + m * MIN + us,
                    st.integers(0, 180),
                    st.sampled_from([0, 0, 0, 1, 500]),
                ),
                "page": st.sampled_from(["a", "b"]),
                "action": st.sampled_from(["view", "view", "view", "close"]),
                "site": st.sampled_from([None, "x"]),
                "change_value": st.sampled_from([None, "", "c1", "c2"]),
                "gap_us": st.sampled_from([None, MIN, 3 * MIN, 40 * MIN]),
            }
        )

    return rules, base, event


def to_session_rules(rules: Rules) -> SessionRules:
    return SessionRules(
        gap_us=rules.gap_us,
        lateness_us=0,
        close_actions=rules.close_actions,
        max_duration_us=rules.max_duration_us,
        timezone=rules.timezone,
        split_at_midnight=rules.split_at_midnight,
    )


def layout_of(rules: Rules) -> schema.Layout:
    mapping = EventMapping(
        change="campaign" if rules.change else None, gap="gap" if rules.gap_field else None
    )
    return schema.layout(mapping)


def shaped(event: dict, rules: Rules) -> dict:
    """The event with only the columns its layout has (attributes: default ones)."""
    row = {c: event.get(c) for c in EVENT_COLUMNS}
    if rules.change:
        row["change_value"] = event["change_value"]
    if rules.gap_field:
        gap = event["gap_us"]
        row["gap_us"] = None if gap is None else str(gap)
    return row


def run_vectorized(rules: Rules, state_rows, events, before, after) -> Outcome:
    lay = layout_of(rules)
    return outcome_of(
        advance(
            pa.Table.from_pylist(state_rows, lay.state),
            pa.Table.from_pylist(events, lay.event),
            rules=to_session_rules(rules),
            watermark_before=before,
            watermark_after=after,
            layout=lay,
        )
    )


def run_reference(rules: Rules, state_rows, events, before, after) -> Outcome:
    return Outcome(
        **reference_advance(
            state_rows,
            events,
            gap_us=rules.gap_us,
            close_actions=rules.close_actions,
            watermark_before=before,
            watermark_after=after,
            rules=rules,
        )
    )


def copies(draw, events: list[dict], rules: Rules) -> list[dict]:
    """Re-deliveries that differ only in a rule's field (or not at all)."""
    out = []
    for original in draw(st.lists(st.sampled_from(events), max_size=4)) if events else []:
        copy = dict(original)
        field = draw(st.sampled_from(["none", "change_value", "gap_us"]))
        if field == "change_value" and rules.change:
            copy["change_value"] = draw(st.sampled_from([None, "c1", "c3"]))
        elif field == "gap_us" and rules.gap_field:
            copy["gap_us"] = draw(st.sampled_from([None, str(2 * MIN), str(20 * MIN)]))
        out.append(copy)
    return out


class Store:
    """user -> state rows, as the engine keeps them; hands in due and extra users."""

    def __init__(self) -> None:
        self.rows: dict[int, list[dict]] = {}

    def handed_in(self, data, batch, after) -> list[dict]:
        users = {e["user_id"] for e in batch}
        if after is not None:
            users |= {u for u, rows in self.rows.items() if rows[0]["expires_at"] < after}
        if self.rows:
            users |= data.draw(st.sets(st.sampled_from(sorted(self.rows))), label="extra")
        return [row for u in sorted(users) for row in self.rows.get(u, [])]

    def apply(self, puts, removes) -> None:
        for user in removes:
            del self.rows[user]
        new: dict[int, list[dict]] = {}
        for row in puts:
            new.setdefault(row["user_id"], []).append(row)
        self.rows.update(new)


@SETTINGS
@given(scenarios(), st.data())
def test_every_rule_equals_the_reference_step_by_step(scenario, data):
    rules, base, event = scenario
    store, watermark = Store(), None
    steps = data.draw(st.integers(1, 4), label="steps")
    for step in range(steps + 1):
        if step < steps:
            events = [shaped(e, rules) for e in data.draw(st.lists(event(), max_size=15))]
            events = data.draw(st.permutations(events + copies(data.draw, events, rules)))
            low = base if watermark is None else watermark
            after = data.draw(
                st.one_of(st.none(), st.integers(low, base + 200 * MIN))
                if watermark is None
                else st.integers(low, low + 60 * MIN)
            )
        else:
            events, after = [], base + 10**6 * MIN  # past everything: all is emitted
        state_rows = store.handed_in(data, events, after)
        got = run_vectorized(rules, state_rows, events, watermark, after)
        assert got == run_reference(rules, state_rows, events, watermark, after)
        store.apply(got.state_puts, got.state_removes)
        watermark = after
    assert store.rows == {}


@SETTINGS
@given(scenarios(), st.data())
def test_sessions_do_not_depend_on_batches_or_arrival_order(scenario, data):
    """On-time events cut into batches in time order, each batch shuffled: the same
    sessions as one batch (batch equals stream)."""
    rules, base, event = scenario
    events = [shaped(e, rules) for e in data.draw(st.lists(event(), min_size=1, max_size=25))]
    events += copies(data.draw, events, rules)
    events.sort(key=lambda e: e["event_time"])
    cuts = sorted(data.draw(st.lists(st.integers(0, len(events)), max_size=4)))
    bounds = [0, *cuts, len(events)]
    pairs = zip(bounds, bounds[1:], strict=False)
    batches = [data.draw(st.permutations(events[a:b])) for a, b in pairs]

    def sessions_of(batches_in):
        store, watermark, out = Store(), None, []
        for batch in [*batches_in, None]:
            if batch is None:  # flush: past everything
                batch, after = [], base + 10**6 * MIN
            elif batch:  # the watermark trails the batch's earliest event: none is late
                after = min(e["event_time"] for e in batch)
                after = after if watermark is None else max(watermark, after)
            else:
                after = watermark
            state_rows = store.handed_in(data, batch, after)
            got = run_vectorized(rules, state_rows, batch, watermark, after)
            assert got.late == []
            store.apply(got.state_puts, got.state_removes)
            out += got.sessions
            watermark = after
        return sorted(out, key=lambda s: s["session_id"])

    assert sessions_of(batches) == sessions_of([[e for b in batches for e in b]])
