"""Web analytics data (`sessionize generate --web-data`): what a tracker adds to each event.

Added on top of the simulated visits (and the rule data), from a random stream of its own,
so that without it the data stays the same for a seed:

- a traffic kind per visit (direct, organic search and social, paid search and social,
  email, referral, display, affiliate; web_catalog.KINDS): the visit's landing event carries
  the kind's query string in `page.url` and its referrer in `page.referrer` (none for direct
  visits and some email clicks); later events carry their page's URL without a query string
  and the previous page's URL as referrer (internal navigation);
- a user agent per visit in `technical.user_agent`: the browser of the user's device (or for
  OTHER_BROWSER_P of the visits another browser's), or for BOT_SHARE of the visits a
  crawler's (Googlebot, bingbot, AhrefsBot, ...); visits without a `technical` section have
  none;
- a new campaign (`utm_campaign`) in the URL of a later page view of CAMPAIGN_CHANGE_P of
  the visits;
- page pings (action `ping`, same page and URL): every 10 s after a page view while the user
  stays on the page (an exponential time, at most until the user's next event);
- purchases (action `purchase`, page `checkout`) in a share of the visits that depends on
  their kind, a few seconds after a page view, with `order.value` (a JSON number, two
  decimals) and `order.currency`, except PURCHASE_NO_VALUE of them that have no `order`.

Bots neither ping nor buy and come without a referrer. Added events fall strictly between a
user's events, so event times still strictly increase per user.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from sessionize.generate import catalog as cat
from sessionize.generate import web_catalog as web
from sessionize.generate.config import GeneratorConfig
from sessionize.generate.visits import Events, Users, Visits, WebFields


def _visit_sources(visits: Visits, users: Users, rng: np.random.Generator):
    """Per visit: kind, query code, referrer code, agent code, bot flag."""
    n = visits.user.size
    kind = cat.choose(rng, web.KIND_P, n).astype(np.int64)
    bot = rng.random(n) < web.BOT_SHARE
    kind[bot] = web.DIRECT
    query = web.QUERY_START[kind] + (rng.random(n) * web.QUERY_COUNT[kind]).astype(np.int64)
    query[bot] = web.QUERY_START[web.DIRECT]  # ""
    referrer = web.REFERRER_START[kind] + (rng.random(n) * web.REFERRER_COUNT[kind]).astype(
        np.int64
    )
    bot_agent = web.FIRST_BOT_AGENT + rng.integers(0, len(web.BOT_AGENTS), n)
    agent = np.where(bot, bot_agent, web.AGENT_OF_DEVICE[users.device[visits.user]])
    other = ~bot & (rng.random(n) < web.OTHER_BROWSER_P)
    agent[other] = web.FIRST_OTHER_BROWSER + rng.integers(
        0, len(web.OTHER_BROWSERS), int(other.sum())
    )
    agent = np.where(visits.omit & 4, -1, agent)
    return kind, query, referrer, agent, bot


def _next_same_user(user: np.ndarray, t_ms: np.ndarray, end_ms: int) -> np.ndarray:
    """Per event (time-sorted): the time of the same user's next event, else `end_ms`."""
    order = np.lexsort((t_ms, user))
    nxt = np.full(t_ms.size, end_ms, np.int64)
    same = user[order][1:] == user[order][:-1]
    nxt[order[:-1][same]] = t_ms[order][1:][same]
    return nxt


