"""The users processor (logic/users.py) against a plain loop over the emitted sessions of
each batch: session numbers, new users, attribution within the lookback, the `users` rows
(conversions and their value summed), and users forgotten after the TTL, for any cut of
the sessions into batches."""

from __future__ import annotations

import random

import pyarrow as pa
import pytest

from sessionize import stateful
from sessionize.logic.users import KEY, UserRules, UsersProcessor

TS = pa.timestamp("us", tz="UTC")
MIN = 60_000_000
DAY = 24 * 60 * MIN
GAP = 30 * MIN
SESSIONS = pa.schema(
    [
        ("session_id", pa.string()),
        (KEY, pa.string()),
        ("start_time", TS),
        ("end_time", TS),
        ("closed_at", TS),
        ("event_count", pa.int64()),
        ("landing_page", pa.string()),
        ("utm_source", pa.string()),
        ("utm_medium", pa.string()),
        ("utm_campaign", pa.string()),
        ("referrer_host", pa.string()),
        ("channel", pa.string()),
        ("page_view_count", pa.int64()),
        ("engaged", pa.bool_()),
        ("purchase_count", pa.int64()),
        ("purchase_value", pa.float64()),
        ("purchase_first_at", TS),
    ]
)
# (channel, utm_source, utm_medium, utm_campaign, referrer_host) of a session's landing.
TRAFFIC = [
    ("Direct", None, None, None, None),
    ("Direct", None, None, None, None),
    ("Paid Search", "Google", "cpc", "Spring", None),
    ("Organic Search", None, None, None, "google.com"),
    ("Referral", None, None, None, "news.example.org"),
    ("Email", "newsletter", "email", "may", None),
]
RULES = UserRules(ttl_us=60 * DAY, lookback_us=20 * DAY)


def _sessions(seed: int) -> list[dict]:
    """Sessions of a few users, some overlapping on two devices (closing in another order
    than they started), some coming back after more than the TTL, direct ones after
    campaign ones."""
    rng = random.Random(seed)
    out = []
    for u in range(6):
        t = 1_700_000_000_000_000 + rng.randint(0, 5) * DAY
        for i in range(rng.randint(1, 9)):
            t += rng.choice([MIN, 3 * 60 * MIN, 2 * DAY, 15 * DAY, 30 * DAY, 90 * DAY])
            length = rng.randint(0, 40) * MIN
            if out and out[-1][KEY] == f"user{u}" and rng.random() < 0.3:  # another device,
                t = out[-1]["start_time"] + rng.randint(0, 10) * MIN  # at the same time
                length = rng.randint(0, 60) * MIN
            channel, src, med, camp, ref = rng.choice(TRAFFIC)
            out.append(
                {
                    "session_id": f"s{u}-{i}",
                    KEY: f"user{u}",
                    "start_time": t,
                    "end_time": t + length,
                    "closed_at": t + length + GAP,
                    "event_count": rng.randint(1, 9),
                    "landing_page": f"/p{rng.randint(0, 3)}",
                    "utm_source": src,
                    "utm_medium": med,
                    "utm_campaign": camp,
                    "referrer_host": ref,
                    "channel": channel,
                    "page_view_count": rng.randint(0, 5),
                    "engaged": rng.random() < 0.5,
                    **_purchases(rng, t),
                }
            )
            t += length
    return out


def _purchases(rng: random.Random, start: int) -> dict:
    """A session's purchases: none, or some with a value (quarters: sums exact in any
    order) or without one (no value mapped, or none sent)."""
    count = rng.choice([0, 0, 1, 2])
    value = rng.randint(1, 400) / 4 if count and rng.random() < 0.7 else None
    return {
        "purchase_count": count,
        "purchase_value": value,
        "purchase_first_at": start if count else None,
    }


def _batches(sessions: list[dict], cuts: list[int]) -> list[list[dict]]:
    """Emitted sessions per batch: a batch emits those that closed before its watermark
    (`cuts`, ascending instants), as the first step would."""
    bounds = [-(2**62), *cuts, 2**62]
    pairs = zip(bounds, bounds[1:], strict=False)
    return [[s for s in sessions if lo <= s["closed_at"] < hi] for lo, hi in pairs]


def _own(s: dict) -> tuple:
    source = (s["utm_source"] or "").lower() or s["referrer_host"]
    medium = (s["utm_medium"] or "").lower() or None
    if medium is None and s["utm_source"] is None and s["referrer_host"]:
        medium = "organic" if "google" in s["referrer_host"] else "referral"
    campaign = s["utm_campaign"].lower() if s["utm_campaign"] else None
    return (s["channel"], source, medium, campaign)


