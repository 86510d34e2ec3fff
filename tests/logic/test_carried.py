"""What a session carries (schema 2), checked against plain-Python references over one
session's events, written here independently of `logic.carried` and its helpers."""

from __future__ import annotations

import random

import pyarrow as pa
import pytest

from sessionize.config import SessionRules
from sessionize.content import Conversion, SessionContent
from sessionize.logic import advance
from sessionize.mapping import EventMapping
from sessionize.schema import layout

from .carried_reference import ref_channel, ref_query, reference_session
from .helpers import MIN, T0, rows_of

SEC = 1_000_000
RULES = SessionRules(gap_us=10 * MIN, lateness_us=10 * MIN, close_actions=("browser_close",))
CONTENT = SessionContent(
    page_view_actions=("view", "screen"),
    max_page_time_us=2 * MIN,
    conversions=(Conversion("purchase", "buy", "order.total"), Conversion("signup", "join")),
)
MAPPING = EventMapping(
    url="u",
    referrer="r",
    user_agent="ua",
    last=(("cart", "cart.id"),),
    session_columns=2,
    content=CONTENT,
)


# Hosts and names the reference knows as search engines and social networks: those that
# the tests' events use (the shipped list holds them all, and many more).
def run(events: list[dict], mapping: EventMapping = MAPPING, batches: int = 1) -> list[dict]:
    """Every session of `events`, emitted at the end; with `batches` > 1 the events arrive
    in that many micro-batches (by time), the open sessions kept in the state between."""
    lay = layout(mapping)
    VIEWS.clear()
    ordered = sorted(events, key=lambda e: e["event_time"])
    size = -(-len(ordered) // batches)
    state, sessions, wb = lay.state.empty_table(), [], None
    for i in range(batches):
        part = ordered[i * size : (i + 1) * size]
        table = pa.Table.from_pylist(
            [{c: e.get(c) for c in lay.event.names} for e in part], lay.event
        )
        last = i == batches - 1
        wa = T0 + 10_000 * MIN if last else None
        res = advance(
            state, table, rules=RULES, watermark_before=wb, watermark_after=wa, layout=lay
        )
        state = res.state_puts
        sessions += rows_of(res.sessions)
        VIEWS.extend(rows_of(res.page_views))
    return sessions


VIEWS: list[dict] = []  # the page views of the last `run`s: which events each session has


def events_of(session: dict, events: list[dict]) -> list[dict]:
    """The session's events, by the keys of its page views (one per event, in order)."""
    by_key = {(e["user_id"], e["event_time"], e["page"]): e for e in events}
    views = [v for v in VIEWS if v["session_id"] == session["session_id"]]
    views.sort(key=lambda v: v["position"])
    return [by_key[(v["user_id"], v["event_time"], v["page"])] for v in views]


def ev(user, t, page="p", action="view", **fields) -> dict:
    return {"user_id": user, "event_time": T0 + t, "page": page, "action": action, **fields}


def check_all(events: list[dict], content: SessionContent = CONTENT, **run_args) -> list[dict]:
    sessions = run(events, **run_args)
    assert sessions
    for s in sessions:
        expected = reference_session(events_of(s, events), content)
        got = {k: s[k] for k in expected}
        assert got == expected, s["session_id"]
    return sessions


# ------------------------------------------------------------------- random sessions

URLS = [
    None,
    "https://shop.example/",
    "https://shop.example/a?utm_source=Google&utm_medium=CPC",
    "https://shop.example/a?UTM_SOURCE=news+letter&utm_medium=email&utm_source=x",
    "https://shop.example/?utm_campaign=winter%20sale&utm_term=a+b&utm_content=%zz#utm_term=no",
    "https://shop.example/?gclid=abc&utm_source=",
    "https://shop.example/?utm_source=facebook",
    "https://shop.example/?utm_source=bing&utm_medium=organic",
    "https://shop.example/?utm_source=t.co&utm_medium=paid-social",
    "https://shop.example/?utm_medium=display",
    "https://shop.example/?utm_medium=affiliate",
    "https://shop.example/?utm_source=partner&utm_medium=weird",
    "https://shop.example/?utm_medium=referral",
    "shop.example/no-scheme?utm_source=bing",
]
REFERRERS = [
    None,
    "https://www.google.com/search?q=x",
    "https://news.google.co.uk/",
    "https://t.co/x",
    "https://m.facebook.com:443/",
    "https://WWW.Shop.Example:8443/home",
    "https://blog.example/",
    "https://duckduckgo.com/",
    "not a url",
]
AGENTS = [None, "Mozilla/5.0 (X11; Linux x86_64) Firefox/120.0", "Googlebot/2.1 (+bot)"]
ACTIONS = ["view", "view", "screen", "click", "buy", "join", "browser_close"]


def random_events(seed: int, users: int = 12, per_user: int = 25) -> list[dict]:
    rng = random.Random(seed)
    out = []
    for user in range(users):
        t = 0
        for _ in range(per_user):
            t += rng.choice([0, 1, 3, 30, 90, 200, 400, 900]) * SEC
            action = rng.choice(ACTIONS)
            value = rng.choice([None, "12.5", "3", "-1e2"]) if action == "buy" else None
            out.append(
                ev(
                    user,
                    t,
                    rng.choice("abcd"),
                    action,
                    url=rng.choice(URLS),
                    referrer=rng.choice(REFERRERS),
                    user_agent=rng.choice(AGENTS),
                    cart=rng.choice([None, None, "c1", "c2"]),
                    purchase_value_json=value,
                )
            )
    # Keep one event per key, as a source without duplicates would give.
    unique = {(e["user_id"], e["event_time"], e["page"]): e for e in out}
    return list(unique.values())


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_every_column_matches_the_reference_on_random_sessions(seed):
    check_all(random_events(seed))


@pytest.mark.parametrize("seed", [4, 5])
def test_a_session_split_across_micro_batches_carries_what_one_batch_gives(seed):
    events = random_events(seed, users=6)
    whole = run(events)
    assert run(events, batches=3) == whole
    check_all(events, batches=3)
    assert any(s["event_count"] > 3 for s in whole)


# ------------------------------------------------------------------- edge cases

SITE = "https://shop.example/p"


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("https://shop.example/p", {}),  # no query string
        ("https://shop.example/p?", {}),
        ("https://shop.example/p?utm_source=a&utm_source=b", {"utm_source": "a"}),
        (
            "https://shop.example/p?UTM_Source=A&Utm_Medium=Email",
            {"utm_source": "A", "utm_medium": "Email"},
        ),
        (
            "https://shop.example/p?utm_campaign=winter%20sale+now",
            {"utm_campaign": "winter sale now"},
        ),
        (
            "https://shop.example/p?utm_term=100%&utm_content=%zz%4",
            {"utm_term": "100%", "utm_content": "%zz%4"},
        ),
        ("https://shop.example/p?utm_source=&gclid=G1", {"gclid": "G1"}),
        ("https://shop.example/p#utm_source=frag", {}),
        ("https://shop.example/p?utm_source=caf%C3%A9#x", {"utm_source": "café"}),
    ],
)
def test_query_values_are_decoded_as_html_forms(url, expected):
    (s,) = run([ev(1, 0, url=url)])
    names = ["utm_source", "utm_medium", "utm_campaign", "utm_term", "utm_content", "gclid"]
    assert {n: s[n] for n in names if s[n] is not None} == expected
    assert ref_query(url) == {n: expected.get(n) for n in names}  # the reference agrees


