"""The independent reference of schema 3's carried columns (tests/logic/test_carried_v3.py):
GA4's source lists, channel groups, click ids and user agents, written by hand."""

from __future__ import annotations

# ------------------------------------------------------------------ the reference's facts

# The sources the generated data uses, by the kind GA4's lists (and for hosts Google's list
# lacks, the engines' own hosts) give them; written by hand.
SEARCH = {
    "google",
    "bing",
    "google.com",
    "google.fr",
    "bing.com",
    "duckduckgo.com",
    "search.yahoo.com",
    "yandex.ru",
    "ecosia.org",
    "google.co.uk",
    "uk.search.yahoo.com",
    "com.google.android.googlequicksearchbox",
}
SOCIAL = {
    "twitter",
    "facebook",
    "linkedin",
    "instagram",
    "tiktok",
    "facebook.com",
    "l.facebook.com",
    "m.facebook.com",
    "t.co",
    "linkedin.com",
    "reddit.com",
    "instagram.com",
    "news.ycombinator.com",
}
VIDEO = {"youtube", "youtube.com", "m.youtube.com", "vimeo.com"}
SHOPPING = {"amazon", "amazon.com", "ebay.com"}
LETTERS_BUT_E = set("abcdfghijklmnopqrstuvwxyz")
CLICK_IDS = ["gclid", "dclid", "gbraid", "wbraid", "msclkid", "fbclid", "ttclid", "li_fat_id"]
# What ua-parser and CrawlerDetect make of the generator's 20 user agents, as expected
# of them: (browser family, version, OS family, device category).
AGENTS = {
    "Chrome/118.0.0.0 Safari/537.36": ("Chrome", "118.0.0", "Windows", "desktop"),
    "Version/17.0 Safari/605.1.15": ("Safari", "17.0", "Mac OS X", "desktop"),
    "iPhone OS 17_0": ("Mobile Safari", "17.0", "iOS", "mobile"),
    "SM-S911B": ("Chrome Mobile", "118.0.0", "Android", "mobile"),
    "Pixel 7": ("Chrome Mobile", "118.0.0", "Android", "mobile"),
    "SM-T820": ("Chrome", "70.0.3538", "Android", "tablet"),
    "iPad": ("Mobile Safari", "17.0", "iOS", "tablet"),
    "Firefox/121.0": ("Firefox", "121.0", "Windows", "desktop"),
    "Edg/120": ("Edge", "120.0.2210", "Windows", "desktop"),
    "SamsungBrowser/23.0": ("Samsung Internet", "23.0", "Android", "mobile"),
    "X11; Linux": ("Chrome", "120.0.0", "Linux", "desktop"),
    "KFTRWI": ("Amazon Silk", "118.4.1", "Android", "tablet"),
    "Googlebot/2.1; +http": ("Googlebot", "2.1", None, "bot"),
    "bingbot": ("bingbot", "2.0", None, "bot"),
    "AhrefsBot": ("AhrefsBot", "7.0", None, "bot"),
    "YandexBot": ("YandexBot", "3.0", None, "bot"),
    "SemrushBot": ("SemrushBot", "7", None, "bot"),
    "DuckDuckBot": ("DuckDuckBot", "1.1", None, "bot"),
    "facebookexternalhit": ("FacebookBot", "1.1", None, "bot"),
}


def ref_agent(ua: str | None) -> tuple:
    if ua is None:
        return (None, None, None, "other")
    found = [v for k, v in AGENTS.items() if k in ua]
    assert found, f"a user agent the reference does not know: {ua}"
    return found[-1]


def ref_query(url: str | None) -> dict[str, str]:
    """Keys (lower case) to their first value; `+` a space, `%XX` a byte, empty: absent."""
    found: dict[str, str] = {}
    if url is None or "?" not in url.split("#")[0]:
        return found
    for part in url.split("#")[0].split("?", 1)[1].split("&"):
        key, _, value = part.partition("=")
        value = value.replace("+", " ")
        raw, i = b"", 0
        while i < len(value):
            if (
                value[i] == "%"
                and len(value) >= i + 3
                and all(c in "0123456789abcdefABCDEF" for c in value[i + 1 : i + 3])
            ):
                raw += bytes([int(value[i + 1 : i + 3], 16)])
                i += 3
            else:
                raw += value[i].encode()
                i += 1
        found.setdefault(key.lower(), raw.decode("utf-8", "replace"))
    return {k: v for k, v in found.items() if v}


def ref_host(url: str | None) -> str | None:
    if not url or "://" not in url:
        return None
    host = url.split("://", 1)[1].split("/", 1)[0].split("?")[0].split(":")[0].lower()
    return host[4:] if host.startswith("www.") else host or None


def kind(source: str | None) -> str | None:
    for name, sites in (
        ("search", SEARCH),
        ("social", SOCIAL),
        ("video", VIDEO),
        ("shopping", SHOPPING),
    ):
        if source in sites:
            return name
    return None


def ref_channel(q: dict, referrer: str | None) -> str:
    """GA4's default channel group, rule by rule (docs/concepts/sessions.md's table)."""
    source = q.get("utm_source", "").lower() or None
    medium = q.get("utm_medium", "").lower() or None
    campaign = q.get("utm_campaign", "").lower()
    landing_click = next((c for c in CLICK_IDS if c in q), None)
    if landing_click in ("gclid", "gbraid", "wbraid"):
        source, medium = "google", "cpc"
    elif landing_click == "dclid":
        source, medium = "dv360", "cpm"
    elif source is None and referrer is not None:
        source = referrer
        medium = medium or ("organic" if kind(referrer) == "search" else "referral")
    m = medium or ""
    paid = m == "ppc" or "cp" in m or m == "retargeting" or m.startswith("paid")
    shop_campaign = "shopping" in campaign or any(
        campaign[i : i + 4] == "shop" and (i == 0 or campaign[i - 1] not in LETTERS_BUT_E)
        for i in range(len(campaign))
    )
    k = kind(source)
    if source is None and medium is None:
        return "Direct"
    if "cross-network" in campaign:
        return "Cross-network"
    for channel, hit in (
        ("Paid Shopping", k == "shopping" or shop_campaign),
        ("Paid Search", k == "search"),
        ("Paid Social", k == "social"),
        ("Paid Video", k == "video"),
    ):
        if paid and hit:
            return channel
    if m in ("display", "banner", "expandable", "interstitial", "cpm"):
        return "Display"
    if paid:
        return "Paid Other"
    if k == "shopping" or shop_campaign:
        return "Organic Shopping"
    if k == "social" or m in (
        "social",
        "social-network",
        "social-media",
        "sm",
        "social network",
        "social media",
    ):
        return "Organic Social"
    if k == "video" or "video" in m:
        return "Organic Video"
    if k == "search" or m == "organic":
        return "Organic Search"
    if m in ("referral", "app", "link"):
        return "Referral"
    if {source, medium} & {"email", "e-mail", "e_mail", "e mail"}:
        return "Email"
    if m == "affiliate":
        return "Affiliates"
    if m == "audio":
        return "Audio"
    if source == "sms" or m == "sms":
        return "SMS"
    if m.endswith("push") or "mobile" in m or "notification" in m or source == "firebase":
        return "Mobile Push Notifications"
    return "Unassigned"
