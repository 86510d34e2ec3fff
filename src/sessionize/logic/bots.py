"""Which user agents are bots', by CrawlerDetect's lists (`crawlerdetect` on PyPI).

CrawlerDetect keeps a maintained list of crawler, spider and bot user agent patterns (a
port of the PHP library of the same name), where ua-parser's device family `Spider` covers
fewer bots. Its answer is: remove every match of its exclusion patterns (browser tokens such
as `Chrome/120.0`), then look for any crawler pattern in what is left. The library runs
that with Python's backtracking `re`, whose time grows with the square of a long user
agent (one pattern starts with `[a-z0-9\\-_]*`: 64 KB took minutes). Here the same two
regular expressions run in RE2 through `pyarrow.compute` (linear in the text, vectorized
over a batch's distinct values), and only the first `MAX_USER_AGENT_CHARS` characters of a
user agent are judged, so that a line's cost is bounded whatever its size. A missing user
agent is not a bot's. Each distinct user agent is judged once per process (a bounded cache)
and once per batch.
"""

from __future__ import annotations

import functools
import re

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

# The characters of a user agent that are judged: browsers send 100-300, bots' tokens come
# early; a longer value is judged by its start (docs/operations.md, "Bounds").
MAX_USER_AGENT_CHARS = 1024
_CACHE_SIZE = 50_000  # judged user agents kept, each at most MAX_USER_AGENT_CHARS
# RE2 has no lookahead: `X(?!WORD)` at the end of a crawler pattern becomes X followed by
# the end or by anything that does not spell WORD (the same answer for a search).
_NEGATIVE_TAIL = re.compile(r"\(\?!([A-Za-z0-9 ]+)\)$")


def _not_followed_by(word: str) -> str:
    tail = ""
    for ch in reversed(word.lower()):
        tail = f"(?:$|[^{ch}]" + (f"|{ch}{tail})" if tail else ")")
    return tail


def _re2(pattern: str) -> str:
    found = _NEGATIVE_TAIL.search(pattern)
    head = pattern[: found.start()] if found else pattern
    if "(?" in head:  # a new release of the lists: fail loudly rather than judge otherwise
        raise ValueError(f"crawler pattern {pattern!r} has a construct RE2 cannot run")
    return head + _not_followed_by(found.group(1)) if found else head


@functools.lru_cache(maxsize=1)
def _patterns() -> tuple[str, str]:
    """(exclusions, crawlers) as case-insensitive RE2 alternations, as CrawlerDetect joins
    them."""
    from crawlerdetect.providers.crawlers import data as crawlers
    from crawlerdetect.providers.exclusions import data as exclusions

    def joined(patterns: list[str]) -> str:
        return "(?i)(" + "|".join(_re2(p) for p in patterns) + ")"

    return joined(exclusions), joined(crawlers)


_judged: dict[str, bool] = {}


def judged_part(user_agents: pa.Array | pa.ChunkedArray) -> pa.Array | pa.ChunkedArray:
    """What is judged of each user agent: its first MAX_USER_AGENT_CHARS characters,
    without surrounding white space (as CrawlerDetect strips it). Cut first, so that the
    work is bounded whatever the value's size."""
    return pc.utf8_trim_whitespace(pc.utf8_slice_codeunits(user_agents, 0, MAX_USER_AGENT_CHARS))


def judge(user_agents: list[str]) -> list[bool]:
    """Whether each user agent (not None) is a bot's, judged in one pass of RE2 (not cached).

    >>> judge(["Mozilla/5.0 (compatible; Googlebot/2.1; +http://www.google.com/bot.html)"])
    [True]
    """
    if not user_agents:
        return []
    exclusions, crawlers = _patterns()
    texts = judged_part(pa.array(user_agents, pa.string()))
    rest = pc.replace_substring_regex(texts, exclusions, "")
    return pc.match_substring_regex(rest, crawlers).to_pylist()


def is_bot_agent(user_agent: str) -> bool:
    """Whether `user_agent` is a bot's.

    >>> is_bot_agent("Mozilla/5.0 (compatible; Googlebot/2.1; +http://www.google.com/bot.html)")
    True
    """
    return bool(is_bot(pa.array([user_agent], pa.string()))[0])


def is_bot(user_agents: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """Per value, whether it is a bot's user agent (null: not a bot)."""
    if len(user_agents) == 0:
        return np.zeros(0, dtype=bool)
    encoded = pc.dictionary_encode(judged_part(user_agents))
    if isinstance(encoded, pa.ChunkedArray):
        encoded = encoded.combine_chunks()
    distinct = encoded.dictionary.to_pylist()  # the cache's keys: bounded
    unseen = list(dict.fromkeys(ua for ua in distinct if ua not in _judged))
    if len(_judged) + len(unseen) > _CACHE_SIZE:
        _judged.clear()
    _judged.update(zip(unseen, judge(unseen), strict=True))
    judged = np.array([_judged[ua] for ua in distinct] + [False])
    codes = encoded.indices.fill_null(len(encoded.dictionary))
    return judged[codes.to_numpy(zero_copy_only=False).astype(np.int64)]