def reference(batches: list[list[dict]], rules: UserRules):
    """The plain loop: per batch, its sessions in (user, close, start, id) order; returns
    each batch's numbered sessions and users rows as sets."""
    users: dict[str, dict] = {}
    latest = None
    sessions_out, users_out = [], []
    for batch in batches:
        top = max((s["closed_at"] for s in batch), default=None)
        latest = top if latest is None else latest if top is None else max(latest, top)
        got = set()
        order = (KEY, "closed_at", "start_time", "session_id")
        for s in sorted(batch, key=lambda s: tuple(s[c] for c in order)):
            u = users.get(s[KEY])
            if u is not None and s["closed_at"] - u["last_event"] > rules.ttl_us:
                u = None
            own = _own(s)
            if s["channel"] != "Direct":
                attributed = own
            elif u and u["nd"] and s["start_time"] - u["nd_start"] <= rules.lookback_us:
                attributed = u["nd"]
            else:
                attributed = ("Direct", "(direct)", "(none)", None)
            if u is None:
                u = users[s[KEY]] = {
                    "sessions": 0, "first": s["start_time"], "last": s["start_time"],
                    "events": 0, "page_views": 0, "engaged": 0, "first_channel": s["channel"],
                    "first_landing": s["landing_page"], "last_event": s["end_time"],
                    "nd": None, "nd_start": None, "purchases": 0, "value": None,
                }  # fmt: skip
            u["sessions"] += 1
            u["first"] = min(u["first"], s["start_time"])
            u["last"] = max(u["last"], s["start_time"])
            u["events"] += s["event_count"]
            u["page_views"] += s["page_view_count"]
            u["engaged"] += s["engaged"]
            u["purchases"] += s.get("purchase_count", 0)  # sessions without conversions: 0
            if s.get("purchase_value") is not None:
                u["value"] = (u["value"] or 0.0) + s["purchase_value"]
            u["last_channel"] = s["channel"]
            u["last_event"] = max(u["last_event"], s["end_time"])
            if s["channel"] != "Direct":
                u["nd"], u["nd_start"] = own, s["start_time"]
            got.add((s["session_id"], u["sessions"], u["sessions"] == 1, *attributed))
        sessions_out.append(got)
        touched = {s[KEY] for s in batch}
        users_out.append(
            {
                (
                    k,
                    users[k]["first"],
                    users[k]["last"],
                    users[k]["sessions"],
                    users[k]["events"],
                    users[k]["page_views"],
                    users[k]["engaged"],
                    users[k]["first_channel"],
                    users[k]["first_landing"],
                    users[k]["last_channel"],
                    users[k]["purchases"],
                    users[k]["value"],
                )
                for k in touched
            }  # fmt: skip
        )
        if latest is not None:  # the timers below the watermark fire: those users go
            for k in [k for k, u in users.items() if k not in touched]:
                if users[k]["last_event"] + rules.ttl_us < latest:
                    del users[k]
    return sessions_out, users_out


def _run(batches: list[list[dict]], rules: UserRules):
    tables = [pa.Table.from_pylist(b, schema=SESSIONS) for b in batches]
    for t in tables:  # times as timestamps
        assert t.schema == SESSIONS
    run = stateful.run_local(UsersProcessor(SESSIONS, rules), tables)
    sessions = []
    for t in run.outputs["sessions"]:
        sessions.append(
            {
                (
                    r["session_id"],
                    r["session_number"],
                    r["is_new_user"],
                    r["attributed_channel"],
                    r["attributed_source"],
                    r["attributed_medium"],
                    r["attributed_campaign"],
                )
                for r in t.to_pylist()
            }  # fmt: skip
        )
    users = []
    for t in run.outputs["users"]:
        us = t.cast(
            t.schema.set(1, pa.field("first_session_start", pa.int64())).set(
                2, pa.field("last_session_start", pa.int64())
            )
        )
        users.append({tuple(r.values()) for r in us.to_pylist()})
    return sessions, users


@pytest.mark.parametrize("seed", range(8))
def test_numbers_attribution_and_users_equal_the_loop_for_any_cut(seed):
    sessions = _sessions(seed)
    rng = random.Random(seed)
    times = sorted(s["closed_at"] for s in sessions)
    numbered = []
    for cuts in ([], sorted(rng.sample(times, min(5, len(times)))), times):
        batches = _batches(sessions, cuts)
        got = _run(batches, RULES)
        assert got == reference(batches, RULES), cuts
        numbered.append(set().union(*got[0]))
    assert numbered[0] == numbered[1] == numbered[2]  # the same however cut into batches


