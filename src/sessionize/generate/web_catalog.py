"""Vocabularies of the web data (`generate --web-data`): traffic kinds with their landing
query strings and referrers, page paths, and user agents of browsers and crawlers.

Every string is plain ASCII without quotes or backslashes: it goes into JSON text unescaped.
Query strings carry what real landing URLs do: UTM parameters with `+` and `%20` for spaces,
upper- and mixed-case keys, a repeated key, an empty value, an invalid `%` escape, a
`#fragment`, and gclids on paid search.
"""

from __future__ import annotations

import numpy as np

from sessionize.generate import catalog as cat

# (kind, share of visits, landing query strings, referrers; None: no referrer). A visit's
# query string and referrer are drawn uniformly from its kind's.
KINDS = (
    ("direct", 0.28, ("", "", "", "?utm_source=&utm_medium="), (None,)),
    ("organic search", 0.30, ("", "", "", "?q=running+shoes"),
     ("https://www.google.com/", "https://www.google.fr/", "https://www.bing.com/search?q=my+site",
      "https://duckduckgo.com/", "https://search.yahoo.com/", "https://yandex.ru/search/?text=shop",
      "https://www.ecosia.org/search?q=shop")),
    ("organic social", 0.08,
     ("", "", "?utm_source=twitter&utm_medium=social",
      "?UTM_SOURCE=Facebook&UTM_MEDIUM=social-network", "?utm_source=linkedin&utm_medium=sm#top"),
     ("https://www.facebook.com/", "https://l.facebook.com/l.php", "https://t.co/x7Yq2",
      "https://www.linkedin.com/feed/", "https://www.reddit.com/r/shopping/",
      "https://www.instagram.com/", "https://m.youtube.com/watch")),
    ("paid search", 0.08,
     ("?gclid=EAIaIQobChMI8Zp2q5HxggMV",
      "?utm_source=google&utm_medium=cpc&utm_campaign=spring+sale&utm_term=running+shoes"
      "&gclid=Cj0KCQiA4NWrBhD",
      "?GCLID=CjwKCAiAvJarBhA1&utm_source=google",
      "?utm_source=bing&utm_medium=cpc&utm_campaign=brand%20terms&utm_term=my%20site",
      "?utm_source=google&utm_source=bing&utm_medium=ppc&utm_campaign=retargeting"),
     ("https://www.google.com/", "https://www.bing.com/")),
    ("paid social", 0.04,
     ("?utm_source=facebook&utm_medium=paid_social&utm_campaign=black%20friday"
      "&utm_content=carousel+1",
      "?utm_source=instagram&utm_medium=paid&utm_campaign=spring_sale",
      "?utm_source=linkedin&utm_medium=paid-social&utm_campaign=b2b"),
     ("https://m.facebook.com/", "https://www.instagram.com/", "https://www.linkedin.com/")),
    ("email", 0.08,
     ("?utm_source=newsletter&utm_medium=email&utm_campaign=weekly+digest"
      "&utm_content=header%20link",
      "?utm_source=crm&utm_medium=e-mail&utm_campaign=cart_reminder",
      "?Utm_Source=newsletter&Utm_Medium=Email&utm_campaign=black%20friday",
      "?utm_campaign=50%off&utm_source=newsletter&utm_medium=email"),
     (None, "https://mail.google.com/", "https://outlook.live.com/")),
    ("referral", 0.09, ("", "", "?utm_source=partnerblog.com&utm_medium=referral"),
     ("https://news.ycombinator.com/item?id=41000000",
      "https://en.wikipedia.org/wiki/Online_shopping",
      "http://blog.example.org:8080/2026/best-shops", "https://www.partnerblog.com/reviews",
      "https://forum.example.net/t/where-to-buy")),
    ("display", 0.03,
     ("?utm_source=doubleclick&utm_medium=display&utm_campaign=awareness",
      "?utm_source=criteo&utm_medium=cpm&utm_campaign=retargeting&utm_content=banner%20300x250"),
     ("https://googleads.g.doubleclick.net/", "https://www.news-site.example/")),
    ("affiliate", 0.02,
     ("?utm_source=awin&utm_medium=affiliate&utm_campaign=deals",
      "?utm_source=cashback-site&utm_medium=affiliate&utm_campaign=summer%2Bsale"),
     ("https://www.awin1.com/", "https://cashback-site.example/")),
)  # fmt: skip
KIND_P = np.array([k[1] for k in KINDS]) / sum(k[1] for k in KINDS)
DIRECT = 0

