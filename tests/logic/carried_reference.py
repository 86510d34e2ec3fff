"""The independent reference of schema 2's carried columns (tests/logic/test_carried.py):
the query, referrer and channel of a landing, a session's columns, by plain loops."""

from __future__ import annotations

import re

from sessionize.content import SessionContent

SEARCH = {"google", "bing", "google.com", "news.google.co.uk", "bing.com", "duckduckgo.com"}
SOCIAL = {"facebook", "facebook.com", "m.facebook.com", "t.co", "linkedin.com"}


# ------------------------------------------------------------------- references


def ref_unescape(text: str) -> str:
    """HTML form decoding by hand: `+` is a space, `%XX` a byte, anything else as is."""
    out, i, raw = bytearray(), 0, text.replace("+", " ").encode()
    while i < len(raw):
        hexa = raw[i + 1 : i + 3].decode("latin-1")
        if raw[i : i + 1] == b"%" and re.fullmatch(r"[0-9A-Fa-f]{2}", hexa):
            out.append(int(hexa, 16))
            i += 3
        else:
            out.append(raw[i])
            i += 1
    return out.decode("utf-8", "replace")


def ref_query(url: str | None) -> dict[str, str | None]:
    names = ["utm_source", "utm_medium", "utm_campaign", "utm_term", "utm_content", "gclid"]
    found: dict[str, str] = {}
    if url is not None and "?" in url.split("#")[0]:
        query = url.split("#")[0].split("?", 1)[1]
        for part in query.split("&"):
            if not part:
                continue
            key, _, value = part.partition("=")
            found.setdefault(ref_unescape(key).lower(), ref_unescape(value))
    return {n: (found.get(n) or None) for n in names}


def ref_host(url: str | None) -> str | None:
    if not url or "//" not in url:
        return None
    rest = url.split("//", 1)[1]
    for stop in "/?#":
        rest = rest.split(stop)[0]
    rest = rest.rsplit("@", 1)[-1].split(":")[0].lower()
    if rest.startswith("www."):
        rest = rest[4:]
    return rest or None


def ref_channel(source, medium, gclid) -> str:
    src = source
    paid = medium is not None and re.fullmatch(r"cpc|ppc|paid.*", medium) is not None
    search, social = src in SEARCH, src in SOCIAL
    email = {"email", "e-mail", "e_mail", "e mail"}
    if gclid is not None or (paid and search):
        return "Paid Search"
    if paid and social:
        return "Paid Social"
    if paid:
        return "Paid Other"
    if medium in {"display", "banner", "cpm", "expandable", "interstitial"}:
        return "Display"
    if medium == "affiliate":
        return "Affiliates"
    if medium in email or src in email:
        return "Email"
    if search and medium in (None, "organic"):
        return "Organic Search"
    if social and medium in (None, "social", "social-network", "social-media", "sm"):
        return "Organic Social"
    if src is None and medium is None:
        return "Direct"
    if medium == "referral" or (medium is None and src is not None):
        return "Referral"
    return "Unassigned"


def reference_session(events: list[dict], content: SessionContent) -> dict:
    """Every carried column of one session, from its events sorted by time."""
    first, last = events[0], events[-1]
    q = ref_query(first.get("url"))
    host = ref_host(first.get("referrer"))
    if host is not None and host == ref_host(first.get("url")):
        host = None
    source = q["utm_source"].lower() if q["utm_source"] else host
    medium = q["utm_medium"].lower() if q["utm_medium"] else None
    views = sum(e["action"] in content.page_view_actions for e in events)
    engaged_us = 0
    for a, b in zip(events, events[1:], strict=False):
        engaged_us += min(b["event_time"] - a["event_time"], content.max_page_time_us)
    counts: dict[str, int] = {}
    for e in events:
        counts[e["action"]] = counts.get(e["action"], 0) + 1
    out = {
        "landing_page": first["page"],
        "exit_page": last["page"],
        **q,
        "referrer_host": host,
        "channel": ref_channel(source, medium, q["gclid"]),
        "page_view_count": views,
        "engaged_time_ms": engaged_us // 1000,
        "event_counts": sorted(counts.items()),
        "cart": next((e["cart"] for e in reversed(events) if e.get("cart") is not None), None),
        "is_bot": "bot" in (first.get("user_agent") or "").lower(),
    }
    converted = False
    for c in content.conversions:
        hits = [e for e in events if e["action"] == c.action]
        valued = [float(e[c.value_column]) for e in hits if e.get(c.value_column) is not None]
        total = 0.0
        for v in valued:
            total += v
        out[c.name + "_count"] = len(hits)
        out[c.name + "_value"] = total if valued else None
        out[c.name + "_first_at"] = hits[0]["event_time"] if hits else None
        converted = converted or bool(hits)
    duration_ms = (last["event_time"] - first["event_time"]) // 1000
    engaged = duration_ms * 1000 >= content.engaged_after_us or views >= 2 or converted
    out.update(converted=converted, engaged=engaged, bounce=not engaged)
    return out


# ------------------------------------------------------------------- running