def test_the_data_has_returns_after_the_ttl_and_direct_visits_after_campaigns():
    """The sessions above hold each case the rules distinguish, over the seeds."""
    cases = {"back after the ttl": 0, "attributed": 0, "beyond the lookback": 0, "overlap": 0}
    for seed in range(8):
        sessions = _sessions(seed)
        (numbered,), _ = reference([sessions], RULES)
        by_id = {s["session_id"]: s for s in sessions}
        order = sorted(sessions, key=lambda s: (s[KEY], s["start_time"]))
        cases["overlap"] += sum(
            a[KEY] == b[KEY] and b["closed_at"] < a["closed_at"]
            for a, b in zip(order, order[1:], strict=False)
        )
        for sid, number, _, channel, *_ in numbered:
            first = sid.endswith("-0")
            cases["back after the ttl"] += number == 1 and not first
            own = by_id[sid]["channel"]
            cases["attributed"] += own == "Direct" and channel != "Direct"
            cases["beyond the lookback"] += own == "Direct" and channel == "Direct" and not first
    assert min(cases.values()) > 0, cases


def test_a_rebuilt_users_table_gets_every_user_handed_in():
    """After a rewind the engine hands every stored user in (`ctx.every_key`): each one's
    row is written, changed or not, and an expired one is deleted."""
    from sessionize.core.step import step

    processor = UsersProcessor(SESSIONS, RULES, keeps_current=True)
    sessions = [s for s in _sessions(1) if s[KEY] in ("user0", "user1")]
    first = stateful.run_local(processor, [pa.Table.from_pylist(sessions, schema=SESSIONS)])
    assert first.state is not None and first.state.num_rows == 2
    last = max(s["end_time"] for s in sessions if s[KEY] == "user0")
    other = max(s["end_time"] for s in sessions if s[KEY] == "user1")
    watermark = min(last, other) + RULES.ttl_us + 1  # the earlier of the two expires
    result = step(
        processor,
        first.state,
        SESSIONS.empty_table(),
        batch_id=1,
        partition=0,
        watermark_before=watermark,
        watermark_after=watermark,
        every_key=True,
    )
    kept = "user1" if last < other else "user0"
    assert result.outputs["users"].column(KEY).to_pylist() == [kept]
    assert result.deletes["users"].column(KEY).to_pylist() == [
        {"user0", "user1"}.difference({kept}).pop()
    ]


def test_a_direct_session_takes_the_campaign_just_inside_the_lookback_not_just_outside():
    """`--attribution-lookback 2d`: a direct session that starts 2 days after the user's
    campaign session gets the campaign's source; one a second later gets Direct. From the
    same batch and from the stored user (the campaign in an earlier batch)."""
    rules = UserRules(ttl_us=60 * DAY, lookback_us=2 * DAY)
    t0 = 1_700_000_000_000_000
    campaign = ("Paid Search", "Google", "cpc", "Spring", None)
    direct = TRAFFIC[0]

    def session(user: str, i: int, start: int, traffic: tuple) -> dict:
        channel, src, med, camp, ref = traffic
        return {
            "session_id": f"{user}-{i}", KEY: user, "start_time": start, "end_time": start,
            "closed_at": start + GAP, "event_count": 1, "landing_page": "/", "utm_source": src,
            "utm_medium": med, "utm_campaign": camp, "referrer_host": ref, "channel": channel,
            "page_view_count": 1, "engaged": False, "purchase_count": 0,
            "purchase_value": None, "purchase_first_at": None,
        }  # fmt: skip

    sessions = [
        session("inside", 0, t0, campaign),
        session("inside", 1, t0 + 2 * DAY, direct),
        session("outside", 0, t0, campaign),
        session("outside", 1, t0 + 2 * DAY + 1_000_000, direct),
    ]
    want = {
        ("inside-1", 2, False, "Paid Search", "google", "cpc", "spring"),
        ("outside-1", 2, False, "Direct", "(direct)", "(none)", None),
    }
    for cuts in ([], [t0 + GAP + 1]):  # one batch; the campaign stored before
        batches = _batches(sessions, cuts)
        got, users = _run(batches, rules)
        assert (got, users) == reference(batches, rules)
        assert {s for s in set().union(*got) if s[0].endswith("-1")} == want