# Flat vocabularies; a kind's entries start at its offset.
QUERIES: tuple[str, ...] = tuple(q for k in KINDS for q in k[2])
QUERY_START = np.cumsum([0] + [len(k[2]) for k in KINDS])[:-1]
QUERY_COUNT = np.array([len(k[2]) for k in KINDS])
REFERRERS: tuple[str | None, ...] = tuple(r for k in KINDS for r in k[3])
REFERRER_START = np.cumsum([0] + [len(k[3]) for k in KINDS])[:-1]
REFERRER_COUNT = np.array([len(k[3]) for k in KINDS])

# A conversion rate per kind (purchases per visit); bots never buy.
PURCHASE_P = np.array([0.03, 0.03, 0.015, 0.06, 0.03, 0.07, 0.03, 0.01, 0.05])
PURCHASE_NO_VALUE = 0.05  # purchases written without an `order` object
VALUE_MEDIAN, VALUE_SIGMA = 45.0, 0.8  # order.value, log-normal, in whole cents

# The host of each of catalog.SITES in page URLs (the main site with its `www.`).
HOSTS = tuple("www.mysite.com" if s == "mysite.com" else s for s in cat.SITES)


def _path(page: str) -> str:
    if page == "home":
        return "/"
    if page.startswith("article category "):
        category, article = page.removeprefix("article category ").split("-")
        return f"/category-{category}/article-{article}"
    return "/" + page.replace(" ", "-")


PATHS: tuple[str, ...] = tuple(_path(p) for p in cat.PAGES)
CHECKOUT = cat.PAGES.index("checkout")

# User agents: real browser strings per device model (catalog._DEVICES order), then crawlers.
BROWSER_AGENTS = {
    "PC": "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) "
    "Chrome/118.0.0.0 Safari/537.36",
    "MacBook Pro": "Mozilla/5.0 (Macintosh; Intel Mac OS X 10_15_7) AppleWebKit/605.1.15 "
    "(KHTML, like Gecko) Version/17.0 Safari/605.1.15",
    "iPhone 14": "Mozilla/5.0 (iPhone; CPU iPhone OS 17_0 like Mac OS X) AppleWebKit/605.1.15 "
    "(KHTML, like Gecko) Version/17.0 Mobile/15E148 Safari/604.1",
    "Galaxy S23": "Mozilla/5.0 (Linux; Android 14; SM-S911B) AppleWebKit/537.36 (KHTML, like "
    "Gecko) Chrome/118.0.0.0 Mobile Safari/537.36",
    "Pixel 7": "Mozilla/5.0 (Linux; Android 14; Pixel 7) AppleWebKit/537.36 (KHTML, like Gecko) "
    "Chrome/118.0.0.0 Mobile Safari/537.36",
    "Galaxy Tab S3": "Mozilla/5.0 (Linux; Android 9; SM-T820) AppleWebKit/537.36 (KHTML, like "
    "Gecko) Chrome/70.0.3538.110 Safari/537.36",
    "iPad Air": "Mozilla/5.0 (iPad; CPU OS 17_0 like Mac OS X) AppleWebKit/605.1.15 (KHTML, like "
    "Gecko) Version/17.0 Mobile/15E148 Safari/604.1",
}
BOT_AGENTS = (
    "Mozilla/5.0 (compatible; Googlebot/2.1; +http://www.google.com/bot.html)",
    "Mozilla/5.0 AppleWebKit/537.36 (KHTML, like Gecko; compatible; Googlebot/2.1; "
    "+http://www.google.com/bot.html) Chrome/118.0.0.0 Safari/537.36",
    "Mozilla/5.0 (compatible; bingbot/2.0; +http://www.bing.com/bingbot.htm)",
    "Mozilla/5.0 (compatible; AhrefsBot/7.0; +http://ahrefs.com/robot/)",
    "Mozilla/5.0 (compatible; YandexBot/3.0; +http://yandex.com/bots)",
    "Mozilla/5.0 (compatible; SemrushBot/7~bl; +http://www.semrush.com/bot.html)",
    "DuckDuckBot/1.1; (+http://duckduckgo.com/duckduckbot.html)",
    "facebookexternalhit/1.1 (+http://www.facebook.com/externalhit_uatext.php)",
)
AGENTS: tuple[str, ...] = (*BROWSER_AGENTS.values(), *BOT_AGENTS)
FIRST_BOT_AGENT = len(BROWSER_AGENTS)
BOT_SHARE = 0.03  # of visits
# The browser agent of each catalog.DEVICE_COMBOS code.
AGENT_OF_DEVICE = np.array(
    [list(BROWSER_AGENTS).index(model) for _, model, _, _ in cat.DEVICE_COMBOS], np.int16
)

PING_EVERY_MS = 10_000  # a page ping every 10 s while the user stays on a page
ACTIVE_MEAN_MS = 40_000  # time a user stays active on a viewed page (exponential mean)