@pytest.mark.parametrize(
    ("url", "referrer", "host"),
    [
        (SITE, "https://www.Google.com:443/search?q=1", "google.com"),
        (SITE, "https://www.shop.example:8443/cart", None),  # the site itself
        ("https://www.shop.example/", "http://shop.example/", None),
        (None, "https://blog.example/post", "blog.example"),  # no URL: nothing is the site
        (SITE, None, None),
        (SITE, "www.google.com", None),  # no scheme: a URL parser finds no host
        (SITE, "https://www.www.example/", "www.example"),  # one `www.` only
    ],
)
def test_referrer_host(url, referrer, host):
    (s,) = run([ev(1, 0, url=url, referrer=referrer)])
    assert s["referrer_host"] == host


def test_site_hosts_name_the_site_instead_of_the_landing_url():
    content = SessionContent(site_hosts=("www.shop.example", "pay.example:443"))
    mapping = EventMapping(url="u", referrer="r", session_columns=2, content=content)
    events = [
        ev(1, 0, url="https://other.example/", referrer="https://pay.example/ok"),
        ev(2, 0, url="https://other.example/", referrer="https://other.example/"),
        ev(3, 0, url=SITE, referrer="https://shop.example/"),
    ]
    hosts = {s["user_id"]: s["referrer_host"] for s in run(events, mapping)}
    assert hosts == {1: None, 2: "other.example", 3: None}


def test_a_first_event_without_url_has_no_utm_even_if_a_later_one_has():
    events = [
        ev(1, 0, referrer="https://t.co/x"),
        ev(1, 5 * SEC, url="https://shop.example/?utm_source=bing&gclid=X"),
    ]
    (s,) = run(events)
    assert s["utm_source"] is None and s["gclid"] is None
    assert s["referrer_host"] == "t.co" and s["channel"] == "Organic Social"


