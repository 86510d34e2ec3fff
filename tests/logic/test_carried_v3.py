"""Schema 3 (GA4's channel group, page-view rows, `events`, user agents, click ids, sources
kept across split sessions), checked against a plain-Python reference written here: one
loop per user cuts the sessions, one loop per session computes every column. The events
come from `sessionize generate --web-data` across midnight, so they hold every GA4 channel,
the site-list cases, pings, purchases, midnight and max-duration splits, campaign changes
in URLs and 20 real user agents; one batch and many micro-batches must both give it."""

from __future__ import annotations

import datetime as dt
import gzip
import json
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pytest

from sessionize.config import SessionRules
from sessionize.content import Conversion, SessionContent
from sessionize.logic import advance
from sessionize.mapping import EventMapping
from sessionize.schema import layout

from .ga4_reference import CLICK_IDS, ref_agent, ref_channel, ref_host, ref_query
from .helpers import MIN, rows_of

SEC = 1_000_000
GAP, MAX_DURATION, HEARTBEAT, MIN_VISIT = 10 * MIN, 30 * MIN, 10 * SEC, 5 * SEC
RULES = SessionRules(
    gap_us=GAP,
    lateness_us=0,
    close_actions=("browser_close",),
    max_duration_us=MAX_DURATION,
    split_at_midnight=True,
)
CONTENT = SessionContent(
    ping_action="ping",
    heartbeat_us=HEARTBEAT,
    min_visit_us=MIN_VISIT,
    conversions=(Conversion("purchase", "purchase"),),
)
MAPPING = EventMapping(
    url="page.url",
    referrer="page.referrer",
    user_agent="technical.user_agent",
    session_columns=3,
    content=CONTENT,
)
LAY = layout(MAPPING)
FAR = 10**17

# ------------------------------------------------------------------ the data


def generated_events(tmp: Path) -> list[dict]:
    """`sessionize generate --web-data` over 22:00-01:00 UTC, as event dicts."""
    out = tmp / "events"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "sessionize",
            "generate",
            "--output",
            str(out),
            "--start",
            "2026-11-01T22",
            "--hours",
            "3",
            "--users",
            "450",
            "--events-per-hour",
            "6000",
            "--web-data",
            "--seed",
            "5",
        ],
        check=True,
        capture_output=True,
    )
    events = []
    for f in sorted(out.rglob("*.json*")):
        opener = gzip.open if f.suffix == ".gz" else open
        with opener(f, "rt") as lines:
            for line in lines:
                r = json.loads(line)
                page, tech = r.get("page", {}), r.get("technical", {})
                t = dt.datetime.fromisoformat(r["event_time"])
                events.append(
                    {
                        "user_id": r["user_id"],
                        "event_time": int(t.timestamp() * 1e6 + 0.5) // 1000 * 1000,
                        "page": page["current"],
                        "action": r.get("action", "view"),
                        "url": page.get("url"),
                        "referrer": page.get("referrer"),
                        "user_agent": tech.get("user_agent"),
                    }
                )
    return events


def table_of(events: list[dict]) -> pa.Table:
    cols = {n: [e.get(n) for e in events] for n in LAY.event.names}
    return pa.Table.from_pydict(cols, LAY.event)


def run_batch(events: list[dict]) -> dict[str, list[dict]]:
    res = advance(
        LAY.state.empty_table(),
        table_of(events),
        rules=RULES,
        watermark_before=None,
        watermark_after=FAR,
        layout=LAY,
    )
    return {
        "sessions": rows_of(res.sessions),
        "page_views": rows_of(res.page_views),
        "events": rows_of(res.events),
    }


