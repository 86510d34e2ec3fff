"""Which user agents are bots', by CrawlerDetect (`crawlerdetect` on PyPI).

CrawlerDetect keeps a maintained list of crawler, spider and bot user agent patterns (a
port of the PHP library of the same name) and answers for any user agent string, where
ua-parser's device family `Spider` covers fewer bots. A missing user agent is not a bot's.
A regex match costs about a millisecond, so each distinct user agent is judged once per
process (a bounded cache) and once per batch (judged on the batch's distinct values).
"""

from __future__ import annotations

import functools

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc


@functools.lru_cache(maxsize=1)
def _detector():
    from crawlerdetect import CrawlerDetect

    return CrawlerDetect()


@functools.lru_cache(maxsize=100_000)
def is_bot_agent(user_agent: str) -> bool:
    """Whether `user_agent` is a bot's.

    >>> is_bot_agent("Mozilla/5.0 (compatible; Googlebot/2.1; +http://www.google.com/bot.html)")
    True
    """
    return bool(_detector().isCrawler(user_agent))


def is_bot(user_agents: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """Per value, whether it is a bot's user agent (null: not a bot)."""
    if len(user_agents) == 0:
        return np.zeros(0, dtype=bool)
    encoded = pc.dictionary_encode(user_agents)
    if isinstance(encoded, pa.ChunkedArray):
        encoded = encoded.combine_chunks()
    judged = np.array([is_bot_agent(ua) for ua in encoded.dictionary.to_pylist()] + [False])
    codes = encoded.indices.fill_null(len(encoded.dictionary))
    return judged[codes.to_numpy(zero_copy_only=False).astype(np.int64)]