@pytest.mark.parametrize(
    ("query", "referrer", "channel"),
    [
        ("gclid=1", None, "Paid Search"),  # rule 1, gclid
        ("utm_source=Google&utm_medium=cpc", None, "Paid Search"),  # rule 1, paid + search
        ("utm_medium=ppc", "https://www.bing.com/", "Paid Search"),  # search by referrer
        ("utm_source=facebook&utm_medium=paid_social", None, "Paid Social"),  # rule 2
        ("utm_source=newsletter&utm_medium=paidmail", None, "Paid Other"),  # rule 3
        ("utm_medium=Banner", None, "Display"),  # rule 4
        ("utm_medium=affiliate&utm_source=google", None, "Affiliates"),  # rule 5
        ("utm_medium=e-mail", None, "Email"),  # rule 6, medium
        ("utm_source=E_mail", None, "Email"),  # rule 6, source
        ("utm_source=duckduckgo.com&utm_medium=organic", None, "Organic Search"),  # rule 7
        ("", "https://news.google.co.uk/", "Organic Search"),  # rule 7, any subdomain
        ("utm_medium=sm", "https://m.facebook.com/", "Organic Social"),  # rule 8
        ("", "https://www.linkedin.com/feed", "Organic Social"),  # rule 8
        ("", None, "Direct"),  # rule 9
        ("", "https://shop.example/", "Direct"),  # rule 9: the site itself is no source
        ("utm_medium=referral&utm_source=google", None, "Referral"),  # rule 10, medium
        ("", "https://blog.example/", "Referral"),  # rule 10, a source without medium
        ("utm_medium=print", None, "Unassigned"),  # rule 11
    ],
)
def test_every_channel_rule(query, referrer, channel):
    (s,) = run([ev(1, 0, url=f"https://shop.example/?{query}", referrer=referrer)])
    assert s["channel"] == channel
    source = s["utm_source"].lower() if s["utm_source"] else s["referrer_host"]
    medium = s["utm_medium"].lower() if s["utm_medium"] else None
    assert ref_channel(source, medium, s["gclid"]) == channel


def test_a_channel_rules_file_replaces_the_table():
    rules = "# mine\nSearch = source is search\nNews = source matches .*news.*\nOther =\n"
    content = SessionContent(channel_rules=rules, channel_rules_path="rules.txt")
    mapping = EventMapping(url="u", referrer="r", session_columns=2, content=content)
    events = [
        ev(1, 0, url="https://s.example/?utm_source=bing&utm_medium=cpc"),
        ev(2, 0, url="https://s.example/?utm_source=daily-news"),
        ev(3, 0, url="https://s.example/?gclid=1"),
    ]
    got = {s["user_id"]: s["channel"] for s in run(events, mapping)}
    assert got == {1: "Search", 2: "News", 3: "Other"}


def test_engagement_from_pings_in_two_sessions():
    content = SessionContent(ping_action="ping", heartbeat_us=10 * SEC, min_visit_us=5 * SEC)
    mapping = EventMapping(session_columns=2, content=content)
    first = [
        ev(1, 0, "a"),
        ev(1, 3 * SEC, "a", "ping"),
        ev(1, 9 * SEC, "a", "ping"),
        ev(1, 21 * SEC, "a", "ping"),
        ev(1, 35 * SEC, "b", "ping"),
    ]  # periods 0, 0, 2, 3
    second = [ev(1, 20 * MIN, "c"), ev(1, 20 * MIN + 1 * SEC, "c", "ping")]  # period 0
    third = [ev(1, 40 * MIN, "d"), ev(1, 40 * MIN + 50 * SEC, "d")]  # no ping: 0
    sessions = run(first + second + third, mapping)
    assert [s["engaged_time_ms"] for s in sessions] == [35_000, 15_000, 0]
    assert [s["page_view_count"] for s in sessions] == [1, 1, 2]  # pings are not views
    assert [s["event_count"] for s in sessions] == [5, 2, 2]  # but are events
    assert [s["engaged"] for s in sessions] == [True, False, True]


def test_engaged_time_caps_each_page_and_ignores_the_last():
    content = SessionContent(max_page_time_us=1 * MIN, engaged_after_us=10 * MIN)
    mapping = EventMapping(session_columns=2, content=content)
    (s,) = run([ev(1, 0), ev(1, 30 * SEC), ev(1, 8 * MIN, action="click")], mapping)
    assert s["engaged_time_ms"] == 30_000 + 60_000
    assert s["engaged"] and not s["bounce"]  # two page views
    (one,) = run([ev(1, 0), ev(1, 9 * MIN, action="click")], mapping)
    assert not one["engaged"] and one["bounce"]


