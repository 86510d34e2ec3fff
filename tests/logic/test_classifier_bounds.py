"""The bot and channel classifiers: the same answers as their references on ordinary
inputs, and the documented caps on what they read (no timing here: benchmarks/
classifier_bounds.py measures the cost)."""

from __future__ import annotations

import re

import pyarrow as pa
from crawlerdetect import CrawlerDetect
from crawlerdetect.providers.crawlers import data as CRAWLERS
from crawlerdetect.providers.exclusions import data as EXCLUSIONS
from hypothesis import given, settings
from hypothesis import strategies as st

from sessionize.generate.web_catalog import AGENTS as CATALOG_AGENTS
from sessionize.generate.web_catalog import BROWSER_AGENTS
from sessionize.logic.bots import MAX_USER_AGENT_CHARS, is_bot, judge
from sessionize.logic.channel import MAX_HOST_CHARS, _lists, is_kind

ASCII = st.characters(min_codepoint=32, max_codepoint=126)
BROWSERS = list(CATALOG_AGENTS)


def _piece_of(patterns: list[str]) -> st.SearchStrategy[str]:
    """Text one of `patterns` matches (as Python's `re` reads it), in printable ASCII."""
    usable = [p for p in patterns if "^" not in p and "$" not in p]
    return st.sampled_from(usable).flatmap(
        lambda p: st.from_regex(re.compile(p, re.IGNORECASE), fullmatch=True, alphabet=ASCII)
    )


# A user agent as browsers and bots write them: a real one, with pieces that crawler or
# exclusion patterns match put in at a random place.
AGENTS = st.builds(
    lambda base, pieces, at: base[:at] + " ".join(pieces) + base[at:],
    st.sampled_from(BROWSERS),
    st.lists(_piece_of(CRAWLERS) | _piece_of(EXCLUSIONS) | st.text(ASCII, max_size=12), max_size=4),
    st.integers(0, 200),
).filter(lambda ua: len(ua.strip()) <= MAX_USER_AGENT_CHARS)


@settings(max_examples=60, deadline=None)
@given(st.lists(AGENTS, min_size=10, max_size=40))
def test_bots_are_crawlerdetects_answer_on_ordinary_agents(agents):
    reference = CrawlerDetect()  # the library itself, with Python's `re`
    assert judge(agents) == [reference.is_crawler(ua) for ua in agents]
    assert is_bot(pa.array(agents)).tolist() == [reference.is_crawler(ua) for ua in agents]


def test_bots_known_answers_and_the_negative_lookahead():
    agents = [
        "YandexBot/3.0",
        "YandexSearch/1.0",
        "yandexsearch",
        "Yandex",
        "Yandex/2",
        "Mozilla/5.0 (compatible; Googlebot/2.1)",
        "   ",
        "curl/8.1",
    ]
    reference = CrawlerDetect()
    assert judge(agents) == [reference.is_crawler(ua) for ua in agents]
    assert judge(agents) == [True, False, False, True, True, True, False, True]


def test_user_agent_cap_judges_the_first_characters_only():
    browser = BROWSER_AGENTS["PC"]
    pad = " x" * MAX_USER_AGENT_CHARS
    within = (browser + pad)[: MAX_USER_AGENT_CHARS - len(" Googlebot")] + " Googlebot"
    beyond = (browser + pad)[:MAX_USER_AGENT_CHARS] + " Googlebot"
    leading = " " * MAX_USER_AGENT_CHARS + "Googlebot"  # counted, then trimmed
    assert is_bot(pa.array([within, beyond, leading, browser, None])).tolist() == [
        True,
        False,
        False,
        False,
        False,
    ]
    assert CrawlerDetect().is_crawler(beyond)  # the library reads it all (and slowly)


def _is_kind_reference(source: str, kind: str) -> bool:
    """The lookup as a plain loop over every suffix and every run of labels."""
    if len(source) > MAX_HOST_CHARS:
        return False
    if kind == "search" and _is_kind_reference(source, "social"):
        return False
    site = _lists()[kind]
    if source in site.names:
        return True
    labels = source.split(".")
    for i in range(len(labels)):
        if ".".join(labels[i:]) in site.hosts:
            return True
        for j in range(i + 1, len(labels)):
            if ".".join(labels[i:j]) in site.bases:
                return True
    return False


def _entries() -> list[str]:
    lists = _lists()
    return sorted(set().union(*(s.hosts | s.bases | s.names for s in lists.values())))


LABEL = st.text(st.sampled_from("abcdefghijklmnopqrstuvwxyz0123456789-"), min_size=1, max_size=8)
SOURCES = st.builds(
    lambda before, entry, after: ".".join([*before, entry, *after]),
    st.lists(LABEL, max_size=3),
    st.sampled_from(_entries()),
    st.lists(LABEL, max_size=3),
) | st.lists(LABEL, min_size=1, max_size=6).map(".".join)


@settings(max_examples=300, deadline=None)
@given(SOURCES, st.sampled_from(["search", "social"]))
def test_site_lists_match_the_plain_loop_on_ordinary_sources(source, kind):
    assert is_kind(source, kind) == _is_kind_reference(source, kind)


def test_host_cap():
    fits = "a." * ((MAX_HOST_CHARS - len("google.com")) // 2) + "google.com"
    too_long = "a." * 40_000 + "google.com"
    assert len(fits) <= MAX_HOST_CHARS < len(fits) + 2
    assert is_kind(fits, "search") and is_kind("news.google.co.uk", "search")
    assert not is_kind(too_long, "search") and not is_kind("b" + fits + "x" * 300, "search")


def test_every_listed_host_and_base_as_the_plain_loop_finds_it():
    for kind, site in _lists().items():
        for source in [
            *(f"x.{h}" for h in site.hosts),
            *(f"x.{b}.co.uk" for b in site.bases),
            *(f"{b}.com" for b in site.bases),
            *site.names,
        ]:
            assert is_kind(source, kind) == _is_kind_reference(source, kind), (source, kind)