def run_stream(events: list[dict], batches: int) -> dict[str, list[dict]]:
    """Micro-batches in time order (nothing late: lateness 0), then one past every close."""
    ordered = sorted(events, key=lambda e: e["event_time"])
    size = -(-len(ordered) // batches)
    state, wm = LAY.state.empty_table(), None
    out: dict[str, list[dict]] = {"sessions": [], "page_views": [], "events": []}
    chunks = [ordered[i : i + size] for i in range(0, len(ordered), size)] + [[]]
    for i, chunk in enumerate(chunks):
        after = FAR if i == len(chunks) - 1 else max(e["event_time"] for e in chunk)
        res = advance(
            state,
            table_of(chunk),
            rules=RULES,
            watermark_before=wm,
            watermark_after=after,
            layout=LAY,
        )
        state, wm = res.state_puts, after
        out["sessions"] += rows_of(res.sessions)
        out["page_views"] += rows_of(res.page_views)
        out["events"] += rows_of(res.events)
    return out


# ------------------------------------------------------------------ the reference


def next_midnight_utc(t: int) -> int:
    day = 86_400 * SEC
    return (t // day + 1) * day


def reference(events: list[dict]) -> dict[str, list[dict]]:
    """Sessions, page views and events of every user by plain loops (one copy per key)."""
    unique: dict[tuple, dict] = {}
    for e in events:
        key = (e["user_id"], e["event_time"], e["page"])
        unique[key] = min(
            unique.get(key, e), e, key=lambda x: json.dumps([x.get(c) for c in LAY.event.names[3:]])
        )
    by_user: dict[int, list[dict]] = {}
    for e in sorted(unique.values(), key=lambda e: (e["user_id"], e["event_time"], e["page"])):
        by_user.setdefault(e["user_id"], []).append(e)
    out: dict[str, list[dict]] = {"sessions": [], "page_views": [], "events": []}
    for user, evs in by_user.items():
        sessions: list[list[dict]] = []
        for e in evs:
            cur = sessions[-1] if sessions else None
            joins = (
                cur is not None
                and e["event_time"] <= cur[-1]["event_time"] + GAP
                and cur[-1]["action"] != "browser_close"
                and e["event_time"] - cur[0]["event_time"] < MAX_DURATION
                and e["event_time"] < next_midnight_utc(cur[0]["event_time"])
            )
            if joins:
                cur.append(e)
            else:
                sessions.append([e])
        visit_head: dict | None = None
        visit_click: str | None = None
        previous_id, previous = None, None
        for s in sessions:
            start, last = s[0]["event_time"], s[-1]["event_time"]
            sid = f"{user}-{start // 1000}"
            if (
                previous is not None
                and previous[0] in ("midnight", "max_duration")
                and start <= previous[1] + GAP
            ):
                continues = previous_id
            else:
                continues, visit_head, visit_click = None, s[0], None
            for e in s:
                if visit_click is None and any(c in ref_query(e["url"]) for c in CLICK_IDS):
                    visit_click = e["url"]
            reason, closed = _reason(s)
            previous_id, previous = sid, (reason, last)
            out["sessions"].append(
                _session_row(s, sid, continues, visit_head, visit_click, reason, closed)
            )
            views, events = _views_and_events(s, sid, user)
            out["page_views"] += views
            out["events"] += events
    return out


def _reason(s: list[dict]) -> tuple[str, int]:
    start, last = s[0]["event_time"], s[-1]["event_time"]
    if s[-1]["action"] == "browser_close":
        return "explicit", last
    moments = [
        ("max_duration", start + MAX_DURATION),
        ("midnight", next_midnight_utc(start)),
        ("inactivity", last + GAP),
    ]
    best = min(m for _, m in moments)
    return next(name for name, m in moments if m == best), best


def _views_and_events(s: list[dict], sid: str, user: int) -> tuple[list[dict], list[dict]]:
    views, events = [], []
    pv_index = [i for i, e in enumerate(s) if e["action"] == "view"]
    for n, i in enumerate(pv_index):
        end = pv_index[n + 1] if n + 1 < len(pv_index) else len(s)
        pings = {s[j]["event_time"] // HEARTBEAT for j in range(i, end) if s[j]["action"] == "ping"}
        engaged = (len(pings) - 1) * HEARTBEAT + MIN_VISIT if pings else 0
        if n + 1 < len(pv_index):
            on_page = (s[pv_index[n + 1]]["event_time"] - s[i]["event_time"]) // 1000
        else:
            on_page = engaged // 1000 if pings else None
        views.append(
            {
                "session_id": sid,
                "user_id": user,
                "page_view_id": f"{sid}:{n + 1}",
                "event_time": s[i]["event_time"],
                "page": s[i]["page"],
                "position": n + 1,
                "time_on_page_ms": on_page,
                "engaged_time_ms": engaged // 1000,
            }
        )
    for j, e in enumerate(s):
        before = [n for n, i in enumerate(pv_index) if i <= j]
        events.append(
            {
                "session_id": sid,
                "user_id": user,
                "event_time": e["event_time"],
                "page": e["page"],
                "action": e["action"],
                "position": j + 1,
                "page_view_id": f"{sid}:{before[-1] + 1}" if before else None,
            }
        )
    return views, events


def _session_row(s, sid, continues, head, click_url, reason, closed) -> dict:
    q = ref_query(head["url"])
    referrer = ref_host(head["referrer"])
    if referrer == ref_host(head["url"]):
        referrer = None
    click = ref_query(click_url)
    click_type = next((c for c in CLICK_IDS if c in click), None)
    views = [e for e in s if e["action"] == "view"]
    pv_engaged = sum(v["engaged_time_ms"] for v in _views_and_events(s, sid, 0)[0])
    agent = ref_agent(s[0]["user_agent"])
    return {
        "session_id": sid,
        "end_reason": reason,
        "closed_at": closed,
        "landing_page": views[0]["page"] if views else None,
        "exit_page": views[-1]["page"] if views else None,
        **{
            f"utm_{k}": q.get(f"utm_{k}")
            for k in ("source", "medium", "campaign", "term", "content")
        },
        "gclid": q.get("gclid"),
        "click_id_type": click_type,
        "click_id": click.get(click_type) if click_type else None,
        "referrer_host": referrer,
        "channel": ref_channel(q, referrer),
        "continues_session_id": continues,
        "page_view_count": len(views),
        "engaged_time_ms": pv_engaged,
        "browser_family": agent[0],
        "browser_version": agent[1],
        "os_family": agent[2],
        "device_category": agent[3],
        "is_bot": agent[3] == "bot",
        "purchase_count": sum(e["action"] == "purchase" for e in s),
    }


# ------------------------------------------------------------------ the tests


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> list[dict]:
    return generated_events(tmp_path_factory.mktemp("v3"))


def _keyed(rows: list[dict], key: str, columns) -> dict:
    return {r[key]: {c: r[c] for c in columns} for r in rows}


def test_every_new_column_page_view_and_event_match_the_reference(data):
    expected = reference(data)
    got = run_batch(data)
    columns = list(expected["sessions"][0])
    sessions = _keyed(got["sessions"], "session_id", columns)
    want = _keyed(expected["sessions"], "session_id", columns)
    assert sessions.keys() == want.keys()
    wrong = [
        (sid, c, sessions[sid][c], want[sid][c])
        for sid in want
        for c in columns
        if sessions[sid][c] != want[sid][c]
    ]
    assert not wrong, wrong[:10]
    for name, key in (("page_views", "page_view_id"), ("events", None)):
        exp = expected[name]
        cols = list(exp[0])
        rows = [{c: r[c] for c in cols} for r in got[name]]
        if key:
            assert _keyed(rows, key, cols) == _keyed(exp, key, cols)
        else:

            def order(r):
                return (r["session_id"], r["position"])

            assert sorted(rows, key=order) == sorted(exp, key=order)
    # The data holds what the test is about.
    channels = {r["channel"] for r in expected["sessions"]}
    assert channels >= {
        "Direct",
        "Cross-network",
        "Paid Shopping",
        "Paid Search",
        "Paid Social",
        "Paid Video",
        "Display",
        "Paid Other",
        "Organic Shopping",
        "Organic Social",
        "Organic Video",
        "Organic Search",
        "Referral",
        "Email",
        "Affiliates",
        "Audio",
        "SMS",
        "Mobile Push Notifications",
        "Unassigned",
    }, channels
    reasons = {r["end_reason"] for r in expected["sessions"]}
    assert {"midnight", "max_duration"} <= reasons
    assert any(r["continues_session_id"] for r in expected["sessions"])
    referrers = {ref_host(e["referrer"]) for e in data}
    assert {"mail.google.com", "com.google.android.gm", "google.co.uk"} <= referrers
    assert len({e["user_agent"] for e in data if e["user_agent"]}) == 20
    assert {r["click_id_type"] for r in expected["sessions"]} >= set(CLICK_IDS)


def test_micro_batches_give_what_one_batch_gives(data):
    batch, stream = run_batch(data), run_stream(data, batches=7)
    for name in ("sessions", "page_views", "events"):

        def key(r):
            return (r["session_id"], r.get("position", 0))

        assert sorted(stream[name], key=key) == sorted(batch[name], key=key), name


def test_an_event_without_a_url_carries_no_click_id():
    """A visit's click id comes from its first event whose URL holds one: an event without
    a URL before it (or after it) is passed over."""
    t0 = 1_793_491_200 * SEC
    events = [
        {"user_id": 7, "event_time": t0, "page": "/a", "action": "view", "url": None},
        {
            "user_id": 7,
            "event_time": t0 + 5 * SEC,
            "page": "/b",
            "action": "view",
            "url": "https://shop.example/b?gclid=abc",
        },
        {"user_id": 7, "event_time": t0 + 9 * SEC, "page": "/b", "action": "ping", "url": None},
    ]
    for e in events:
        e.update(referrer=None, user_agent=None)
    (session,) = run_batch(events)["sessions"]
    assert (session["click_id_type"], session["click_id"]) == ("gclid", "abc")
    (want,) = reference(events)["sessions"]
    assert {c: session[c] for c in want} == want
