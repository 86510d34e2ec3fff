"""The state tools on a job with `--anonymous-field` and `--revise-within`: beside its open
events a job's state holds each anonymous id's identity row and the sessions kept for the
window. Only the open events make open sessions, each with the user the identity row and
the id's events so far give it (docs/design.md, "State tools")."""

from __future__ import annotations

from dataclasses import replace

import pyarrow as pa

from sessionize.commands.statetools.contents import open_sessions
from sessionize.config import SessionRules
from sessionize.mapping import EventMapping
from sessionize.schema import layout
from tests.commands.state_fixture import t

SHAPE = replace(
    layout(EventMapping(anonymous="anonymous_id", user_type="string", session_columns=2)),
    revise=True,
)
# anonymous id, time, page, action, user id sent, identity row's first seen, kept session
ROWS = [
    ("d1", "10:00", "home", "view", None, None, None),
    ("d1", "10:02", "cart", "view", "ann", None, None),  # a login: the session is ann's
    ("d2", "09:00", "", "", "bob", "08:00", None),  # d2's identity row: bob
    ("d2", "10:01", "home", "view", None, None, None),  # open, bob's by the identity row
    ("d3", "09:00", "", "", "cy", "08:30", None),  # an identity row alone: no session
    ("d4", "09:30", "home", "view", None, None, "d4-1793525400000"),  # kept: not open
]


def _rows() -> pa.Table:
    columns: dict[str, list] = {name: [] for name in SHAPE.stored.names}
    for anon, time, page, action, user, first_seen, kept in ROWS:
        given = {
            "user_id": anon,
            "event_time": t(time),
            "page": page,
            "action": action,
            "sent_user_id": user,
            "identity_first_seen": first_seen and t(first_seen),
            "identity_user_time": first_seen and t(time),
            "emitted_session": kept,
            "emitted_revision": 0 if kept else None,
            "expires_at": t("11:00"),
        }
        for f in SHAPE.stored:  # the store's key and the attributes: any value
            blank = None if f.nullable else ("" if pa.types.is_string(f.type) else 0)
            columns[f.name].append(given.get(f.name, blank))
    return pa.table(columns, schema=SHAPE.stored)


def test_open_sessions_leave_identity_and_kept_rows_out_and_carry_the_users_so_far():
    got = open_sessions(_rows(), SessionRules(revise_within_us=3_600_000_000), SHAPE)
    shown = sorted((r["anonymous_id"], r["user_id"], r["event_count"]) for r in got.to_pylist())
    assert shown == [("d1", "ann", 2), ("d2", "bob", 1)]
