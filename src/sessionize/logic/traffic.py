"""A session's traffic source, from its first event's URL and referrer.

`utm_source`, `utm_medium`, `utm_campaign`, `utm_term`, `utm_content` and `gclid` come from
the URL's query string, decoded as HTML forms are (`urllib.parse.parse_qsl`: `+` is a
space, `%XX` is decoded, an invalid escape is kept as written; the `#fragment` is not part
of the query): keys compare case-insensitively, the first occurrence of a key wins and an
empty value is null. `referrer_host` is the referrer's host as `urllib.parse` gives it,
lower case, without a port and without one leading `www.`; null when it is the site's own
host (one of `site_hosts`, or without them the host of the URL).

URLs are parsed once per distinct value of a batch, so the cost follows the number of
distinct landing URLs, not of sessions.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable
from urllib.parse import parse_qsl, urlsplit

import pyarrow as pa
import pyarrow.compute as pc

from sessionize.base_schema import QUERY_COLUMNS

# Ad platforms' click ids (schema 3's `click_id_type`), in the order a URL holding several
# is read: Google's (Ads; Display & Video 360 and Campaign Manager 360; iOS app and web
# measurement), Microsoft Advertising's, Meta's, TikTok's, LinkedIn's.
CLICK_IDS = ("gclid", "dclid", "gbraid", "wbraid", "msclkid", "fbclid", "ttclid", "li_fat_id")


def query_values(url: str | None) -> tuple[str | None, ...]:
    """The values of QUERY_COLUMNS in `url`'s query string (see the module doc).

    >>> query_values("https://a.example/p?UTM_Source=News+Letter&utm_source=x#utm_medium=y")
    ('News Letter', None, None, None, None, None)
    """
    if url is None or "?" not in url:
        return _NO_VALUES
    if len(url) <= CACHED_URL_CHARS:
        return _cached_values(url)
    return _values(_parse_query(url))


def _values(found: dict[str, str]) -> tuple[str | None, ...]:
    return tuple(found.get(name) or None for name in QUERY_COLUMNS)


def click_id(url: str | None) -> tuple[str | None, str | None]:
    """(type, value) of the first of CLICK_IDS with a value in `url`'s query (or Nones).

    >>> click_id("https://a.example/?fbclid=IwAR&gclid=Cj0")
    ('gclid', 'Cj0')
    """
    found = _query(url)
    for name in CLICK_IDS:
        if found.get(name):
            return name, found[name]
    return None, None


def query_value(url: str | None, name: str) -> str | None:
    """The value of `name` (lower case) in `url`'s query, as QUERY_COLUMNS are read."""
    return _query(url).get(name) or None


def _query(url: str | None) -> dict[str, str]:
    """`url`'s query string: each key, lower-cased, to its first value (a URL without `?`
    has none; one of at most CACHED_URL_CHARS is parsed once per process)."""
    if url is None or "?" not in url:
        return {}
    if len(url) <= CACHED_URL_CHARS:
        return _cached_query(url)
    return _parse_query(url)


# URLs up to this long are parsed once per process (a bounded cache): landing URLs repeat
# across batches; a longer one is parsed each time.
CACHED_URL_CHARS = 2048


@functools.lru_cache(maxsize=32768)
def _cached_query(url: str) -> dict[str, str]:
    return _parse_query(url)


# A landing URL's values, kept as one tuple: its session's columns read them as they are.
@functools.lru_cache(maxsize=32768)
def _cached_values(url: str) -> tuple[str | None, ...]:
    return _values(_cached_query(url))


_NO_VALUES: tuple[str | None, ...] = (None,) * len(QUERY_COLUMNS)


def _parse_query(url: str) -> dict[str, str]:
    try:
        query = urlsplit(url).query
    except ValueError:  # e.g. an unbalanced `[` in the host
        return {}
    found: dict[str, str] = {}
    for key, value in parse_qsl(query, keep_blank_values=True, errors="replace"):
        found.setdefault(key.lower(), value)
    return found


def per_distinct(values: pa.Array, read, width: int) -> list[pa.Array]:
    """`read(value)` (a tuple of `width` strings or None) of each value, as `width` string
    arrays, each distinct value read once; `read` reads a query string, so a value without
    `?` reads as nulls without a call."""
    codes, distinct = _distinct(values)
    nothing = (None,) * width
    found = [read(v) if v is not None and "?" in v else nothing for v in distinct]
    return [pa.array([f[i] for f in found], pa.string()).take(codes) for i in range(width)]


def host(url: str | None) -> str | None:
    """`url`'s host, lower case, without its port and one leading `www.` (None if none).

    >>> host("https://WWW.Example.com:8443/a?b")
    'example.com'
    """
    if not url:
        return None
    if len(url) <= CACHED_URL_CHARS:
        return _cached_host(url)
    return _host(url)


@functools.lru_cache(maxsize=32768)
def _cached_host(url: str) -> str | None:
    return _host(url)


def _host(url: str) -> str | None:
    try:
        name = urlsplit(url.strip()).hostname
    except ValueError:
        return None
    if not name:
        return None
    return name.removeprefix("www.") or None


def normalize_hosts(hosts: Iterable[str]) -> frozenset[str]:
    """`--site-hosts` as `host` normalizes a referrer's (a bare host or a URL)."""
    out = set()
    for h in hosts:
        text = h.strip()
        found = host(text if "//" in text else "//" + text)
        if found:
            out.add(found)
    return frozenset(out)


def traffic_columns(
    urls: pa.Array, referrers: pa.Array, site_hosts: frozenset[str]
) -> dict[str, pa.Array]:
    """Per session, from its first event's URL and referrer (null arrays for an unmapped
    field): QUERY_COLUMNS and `referrer_host`, as string arrays."""
    n = len(urls)
    out: dict[str, pa.Array] = {}
    codes, distinct = _distinct(urls)
    parsed = [query_values(u) for u in distinct]
    for i, name in enumerate(QUERY_COLUMNS):
        values = pa.array([p[i] for p in parsed], pa.string())
        out[name] = values.take(codes) if n else pa.array([], pa.string())
    ref_codes, ref_distinct = _distinct(referrers)
    ref_host = pa.array([host(r) for r in ref_distinct], pa.string()).take(ref_codes)
    if site_hosts:
        own = pc.is_in(ref_host, value_set=pa.array(sorted(site_hosts), pa.string()))
    else:
        url_host = pa.array([host(u) for u in distinct], pa.string()).take(codes)
        own = pc.equal(ref_host, url_host)
    out["referrer_host"] = pc.if_else(pc.fill_null(own, False), None, ref_host)
    return out


def _distinct(values: pa.Array) -> tuple[pa.Array, list[str | None]]:
    """(index of each value in the distinct list, the distinct values as Python str)."""
    encoded = pc.dictionary_encode(values)
    return encoded.indices.fill_null(len(encoded.dictionary)), [
        *encoded.dictionary.to_pylist(),
        None,
    ]