def add_web_data(
    cfg: GeneratorConfig, users: Users, visits: Visits, events: Events, rng: np.random.Generator
) -> Events:
    """The events plus pings and purchases, all carrying web fields (module docstring).

    Args:
        cfg: the settings; added events fall inside its window.
        users, visits, events: the simulation's output (events sorted by time).
        rng: a random stream of its own, so the other data does not depend on it.

    Returns:
        The events with pings and purchases added, sorted by time (stable), with `web` set.

    Example:
        >>> events = add_web_data(cfg, users, visits, events, rng)
    """
    kind, query, referrer, agent, bot = _visit_sources(visits, users, rng)
    n = events.t_ms.size
    landing = events.prev == -1  # a landing page view, or a close right after it
    e_query = np.where(landing, query[events.visit], web.QUERY_START[web.DIRECT])
    e_ref = np.where(landing, referrer[events.visit], -1)
    end_ms = cfg.end_us // 1000
    nxt = _next_same_user(visits.user[events.visit], events.t_ms, end_ms)
    room = nxt - events.t_ms - 1  # an added event must come strictly before the next one
    human = ~bot[events.visit]
    # A new campaign in the URL of a later page view, in some visits.
    changed = human & ~landing & (events.action == 0) & (rng.random(n) < web.CAMPAIGN_CHANGE_P)
    e_query[changed] = web.FIRST_CHANGE + rng.integers(
        0, len(web.CAMPAIGN_CHANGES), int(changed.sum())
    )

    # Pings after page views, while the user stays.
    viewed = human & ((events.action == 0) | (events.action == 3))
    stay = rng.exponential(web.ACTIVE_MEAN_MS, n)
    pings = np.where(viewed, np.minimum(stay, room) // web.PING_EVERY_MS, 0).astype(np.int64)
    src_ping = np.repeat(np.arange(n), pings)
    k = np.arange(src_ping.size) - np.repeat(np.cumsum(pings) - pings, pings) + 1
    t_ping = events.t_ms[src_ping] + k * web.PING_EVERY_MS

    # Purchases, a few seconds after a page view of a buying visit.
    buys = human & (rng.random(visits.user.size) < web.PURCHASE_P[kind])[events.visit]
    delay = rng.integers(1_000, 5_000, n)
    candidate = np.flatnonzero(buys & viewed & (delay < room))
    # One purchase per buying visit: after its candidate with the smallest draw.
    by_visit = candidate[np.lexsort((rng.random(candidate.size), events.visit[candidate]))]
    v = events.visit[by_visit]
    first = np.ones(v.size, bool)  # (an hour may have no candidate at all)
    first[1:] = v[1:] != v[:-1]
    chosen = np.sort(by_visit[first])
    t_buy = events.t_ms[chosen] + delay[chosen]
    cents = np.rint(
        100 * web.VALUE_MEDIAN * np.exp(web.VALUE_SIGMA * rng.standard_normal(chosen.size))
    ).astype(np.int64)
    cents[rng.random(chosen.size) < web.PURCHASE_NO_VALUE] = -1

    src = np.concatenate([np.arange(n), src_ping, chosen])
    kinds = np.concatenate(
        [np.full(n, -1), np.full(src_ping.size, cat.PING), np.full(chosen.size, cat.PURCHASE)]
    )
    t_ms = np.concatenate([events.t_ms, t_ping, t_buy])
    keep = t_ms < end_ms
    src, kinds, t_ms = src[keep], kinds[keep], t_ms[keep]
    order = np.argsort(t_ms, kind="stable")
    src, kinds, t_ms = src[order], kinds[order], t_ms[order]
    is_buy = kinds == cat.PURCHASE
    page = events.page[src].copy()
    prev = events.prev[src].copy()
    prev[is_buy] = page[is_buy]  # the page the purchase was made from
    page[is_buy] = web.CHECKOUT
    action = np.where(kinds >= 0, kinds, events.action[src]).astype(np.int8)
    value = np.full(src.size, -1, np.int64)
    value[np.flatnonzero(is_buy)] = cents[np.searchsorted(chosen, src[is_buy])]
    e_query, e_ref = e_query[src], e_ref[src]
    e_query[is_buy] = web.QUERY_START[web.DIRECT]  # the checkout page's URL has no query
    e_ref[is_buy] = -1  # the purchase follows the page it was made from
    fields = WebFields(
        query=e_query.astype(np.int16),
        referrer=e_ref.astype(np.int16),
        value_cents=value,
        agent=agent[events.visit[src]].astype(np.int16),
    )
    return replace(
        events,
        t_ms=t_ms,
        visit=events.visit[src],
        page=page,
        prev=prev,
        action=action,
        tz=events.tz[src],
        campaign=None if events.campaign is None else events.campaign[src],
        gap=None if events.gap is None else events.gap[src],
        web=fields,
    )
