"""The users step with revisions (logic/users_revised.py) behind the first step, as the
session processor chains them (`run_local`): after every batch, the current numbered
sessions (`sessions`, then each batch's `session_revisions`) and the `users` change log
equal a plain loop over the current sessions of every event known (numbered per stitched
user by close, start and id, attributed to the last non-direct session within the
lookback, summed per user), for several cuts into batches, with late logins that move a
session to another stitched user and late sessions that renumber later ones."""

from __future__ import annotations

import datetime as dt
import random

import pyarrow as pa
import pytest

from sessionize import schema
from sessionize.config import SessionRules
from sessionize.core.local import run_local
from sessionize.logic.processor import SessionProcessor
from sessionize.logic.users import UserRules
from sessionize.mapping import EventMapping

from .test_identity import GAP, T0, visits
from .test_revised_identity import expected, seconds
from .test_users import reference as numbering_loop

LAYOUT = schema.layout(
    EventMapping(
        anonymous="anonymous_id",
        user_type="string",
        session_columns=2,
        url="url",
        referrer="referrer",
    )
)
LOOKBACK = 2 * 3600


def rules(window: int, ttl: int | None = None) -> SessionRules:
    return SessionRules(
        gap_us=GAP * 1_000_000,
        lateness_us=0,
        close_actions=(),
        revise_within_us=window * 1_000_000,
        attribution_lookback_us=LOOKBACK * 1_000_000,
        user_ttl_us=None if ttl is None else ttl * 1_000_000,
    )


LANDINGS = [
    ("https://shop.example/a", None),
    ("https://shop.example/b", None),
    ("https://shop.example/c?utm_source=Newsletter&utm_medium=email&utm_campaign=May", None),
    ("https://shop.example/d", "https://www.google.com/"),
    ("https://shop.example/e", "https://news.example.org/story"),
]
NUMBERED = (
    "session_number",
    "is_new_user",
    "attributed_channel",
    "attributed_source",
    "attributed_medium",
    "attributed_campaign",
)
CONTENT = ("anonymous_id", "start_time", "end_time", "event_count", "user_id", "stitched_user_id")


def events_table(events: list[dict]) -> pa.Table:
    rows = [
        {
            "user_id": e["anonymous_id"],
            "event_time": T0 + dt.timedelta(seconds=e["t"]),
            "page": e["page"],
            "action": "view",
            "sent_user_id": e["user_id"],
            "url": e["url"],
            "referrer": e["referrer"],
        }
        for e in events
    ]
    return pa.Table.from_pylist(rows, schema=LAYOUT.event)


def arrivals(seed: int, cut: int) -> list[list[dict]]:
    """The visits' events with pages and traffic, in time order but half of them delayed
    by up to three hours (late events, some with a user id), in batches cut by `cut`."""
    rnd = random.Random(seed)
    events = sorted(visits(seed), key=lambda e: e["t"])
    out = []
    for i, e in enumerate(events):
        url, referrer = rnd.choice(LANDINGS)
        out.append({**e, "page": f"p{i}", "url": url, "referrer": referrer})
    arrive = [e["t"] + (rnd.randrange(3 * 3600) if rnd.random() < 0.5 else 0) for e in out]
    ordered = [e for _, e in sorted(zip(arrive, out, strict=True), key=lambda p: p[0])]
    sizes = random.Random(cut)
    batches, at = [], 0
    while at < len(ordered):
        size = sizes.randrange(2, 16)
        batches.append(ordered[at : at + size])
        at += size
    return batches


def us_of(t: dt.datetime) -> int:
    return round((t - T0).total_seconds() * 1_000_000) + int(T0.timestamp()) * 1_000_000


def loop_input(rows: dict[str, dict]) -> list[dict]:
    """The current sessions as the numbering loop takes them (times in µs)."""
    out = []
    for sid, r in rows.items():
        out.append(
            {
                **{k: r[k] for k in ("event_count", "landing_page", "utm_source", "utm_medium")},
                **{k: r[k] for k in ("utm_campaign", "referrer_host", "channel", "engaged")},
                "session_id": sid,
                "stitched_user_id": r["stitched_user_id"],
                "start_time": us_of(r["start_time"]),
                "end_time": us_of(r["end_time"]),
                "closed_at": us_of(r["closed_at"]),
                "page_view_count": r["page_view_count"],
            }
        )
    return out