def test_conversions_with_and_without_values():
    events = [
        ev(1, 0, "a"),
        ev(1, 5 * SEC, "b", "buy"),  # a conversion without value
        ev(1, 6 * SEC, "c", "buy", purchase_value_json="2.5"),
        ev(1, 7 * SEC, "c", "join"),
        ev(2, 0, "a"),
    ]
    s1, s2 = run(events)
    assert (s1["purchase_count"], s1["purchase_value"], s1["purchase_first_at"]) == (
        2,
        2.5,
        T0 + 5 * SEC,
    )
    assert (s1["signup_count"], s1["signup_value"], s1["converted"]) == (1, None, True)
    assert s1["event_counts"] == [("buy", 2), ("join", 1), ("view", 1)]
    assert s1["engaged"]  # by its conversion: 7 s and one page view
    assert (s2["purchase_count"], s2["purchase_value"], s2["purchase_first_at"]) == (0, None, None)
    assert not s2["converted"] and s2["bounce"]
    (none,) = run([ev(3, 0, "a", "buy")])
    assert (none["purchase_count"], none["purchase_value"]) == (1, None)


def test_event_counts_with_many_distinct_actions():
    """More distinct actions than a dense table of sessions x actions fits: the counts
    still match the reference."""
    events = []
    for user in range(60):
        for i, action in enumerate((f"a{user}", f"a{user + 1}", f"a{user}", "view")):
            events.append(ev(user, i * SEC, f"p{i}", action))
    sessions = check_all(events)
    assert len(sessions) == 60
    assert sessions[0]["event_counts"] == [("a0", 2), ("a1", 1), ("view", 1)]


def test_landing_exit_and_last_kept_fields():
    events = [
        ev(1, 0, "home", cart=None),
        ev(1, SEC, "list", cart="c1"),
        ev(1, 2 * SEC, "item", cart="c2"),
        ev(1, 3 * SEC, "thanks", cart=None),
    ]
    (s,) = run(events)
    assert (s["landing_page"], s["exit_page"], s["cart"]) == ("home", "thanks", "c2")
    assert s["pages"] == ["home", "list", "item", "thanks"]


def test_is_bot_from_the_first_events_user_agent():
    bot = "Mozilla/5.0 (compatible; bingbot/2.0; +http://www.bing.com/bingbot.htm)"
    events = [
        ev(1, 0, user_agent=bot),
        ev(1, SEC, user_agent="Mozilla/5.0 Firefox/120.0"),
        ev(2, 0, user_agent="Mozilla/5.0 Firefox/120.0"),
        ev(2, SEC, user_agent=bot),
        ev(3, 0),
    ]
    assert [s["is_bot"] for s in run(events)] == [True, False, False]


def test_bots_drop_removes_their_events_and_counts_them():
    bot = "Googlebot/2.1 (+http://www.google.com/bot.html)"
    content = SessionContent(bots="drop")
    mapping = EventMapping(user_agent="ua", session_columns=2, content=content)
    lay = layout(mapping)
    rows = [
        ev(1, 0, user_agent=bot),
        ev(1, SEC, user_agent=bot),
        ev(2, 0),
        ev(3, 0, user_agent="Mozilla/5.0 Firefox/120.0"),
    ]
    table = pa.Table.from_pylist([{c: e.get(c) for c in lay.event.names} for e in rows], lay.event)
    res = advance(
        lay.state.empty_table(),
        table,
        rules=RULES,
        watermark_before=None,
        watermark_after=T0 + 100 * MIN,
        layout=lay,
    )
    assert res.sessions["user_id"].to_pylist() == [2, 3]
    assert res.stats.bot_events == 2 and res.stats.events_in == 2
    assert not any(res.sessions["is_bot"].to_pylist())


def test_schema_1_keeps_todays_columns():
    from sessionize.schema import SESSIONS

    old = EventMapping()  # what a checkpoint from before schema 2 resolves to
    assert layout(old).sessions.equals(SESSIONS)
    assert EventMapping.from_record({"gap": "10m"}).session_columns == 1


def test_dropping_bots_without_a_user_agent_field_is_refused():
    from sessionize.errors import ConfigError

    with pytest.raises(ConfigError, match="--bots drop needs --user-agent-field"):
        EventMapping(session_columns=2, content=SessionContent(bots="drop"))
