"""Vocabularies of the web data (`generate --web-data`): traffic kinds with their landing
query strings and referrers, page paths, and user agents of browsers and crawlers.

Every string is plain ASCII without quotes or backslashes: it goes into JSON text unescaped.
Query strings carry what real landing URLs do: UTM parameters with `+` and `%20` for spaces,
upper- and mixed-case keys, a repeated key, an empty value, an invalid `%` escape, a
`#fragment`, gclids on paid search and the other click ids; the kinds reach every channel of
GA4's default channel group and the site lists' cases (webmail, the Gmail app, a country's
Google, a subdomain wildcard); 20 real user agents of browsers, phones, tablets and crawlers.
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
    # The rest of GA4's default channel group, and the other click ids (schema 3).
    ("cross-network", 0.01,
     ("?utm_source=google&utm_medium=cpc&utm_campaign=pmax-cross-network&gbraid=0AAAAAo1",
      "?wbraid=CkQKCQiA&utm_campaign=Demand+Gen+cross-network"), ("https://www.google.com/",)),
    ("paid shopping", 0.01,
     ("?utm_source=google&utm_medium=cpc&utm_campaign=shopping_spring",
      "?utm_source=amazon&utm_medium=paid&utm_campaign=sponsored"), (None,)),
    ("paid video", 0.01,
     ("?utm_source=youtube&utm_medium=cpv&utm_campaign=launch", "?dclid=CJa6x&utm_source=dv"),
     ("https://www.youtube.com/",)),
    ("paid other", 0.01,
     ("?utm_source=criteo&utm_medium=retargeting&msclkid=9f2b1c",
      "?utm_source=tiktok&utm_medium=paid_ads&ttclid=E.C.P.1", "?fbclid=IwAR0xYz&utm_medium=cpc",
      "?li_fat_id=5c3e&utm_source=partner&utm_medium=ppc"), (None,)),
    ("organic shopping", 0.01, ("", "?utm_source=newsletter&utm_campaign=shop-the-look"),
     ("https://www.amazon.com/", "https://www.ebay.com/itm/1")),
    ("organic video", 0.01, ("", "?utm_source=podcast-player&utm_medium=video"),
     ("https://www.youtube.com/watch?v=x", "https://vimeo.com/123")),
    ("audio", 0.005, ("?utm_source=spotify&utm_medium=audio&utm_campaign=ads",), (None,)),
    ("sms", 0.005, ("?utm_source=sms&utm_medium=sms", "?utm_source=twilio&utm_medium=sms"),
     (None,)),
    ("mobile push", 0.005,
     ("?utm_source=app&utm_medium=web-push", "?utm_source=firebase&utm_campaign=reengage",
      "?utm_source=onesignal&utm_medium=mobile_notification"), (None,)),
    ("webmail and apps", 0.01, ("",),
     ("https://mail.google.com/mail/u/0/", "android-app://com.google.android.gm/",
      "android-app://com.google.android.googlequicksearchbox/", "https://www.google.co.uk/",
      "https://uk.search.yahoo.com/")),
    # A source and medium no rule names: GA4's Unassigned.
    ("unassigned", 0.005, ("?utm_source=flyer&utm_medium=print&utm_campaign=store-opening",),
     (None,)),
)  # fmt: skip
KIND_P = np.array([k[1] for k in KINDS]) / sum(k[1] for k in KINDS)
DIRECT = 0

# Landing queries a later page view of CAMPAIGN_CHANGE_P of the human visits carries: a new
# campaign in the URL mid-visit (`--split-on-change utm_campaign` splits there).
CAMPAIGN_CHANGES = (
    "?utm_source=newsletter&utm_medium=email&utm_campaign=flash+sale",
    "?utm_source=facebook&utm_medium=paid_social&utm_campaign=retarget",
)
CAMPAIGN_CHANGE_P = 0.02

# Flat vocabularies; a kind's entries start at its offset.
QUERIES: tuple[str, ...] = (*(q for k in KINDS for q in k[2]), *CAMPAIGN_CHANGES)
FIRST_CHANGE = len(QUERIES) - len(CAMPAIGN_CHANGES)
QUERY_START = np.cumsum([0] + [len(k[2]) for k in KINDS])[:-1]
QUERY_COUNT = np.array([len(k[2]) for k in KINDS])
REFERRERS: tuple[str | None, ...] = tuple(r for k in KINDS for r in k[3])
REFERRER_START = np.cumsum([0] + [len(k[3]) for k in KINDS])[:-1]
REFERRER_COUNT = np.array([len(k[3]) for k in KINDS])

# A conversion rate per kind (purchases per visit); bots never buy.
PURCHASE_P = np.array(
    [
        0.03,
        0.03,
        0.015,
        0.06,
        0.03,
        0.07,
        0.03,
        0.01,
        0.05,
        0.05,
        0.06,
        0.02,
        0.02,
        0.04,
        0.02,
        0.02,
        0.03,
        0.04,
        0.02,
        0.02,
    ]
)
assert len(PURCHASE_P) == len(KINDS), "one conversion rate per kind of traffic"
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
# Other browsers, which OTHER_BROWSER_P of the human visits use instead of their device's.
OTHER_BROWSERS = (
    "Mozilla/5.0 (Windows NT 10.0; Win64; x64; rv:121.0) Gecko/20100101 Firefox/121.0",
    "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) "
    "Chrome/120.0.0.0 Safari/537.36 Edg/120.0.2210.61",
    "Mozilla/5.0 (Linux; Android 13; SAMSUNG SM-A536B) AppleWebKit/537.36 (KHTML, like Gecko) "
    "SamsungBrowser/23.0 Chrome/115.0.0.0 Mobile Safari/537.36",
    "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/120.0.0.0 "
    "Safari/537.36",
    "Mozilla/5.0 (Linux; Android 11; KFTRWI) AppleWebKit/537.36 (KHTML, like Gecko) Silk/118.4.1 "
    "like Chrome/118.0.5993.117 Safari/537.36",
)
OTHER_BROWSER_P = 0.15
AGENTS: tuple[str, ...] = (*BROWSER_AGENTS.values(), *OTHER_BROWSERS, *BOT_AGENTS)
FIRST_OTHER_BROWSER = len(BROWSER_AGENTS)
FIRST_BOT_AGENT = len(BROWSER_AGENTS) + len(OTHER_BROWSERS)
BOT_SHARE = 0.03  # of visits
# The browser agent of each catalog.DEVICE_COMBOS code.
AGENT_OF_DEVICE = np.array(
    [list(BROWSER_AGENTS).index(model) for _, model, _, _ in cat.DEVICE_COMBOS], np.int16
)

PING_EVERY_MS = 10_000  # a page ping every 10 s while the user stays on a page
ACTIVE_MEAN_MS = 40_000  # time a user stays active on a viewed page (exponential mean)