def check_run(
    batches: list[list[dict]], seen: dict[str, int], window: int = 4 * 3600, ttl: int | None = None
) -> None:
    """`batches`, then an event of another device far later that closes every session;
    with a `window` shorter than the delays, the events behind it are late and left out;
    with a `ttl` (seconds) a user's numbering restarts after that long without events
    (the `users` rows are then checked for the users of the latest spans)."""
    top = max(e["t"] for b in batches for e in b)
    flush = {"anonymous_id": "anon-flush", "t": top + 10 * 3600, "user_id": None}
    batches = [
        *batches,
        [{**flush, "page": "end", "url": "https://shop.example/", "referrer": None}],
    ]
    processor = SessionProcessor(rules(window, ttl), LAYOUT)
    run = run_local(processor, [events_table(b) for b in batches])
    known: list[dict] = []
    now: dict[str, dict] = {}
    users: dict[str, tuple] = {}
    views: dict[str, list] = {}
    latest = None
    user_rules = UserRules(10**18 if ttl is None else ttl * 1_000_000, LOOKBACK * 1_000_000)
    for i, batch in enumerate(batches):
        known += [e for e in batch if latest is None or e["t"] >= latest - window]
        seen["late"] += run.outputs["late_events"][i].num_rows
        latest = max([latest or 0, *(e["t"] for e in batch)])
        after = int((T0.timestamp() + latest) * 1_000_000)
        for row in run.outputs["sessions"][i].to_pylist():
            assert row["session_id"] not in now, "a first write of a current id"
            now[row["session_id"]] = row
        for row in run.outputs["session_revisions"][i].to_pylist():
            old = now.pop(row["session_id"], None)  # none: a start moved earlier, a new id
            if row.pop("retracted"):
                assert old is not None, "a retraction of an id not current"
                continue
            row.pop("revision")
            if old is not None:
                assert row != old, "a revision that changes nothing"
                if all(row[c] == old[c] for c in ("start_time", "end_time", "pages")):
                    seen["renumbered"] += row["session_number"] != old["session_number"]
                seen["moved"] += row["stitched_user_id"] != old["stitched_user_id"]
            now[row["session_id"]] = row
        # The sessions' content and users are the first step's (test_revised_identity).
        content = {
            sid: (r["anonymous_id"], seconds(r["start_time"]), seconds(r["end_time"]),
                  r["event_count"], r["user_id"], r["stitched_user_id"])
            for sid, r in now.items()
        }  # fmt: skip
        assert content == expected(known, after, ttl), f"after batch {i}"
        numbered, totals = numbering_loop([loop_input(now)], user_rules)
        got = {(sid, *(r[c] for c in NUMBERED)) for sid, r in now.items()}
        assert got == numbered[0], f"after batch {i}"
        for row in run.outputs["users"][i].to_pylist():  # 0 sessions: none left
            users[row["stitched_user_id"]] = row
            if row["sessions"] == 0:
                del users[row["stitched_user_id"]]
        want = {t[0]: t[:10] for t in totals[0]}
        got_users = {
            k: (k, us_of(r["first_session_start"]), us_of(r["last_session_start"]),
                r["sessions"], r["events"], r["page_views"], r["engaged_sessions"],
                r["first_channel"], r["first_landing_page"], r["last_channel"])
            for k, r in users.items() if k != "anon-flush" and (ttl is None or k in want)
        }  # fmt: skip
        assert got_users == want, f"after batch {i}"
        # Page views are the first step's: a session renumbered only keeps its own.
        for name in ("page_views", "page_view_revisions"):
            fresh: dict[str, list] = {}
            for r in run.outputs[name][i].to_pylist():
                fresh.setdefault(r["session_id"], []).append(r["page"])
            views.update(fresh)
        for sid, row in now.items():
            assert views[sid] == row["pages"]


def test_numbered_sessions_and_users_equal_a_loop_over_the_current_sessions():
    seen = {"renumbered": 0, "moved": 0, "late": 0}
    for seed in range(4):
        for cut in (seed, seed + 10):
            check_run(arrivals(seed, cut), seen)
    assert seen["moved"] and seen["renumbered"] and not seen["late"], seen
    for seed in range(2):  # a window shorter than the delays: late events, sessions folded
        check_run(arrivals(seed, seed), seen, window=3600)
    assert seen["late"], seen
    for seed in range(2):  # users forgotten and numbered from 1 again after an hour
        check_run(arrivals(seed, seed), seen, ttl=3600)


@pytest.mark.parametrize("cuts", [[1, 2], [1], [2]])
def test_a_late_login_moves_a_session_and_an_earlier_session_renumbers_the_later_ones(cuts):
    """A device's two sessions are emitted anonymous (numbers 1 and 2 of the device); a
    late event logs the first in: both move to the user, who already had a session from
    another device in between (renumbered from 1 to 2); a late session of that other
    device before all of them then renumbers every later one."""
    d, phone = "anon-d", "anon-p"
    events = [
        {"anonymous_id": d, "t": 0, "user_id": None, "page": "a"},
        {"anonymous_id": phone, "t": 3 * GAP, "user_id": "u1", "page": "b"},
        {"anonymous_id": d, "t": 6 * GAP, "user_id": None, "page": "c"},
        {"anonymous_id": "anon-z", "t": 7 * GAP + 60, "user_id": None, "page": "z"},
        {"anonymous_id": d, "t": 60, "user_id": "u1", "page": "login"},
        {"anonymous_id": phone, "t": -600, "user_id": "u1", "page": "early"},
    ]
    for e in events:
        e["url"], e["referrer"] = "https://shop.example/x", None
    bounds = [0, 4, *[4 + c for c in cuts], 6]
    batches = [events[a:b] for a, b in zip(bounds, bounds[1:], strict=False) if b > a]
    seen = {"renumbered": 0, "moved": 0, "late": 0}
    check_run(batches, seen)
    assert seen["moved"] and seen["renumbered"], seen
