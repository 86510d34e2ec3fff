"""String user ids in the session logic: the same rules as integer ids (against the
reference), sessions keyed by the string, and session ids that stay unique."""

from __future__ import annotations

import pyarrow as pa

from sessionize import schema
from sessionize.logic import advance
from sessionize.mapping import EventMapping

from .helpers import MIN, RULES, T0, ev, rows_of
from .reference import reference_advance

LAYOUT = schema.layout(EventMapping(user_type="string"))
USERS = ["a-b", "a", "%2D", "ü✓用户", "b"]


def _table(rows, sch):
    return pa.Table.from_pylist(rows, sch)


def test_string_users_follow_the_reference_and_get_escaped_session_ids():
    state = [{**ev("a", T0 - 2 * MIN, "s"), "expires_at": 0}, {**ev("b", T0, "x"), "expires_at": 0}]
    events = [
        ev(u, T0 + i * MIN + k * 20 * MIN, f"p{k}", site=u)
        for i, u in enumerate(USERS)
        for k in range(3)
    ] + [ev("a-b", T0, "p0"), ev("b", T0 - 30 * MIN, "late")]  # a duplicate and a late event
    got = advance(
        _table(state, LAYOUT.state),
        _table(events, LAYOUT.event),
        rules=RULES,
        watermark_before=T0 - 20 * MIN,
        watermark_after=T0 + 45 * MIN,
        layout=LAYOUT,
    )
    want = reference_advance(
        state,
        events,
        gap_us=RULES.gap_us,
        close_actions=RULES.close_actions,
        watermark_before=T0 - 20 * MIN,
        watermark_after=T0 + 45 * MIN,
    )
    assert got.sessions.schema == LAYOUT.sessions

    def key(r):
        return (r["user_id"], r.get("start_time", r.get("event_time")))

    def without_ids(rows):
        return sorted(({k: v for k, v in r.items() if k != "session_id"} for r in rows), key=key)

    assert without_ids(rows_of(got.sessions)) == without_ids(want["sessions"])
    assert without_ids(rows_of(got.page_views)) == without_ids(want["page_views"])
    assert rows_of(got.late) == want["late"]
    assert got.state_removes.to_pylist() == sorted(want["state_removes"])
    assert got.stats.as_dict() == want["stats"]
    # `-` and `%` in a key are escaped (written by hand): the first `-` ends the user.
    rows = rows_of(got.sessions)
    ids = {r["user_id"]: r["session_id"] for r in rows}
    start_ms = {r["user_id"]: r["start_time"] // 1000 for r in rows}
    assert ids["a-b"] == f"a%2Db-{start_ms['a-b']}"
    assert ids["%2D"] == f"%252D-{start_ms['%2D']}"
    assert ids["ü✓用户"] == f"ü✓用户-{start_ms['ü✓用户']}"
    assert len(set(got.sessions["session_id"].to_pylist())) == got.sessions.num_rows
