"""A session's browser, operating system and device category, from its first event's user
agent (schema 3): `browser_family`, `browser_version`, `os_family`, `device_category`.

The families come from ua-parser (`ua-parser` with `ua-parser-builtins`, uap-core's rules
bundled with the package: nothing is downloaded), as Snowplow's and Segment's dbt packages
read them. `browser_version` is the version's known parts joined by dots (`120.0.6099`).
`device_category` is one of:

- `bot`: CrawlerDetect's lists call it a bot's (`is_bot`), or ua-parser's device is `Spider`;
- `tablet`: an iPad, a Kindle, a user agent saying `Tablet`, or Android without `Mobile`
  (Android tablets leave the token out; phones send it);
- `mobile`: a phone's OS (iOS, Android, Windows Phone, ...), or `Mobile` in the agent;
- `desktop`: a desktop OS (Windows, macOS, Linux, Chrome OS, ...);
- `other`: anything else, and a missing user agent.

As for `is_bot`, only a user agent's first MAX_USER_AGENT_CHARS characters are read, so a
long one costs what an ordinary one does. Each distinct value is parsed once per process
(a bounded cache) and once per batch, so the cost follows distinct user agents, not events.
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

from sessionize.logic.bots import MAX_USER_AGENT_CHARS, is_bot

CATEGORIES = ("desktop", "mobile", "tablet", "bot", "other")
_CACHE_SIZE = 50_000
_MOBILE_OS = frozenset(
    {
        "ios",
        "android",
        "windows phone",
        "blackberry os",
        "kaios",
        "firefox os",
        "symbian os",
        "tizen",
        "harmonyos",
    }
)
_DESKTOP_OS = frozenset(
    {
        "windows",
        "mac os x",
        "linux",
        "ubuntu",
        "chrome os",
        "fedora",
        "debian",
        "freebsd",
        "openbsd",
        "netbsd",
        "solaris",
        "mandriva",
        "red hat",
        "suse",
        "gentoo",
        "mint",
    }
)
Parsed = tuple[str | None, str | None, str | None, str]

_parsed: dict[str, Parsed] = {}


def describe(user_agent: str, bot: bool = False) -> Parsed:
    """(browser_family, browser_version, os_family, device_category) of one user agent
    (already cut to MAX_USER_AGENT_CHARS); `bot`: CrawlerDetect's answer for it.

    >>> describe("Mozilla/5.0 (iPhone; CPU iPhone OS 17_1 like Mac OS X) AppleWebKit/605.1.15 "
    ...          "(KHTML, like Gecko) Version/17.1 Mobile/15E148 Safari/604.1")
    ('Mobile Safari', '17.1', 'iOS', 'mobile')
    """
    from ua_parser import parse

    found = parse(user_agent)
    agent, os, device = found.user_agent, found.os, found.device
    family = agent.family if agent and agent.family != "Other" else None
    version = ".".join(p for p in (agent.major, agent.minor, agent.patch) if p) if agent else ""
    os_family = os.family if os and os.family != "Other" else None
    return (
        family,
        version or None,
        os_family,
        _category(user_agent, os_family, device.family if device else None, bot),
    )


def _category(ua: str, os_family: str | None, device: str | None, bot: bool) -> str:
    text = ua.lower()
    os_name = (os_family or "").lower()
    if bot or device == "Spider":
        return "bot"
    if (
        device in ("iPad", "Kindle")
        or "tablet" in text
        or (os_name == "android" and "mobile" not in text)
    ):
        return "tablet"
    if os_name in _MOBILE_OS or "mobile" in text:
        return "mobile"
    if os_name in _DESKTOP_OS:
        return "desktop"
    return "other"


def agent_columns(user_agents: pa.Array | pa.ChunkedArray) -> list[pa.Array]:
    """Per value: browser_family, browser_version, os_family, device_category (a missing
    user agent: nulls and `other`)."""
    n = len(user_agents)
    if n == 0:
        return [pa.array([], pa.string()) for _ in range(4)]
    cut = pc.utf8_slice_codeunits(user_agents, 0, MAX_USER_AGENT_CHARS)
    encoded = pc.dictionary_encode(cut)
    if isinstance(encoded, pa.ChunkedArray):
        encoded = encoded.combine_chunks()
    distinct = encoded.dictionary.to_pylist()
    unseen = list(dict.fromkeys(ua for ua in distinct if ua not in _parsed))
    if len(_parsed) + len(unseen) > _CACHE_SIZE:
        _parsed.clear()
    if unseen:
        bots = is_bot(pa.array(unseen, pa.string()))
        _parsed.update((ua, describe(ua, bool(b))) for ua, b in zip(unseen, bots, strict=True))
    table = [_parsed[ua] for ua in distinct] + [(None, None, None, "other")]
    codes = encoded.indices.fill_null(len(distinct))
    return [pa.array([row[i] for row in table], pa.string()).take(codes) for i in range(4)]
