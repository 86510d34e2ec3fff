"""The site lists of GA4's channel group (schema 3): which sources are search engines, social
networks, video sites and shopping sites.

Two lists, looked up in this order:

1. Google's own source categories (`data/ga4_sources.json`: search, social, video,
   shopping), which GA4's default channel group tests ("Source matches a list of ... sites").
   Their entries are exact sources (`google`, `l.facebook.com`, `m.youtube.com`): a source
   on one of them is of that kind and of no other. Google lists four webmail hosts
   (`mail.google.com`, ...) as search sites; they are left out: a click in an e-mail is not
   a search.
2. For the other sources, Matomo's searchengine-and-social-list (`data/referers.json`), which
   knows the hosts of many more search engines and social networks, each entry one of:
   - a host (`duckduckgo.com`): that host exactly, not its subdomains (`mail.google.com`
     is no search engine because `google.com` is one);
   - `BASE.{}` (`google.{}`): BASE then a top-level domain, one label (`google.de`) or a
     second-level label of the usual kinds and one more (`google.co.uk`, `yahoo.co.jp`),
     nothing before BASE: `com.google.android.gm` (the Gmail app) and `mail.google.de` are
     not `google.{}`;
   - `{}.HOST` (`{}.search.yahoo.com`): any subdomain of HOST, or HOST itself;
   - a name (`Google`), for a `utm_source` written as a name.
   A source on both of Matomo's lists (Facebook, MySpace) is social.

Every lookup is bounded: a source longer than MAX_HOST_CHARS is on no list, and only as
many trailing labels as the longest entry has are tried.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from importlib import resources

KINDS = ("search", "social", "video", "shopping")
# The longest host DNS allows (RFC 1035): a longer source is no listed host, nor a name.
MAX_HOST_CHARS = 253
# Second-level labels under a country's top-level domain that `{}` also covers (co.uk).
SECOND_LEVEL = frozenset({"co", "com", "net", "org", "gov", "edu", "ac", "ne", "or", "go"})


@dataclass(frozen=True)
class Matomo:
    """One kind of Matomo's list: names, exact hosts, `BASE.{}` bases, `{}.HOST` hosts."""

    names: frozenset[str]
    hosts: frozenset[str]
    bases: frozenset[str]
    under: frozenset[str]
    most_labels: int


def _data(name: str) -> dict:
    text = resources.files("sessionize.logic").joinpath(f"data/{name}").read_text("utf-8")
    return json.loads(text)


@functools.lru_cache(maxsize=1)
def google_lists() -> dict[str, str]:
    """Google's sources: source -> kind."""
    data = _data("ga4_sources.json")
    return {source: kind for kind in KINDS for source in data[kind]}


@functools.lru_cache(maxsize=1)
def matomo_lists() -> dict[str, Matomo]:
    data = _data("referers.json")
    out = {}
    for kind in ("search", "social"):
        names, hosts, bases, under = set(), set(), set(), set()
        for name, patterns in data[kind].items():
            names.add(name.lower())
            for pattern in patterns:
                h = pattern.split("/", 1)[0].lower()
                if "." not in h:
                    continue
                if h.startswith("{}."):
                    under.add(h[3:].removeprefix("www."))
                elif h.endswith(".{}"):
                    bases.add(h[:-3].removeprefix("www."))
                else:
                    hosts.add(h.removeprefix("www."))
        labels = max(e.count(".") + 1 for e in hosts | bases | under)
        out[kind] = Matomo(
            frozenset(names), frozenset(hosts), frozenset(bases), frozenset(under), labels
        )
    return out


def site_kind(source: str | None) -> str | None:
    """The kind of `source` (a lower-case `utm_source` or referrer host): `search`,
    `social`, `video`, `shopping`, or None (see the module doc).

    >>> site_kind("google.co.uk"), site_kind("mail.google.com"), site_kind("m.youtube.com")
    ('search', None, 'video')
    """
    if source is None or len(source) > MAX_HOST_CHARS:
        return None
    return _kind(source)


@functools.lru_cache(maxsize=65536)
def _kind(source: str) -> str | None:
    found = google_lists().get(source)
    if found is not None:
        return found
    lists = matomo_lists()
    for kind in ("social", "search"):
        if _on_matomo(source, lists[kind]):
            return kind
    return None


def _on_matomo(source: str, site: Matomo) -> bool:
    if source in site.names or source in site.hosts:
        return True
    labels = source.split(".")
    n = len(labels)
    for i in range(max(0, n - site.most_labels), n):  # `{}.HOST`: HOST is a suffix
        if ".".join(labels[i:]) in site.under:
            return True
    # `BASE.{}`: the whole source but a one- or two-label top-level domain is BASE.
    for tld in (1, 2):
        if n - tld < 1 or n - tld > site.most_labels:
            continue
        if tld == 2 and labels[n - 2] not in SECOND_LEVEL:
            continue
        if ".".join(labels[: n - tld]) in site.bases:
            return True
    return False
