"""The site and its audience: pages, sites, devices, networks, languages, time offsets.

Everything is a small vocabulary addressed by integer codes, so the simulation stays in
numpy arrays and strings are only looked up when lines are written. All strings are plain
ASCII without quotes or backslashes: they go into JSON text unescaped.
"""

from __future__ import annotations

import numpy as np

CATEGORIES = 20
ARTICLES_PER_CATEGORY = 50
MISC_PAGES = ("search", "contact", "about", "login", "account", "cart", "checkout")

HOME = 0
FIRST_CATEGORY = 1  # "category 1" .. "category 20"
FIRST_ARTICLE = FIRST_CATEGORY + CATEGORIES  # "article category C-A"
FIRST_MISC = FIRST_ARTICLE + CATEGORIES * ARTICLES_PER_CATEGORY
PAGES: tuple[str, ...] = (
    ("home",)
    + tuple(f"category {c}" for c in range(1, CATEGORIES + 1))
    + tuple(
        f"article category {c}-{a}"
        for c in range(1, CATEGORIES + 1)
        for a in range(1, ARTICLES_PER_CATEGORY + 1)
    )
    + MISC_PAGES
)


def zipf(n: int, s: float) -> np.ndarray:
    """Probabilities of ranks 1..n, proportional to 1/rank**s (a few popular items)."""
    w = 1.0 / np.arange(1, n + 1) ** s
    return w / w.sum()


CATEGORY_P = zipf(CATEGORIES, 0.9)
ARTICLE_P = zipf(ARTICLES_PER_CATEGORY, 0.8)

# Page kinds: home, category, article, misc; landing pages are more often articles and home.
ENTRY_KIND_P = (0.30, 0.25, 0.40, 0.05)
NEXT_KIND_P = (0.08, 0.27, 0.55, 0.10)
STAY_IN_CATEGORY = 0.7  # share of category/article pages in the visit's category of interest

# Action codes. OMITTED writes no "action" key (the contract defaults it to "view").
ACTIONS = ("view", "click", "scroll", None, "browser_close", "ping", "purchase")
ACTION_P = (0.75, 0.15, 0.08, 0.02)  # for all but the closing event
CLOSE = 4
PING, PURCHASE = 5, 6  # only with web data (generate/web.py)

SITES = ("mysite.com", "m.mysite.com", "mysite.fr", "shop.mysite.com")
SITE_P = (0.55, 0.25, 0.12, 0.08)
API_VERSIONS = ("v1", "v2", "v3")
API_P = (0.10, 0.30, 0.60)
NETWORKS = ("wifi", "fiber", "4g", "adsl", "5g", "3g")
NETWORK_P = (0.35, 0.15, 0.25, 0.10, 0.10, 0.05)
LANGUAGES = ("en", "fr", "de", "es", "pl", "it", "pt")
LANGUAGE_P = (0.45, 0.15, 0.12, 0.10, 0.06, 0.06, 0.06)

# (device type, model, weight, operating systems, browsers)
_DEVICES = (
    ("desktop", "PC", 0.30, ("Windows 10", "Windows 11", "Linux"),
     ("Chrome 118", "Firefox 119", "Edge 118")),
    ("desktop", "MacBook Pro", 0.10, ("macOS 13", "macOS 14"),
     ("Safari 17", "Chrome 118", "Firefox 119")),
    ("smartphone", "iPhone 14", 0.20, ("iOS 16", "iOS 17"), ("Safari 16", "Chrome 118")),
    ("smartphone", "Galaxy S23", 0.15, ("Android 13", "Android 14"),
     ("Chrome 118", "Samsung Internet 22", "Firefox 53")),
    ("smartphone", "Pixel 7", 0.07, ("Android 13", "Android 14"), ("Chrome 118",)),
    ("tablet", "Galaxy Tab S3", 0.08, ("Android 8.1", "Android 9"), ("Chrome 70", "Firefox 53")),
    ("tablet", "iPad Air", 0.10, ("iPadOS 16", "iPadOS 17"), ("Safari 16",)),
)  # fmt: skip
# Every (type, model, os, browser) combination with its probability.
DEVICE_COMBOS: tuple[tuple[str, str, str, str], ...] = tuple(
    (kind, model, os, browser)
    for kind, model, _, oses, browsers in _DEVICES
    for os in oses
    for browser in browsers
)
DEVICE_COMBO_P = np.array(
    [
        w / (len(oses) * len(browsers))
        for _, _, w, oses, browsers in _DEVICES
        for _ in oses
        for _ in browsers
    ]
)
DEVICE_COMBO_P = DEVICE_COMBO_P / DEVICE_COMBO_P.sum()

# Time zone suffixes of event_time. Most lines are written in UTC with "+00:00"; a few have
# no offset (UTC by contract), a few are local times with their offset (same instant).
TIME_SUFFIXES = ("+00:00", "", "+02:00", "-05:00", "+05:30", "-03:00", "+09:00", "+01:00")
TIME_OFFSETS_MS = np.array([0, 0, 120, -300, 330, -180, 540, 60], dtype=np.int64) * 60_000
UTC_SHARE, NAIVE_SHARE = 0.96, 0.025  # the rest is spread over the non-UTC offsets

# Fields written only with rule data (generate/rules.py): `utm.campaign`, and `gap_s`, a
# per-event session gap in seconds, written as these JSON numbers.
CAMPAIGNS = ("spring_sale", "newsletter", "retargeting", "black_friday")
GAP_SECONDS = ("60", "300", "900", "1800", "2700", "90.5")

# Optional sections left out of whole visits (only three fields are required).
OMIT_SOURCE, OMIT_USER, OMIT_TECHNICAL = 0.01, 0.02, 0.02


def choose(rng: np.random.Generator, p, size: int) -> np.ndarray:
    """Codes 0..len(p)-1 drawn with probabilities p, as small integers."""
    cdf = np.cumsum(p)[:-1]
    u = rng.random(size)
    if cdf.size > 8:
        return np.searchsorted(cdf, u, side="right").astype(np.int16)
    code = np.zeros(size, dtype=np.int16)
    for bound in cdf:  # a few comparisons beat a binary search over a tiny table
        code += u >= bound
    return code
