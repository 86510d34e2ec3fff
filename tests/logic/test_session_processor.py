"""Sessions as a keyed-core processor: `stateful.step` running the SessionProcessor gives,
step by step, what the one-event-at-a-time reference gives (sessions, page views, late
events, the stored rows with each user's expiry as the timer, the removed users, the
counters), and its stored rows are those the session engine has always written."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc
from hypothesis import given, settings
from hypothesis import strategies as st

from sessionize import schema
from sessionize.config import SessionRules
from sessionize.core.declared import declared
from sessionize.core.keys import store_keys
from sessionize.core.step import step
from sessionize.logic import advance
from sessionize.logic.processor import SessionProcessor
from sessionize.mapping import EventMapping
from sessionize.state import layout_rows

from .helpers import MIN, RULES, T0, ev, events_table, rows_of, run_reference
from .test_logic_properties import FAR, SETTINGS, rules_with, steps_with_watermarks


class StoredRows:
    """The store as the core sees it: every user's stored rows (events and `expires_at`)."""

    def __init__(self, rows: pa.Table) -> None:
        self.table = rows

    def handed_in(self, events: list[dict], before: int | None, after: int | None) -> list[dict]:
        """The rows `step` hands to `process`: of the users with on-time events or due."""
        users = {e["user_id"] for e in events if before is None or e["event_time"] >= before}
        rows = rows_of(self.table)
        due = {r["user_id"] for r in rows if after is not None and r["expires_at"] < after}
        return sorted((r for r in rows if r["user_id"] in users | due), key=lambda r: r["user_id"])

    def apply(self, puts: pa.Table, removes: pa.Array) -> None:
        gone = pa.concat_arrays([removes, puts.column("user_id").combine_chunks()])
        kept = self.table.filter(pc.invert(pc.is_in(self.table["user_id"], value_set=gone)))
        self.table = pa.concat_tables([kept, puts])


@settings(SETTINGS, max_examples=60)
@given(steps_with_watermarks(), st.data())
def test_session_processor_equals_reference_step_by_step(steps, data):
    processor = SessionProcessor(rules_with(0))  # the watermarks are given
    store = StoredRows(declared(processor).rows.empty())
    for batch_id, (events, before, after) in enumerate([*steps, ([], steps[-1][2], FAR)]):
        state_rows = store.handed_in(events, before, after)
        expected = run_reference(state_rows, events, before, after, processor.rules)
        got = step(
            processor,
            store.table,
            events_table(events),
            batch_id=batch_id,
            partition=0,
            watermark_before=before,
            watermark_after=after,
        )
        assert rows_of(got.outputs["sessions"]) == expected.sessions
        assert rows_of(got.outputs["page_views"]) == expected.page_views
        assert rows_of(got.outputs["late_events"]) == expected.late
        by_user = sorted(rows_of(got.puts), key=lambda r: r["user_id"])
        assert by_user == sorted(expected.state_puts, key=lambda r: r["user_id"])
        assert sorted(got.removes.to_pylist()) == sorted(expected.state_removes)
        stats = expected.stats
        assert got.counts["late"] == stats["late"]
        assert got.counts["rows"] == stats["events_in"]
        assert got.counters.get("duplicates", 0) == stats["duplicates"]
        assert got.counters.get("sessions_out", 0) == stats["sessions_out"]
        assert got.counters.get("open_sessions", 0) == (
            stats["open_sessions_after"] - stats["open_sessions_before"]
        )
        store.apply(got.puts, got.removes)
    assert store.table.num_rows == 0


def test_stored_rows_are_the_session_engines():
    """The core's stored rows of the SessionProcessor are the session layout's: same schema,
    store key and expiry column, so that a session state written before continues."""
    for mapping in (EventMapping(), EventMapping(user_type="string")):
        lay = schema.layout(mapping)
        assert declared(SessionProcessor(RULES, lay)).rows == layout_rows(lay)


def test_string_ids_with_open_sessions_match_advance():
    """String ids: the stored rows carry `user_key` = xxhash64 of the id; open sessions are
    replaced for every user handed in; all equal to what `advance` gives."""
    lay = schema.layout(EventMapping(user_type="string"))
    rules = SessionRules(gap_us=10 * MIN, lateness_us=0, close_actions=("browser_close",))
    processor = SessionProcessor(rules, lay, open_sessions=True)
    events = [ev(u, T0 + i * MIN, "p") for i, u in enumerate(["a", "b", "a", "c"])]
    events += [ev("b", T0 - 30 * MIN, "late")]
    table = pa.Table.from_pylist(events, lay.event)
    before, after = T0 - 20 * MIN, T0 + 2 * MIN + 1
    got = step(
        processor,
        None,
        table,
        batch_id=0,
        partition=0,
        watermark_before=before,
        watermark_after=after,
    )
    want = advance(
        lay.state.empty_table(),
        table,
        rules=rules,
        watermark_before=before,
        watermark_after=after,
        layout=lay,
        open_sessions=True,
    )
    assert got.outputs["sessions"].equals(want.sessions)
    assert got.outputs["late_events"].equals(want.late)
    opened = got.outputs[schema.OPEN_SESSIONS]
    assert opened.drop_columns([schema.UPDATED_BATCH]).equals(want.open_sessions)
    assert set(opened[schema.UPDATED_BATCH].to_pylist()) == {0}
    assert sorted(got.deletes[schema.OPEN_SESSIONS]["user_id"].to_pylist()) == ["a", "b", "c"]
    stored = want.state_puts.append_column(
        schema.STATE_USER_KEY, store_keys(want.state_puts["user_id"])
    )
    assert got.puts.equals(stored.cast(lay.stored))
