"""`sessionize generate --web-data`: page URLs with their query strings, referrers, user agents
(crawlers among them), page pings and purchases, checked by plain loops over the written
events; and the data without the option stays as it was."""

from __future__ import annotations

import json
from collections import defaultdict
from urllib.parse import parse_qsl, urlsplit

import pytest
from crawlerdetect import CrawlerDetect

from sessionize.generate import web_catalog
from sessionize.generate.writer import write_files
from tests.generate.test_generator import Tree, instant, small, us
from tests.generate.test_generator_rules import DEFAULT_DIGEST, digest
from tests.helpers import sessionize

PING_MS = 10_000


@pytest.fixture(scope="module")
def tree(tmp_path_factory) -> Tree:
    root = tmp_path_factory.mktemp("web") / "input"
    write_files(small(users=300, events_per_hour=3000, web_data=True, rule_data=True), str(root))
    return Tree(root)


def _events(tree: Tree) -> list[dict]:
    seen, out = set(), []
    for _, obj, line in tree.events:  # duplicates are the very same line
        if line not in seen:
            seen.add(line)
            out.append(obj)
    return out


def test_without_web_data_the_default_data_is_unchanged(tmp_path):
    write_files(small(), str(tmp_path / "a"))
    assert digest(tmp_path / "a") == DEFAULT_DIGEST


def _site_host(obj: dict) -> str | None:
    site = obj.get("source", {}).get("site")
    return None if site is None else ("www." + site if site == "mysite.com" else site)


def test_every_event_has_its_pages_url_and_a_referrer_where_it_came_from(tree):
    path_of, changes = {}, 0
    for obj in _events(tree):
        page = obj["page"]
        url = urlsplit(page["url"])
        assert url.scheme == "https" and url.path.startswith("/"), page
        if _site_host(obj):
            assert url.hostname == _site_host(obj), obj
        path_of.setdefault(page["current"], url.path)
        assert path_of[page["current"]] == url.path  # one path per page
        if "previous" in page:  # internal navigation: the previous page on this site
            if obj.get("action") != "purchase" and url.query:  # a new campaign mid-visit
                assert "?" + url.query in web_catalog.CAMPAIGN_CHANGES, page
                changes += 1
            ref = urlsplit(page["referrer"])
            assert ref.hostname == url.hostname and not ref.query, page
            assert ref.path == path_of.get(page["previous"], ref.path)
        else:
            assert page.get("referrer") in web_catalog.REFERRERS, page
    assert changes  # some visits change campaign in a later page's URL


def test_landing_urls_carry_utm_parameters_gclids_and_their_awkward_forms(tree):
    queries = [
        urlsplit(o["page"]["url"]).query for o in _events(tree) if "previous" not in o["page"]
    ]
    raw = " ".join(queries)
    keys = [k for q in queries for k, _ in parse_qsl(q, keep_blank_values=True)]
    assert {"utm_source", "utm_medium", "utm_campaign", "utm_term", "utm_content"} <= set(keys)
    assert "gclid" in keys and "GCLID" in keys and "UTM_SOURCE" in keys  # upper-case keys
    assert "+" in raw and "%20" in raw and "%of" in raw  # spaces both ways, a bad escape
    assert any(len(qs := [k for k, _ in parse_qsl(q)]) > len(set(qs)) for q in queries)
    assert "" in queries  # direct and most organic visits have no query string
    referrers = {o["page"].get("referrer") for o in _events(tree) if "previous" not in o["page"]}
    for host in ("google.com", "facebook.com", "mail.google.com", "wikipedia.org"):
        assert any(r and host in r for r in referrers), host
    assert None in referrers  # direct visits


def test_a_few_percent_of_visits_are_crawlers_by_a_user_agent_library(tree):
    detect = CrawlerDetect()
    agent_of = defaultdict(set)
    for obj in _events(tree):
        agent_of[obj["visit_id"]].add(obj.get("technical", {}).get("user_agent"))
    assert all(len(a) == 1 for a in agent_of.values())  # one agent per visit
    agents = [a.pop() for a in agent_of.values()]
    bots = sum(1 for a in agents if a and detect.isCrawler(a))
    assert 0.01 <= bots / len(agents) <= 0.06, (bots, len(agents))
    assert None in agents  # visits without a technical section have no user agent
    assert {a for a in agents if a and detect.isCrawler(a)} <= set(web_catalog.BOT_AGENTS)


def test_pings_follow_a_page_view_every_10_s_and_purchases_carry_a_number(tree):
    events = sorted(_events(tree), key=lambda o: (o["user_id"], us(instant(o["event_time"]))))
    by_user = defaultdict(list)
    for obj in events:
        by_user[obj["user_id"]].append(obj)
    pings = purchases = with_value = 0
    for user_events in by_user.values():
        times = [us(instant(o["event_time"])) // 1000 for o in user_events]
        assert times == sorted(set(times))  # still strictly increasing per user
        view_at = None  # (time, page, url) of the last page view
        for t, obj in zip(times, user_events, strict=True):
            action = obj.get("action", "view")
            if action == "view":
                view_at = (t, obj["page"]["current"], obj["page"]["url"])
            elif action == "ping":
                pings += 1
                assert view_at is not None and (t - view_at[0]) % PING_MS == 0, obj
                assert (obj["page"]["current"], obj["page"]["url"]) == view_at[1:]
            elif action == "purchase":
                purchases += 1
                assert obj["page"]["current"] == "checkout"
                if "order" in obj:
                    value = obj["order"]["value"]
                    assert type(value) in (int, float) and value > 0, obj
                    assert round(value, 2) == value
                    with_value += 1
    assert pings > len(events) / 5 and purchases >= 10
    assert purchases * 0.8 <= with_value < purchases  # a few purchases come without a value


def test_the_cli_writes_web_data(tmp_path):
    out = tmp_path / "in"
    done = sessionize(
        "generate",
        "--output",
        str(out),
        "--hours",
        "1",
        "--users",
        "20",
        "--events-per-hour",
        "200",
        "--web-data",
    )
    assert done.returncode == 0, done.stderr
    lines = [json.loads(x) for p in out.rglob("*.json") for x in p.read_text().splitlines()]
    assert lines and all("url" in o["page"] for o in lines)


def test_a_small_run_whose_hours_have_no_purchase_candidate_is_written(tmp_path):
    """`generate --hours 6 --users 60 --events-per-hour 300 --files-per-hour 2 --web-data`
    failed with an IndexError on an hour with no visit that could buy."""
    done = sessionize(
        "generate",
        "--output",
        str(tmp_path / "in"),
        "--hours",
        "6",
        "--users",
        "60",
        "--events-per-hour",
        "300",
        "--files-per-hour",
        "2",
        "--web-data",
    )
    assert done.returncode == 0, done.stderr
    hours = {p.parent.relative_to(tmp_path / "in") for p in (tmp_path / "in").rglob("*.json")}
    assert len(hours) == 6
    bought = defaultdict(int)  # at most one purchase per visit, whatever the hour
    for obj in _events(Tree(tmp_path / "in")):
        if obj.get("action") == "purchase":
            bought[obj["visit_id"]] += 1
    assert all(n == 1 for n in bought.values()), bought
