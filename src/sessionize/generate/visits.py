"""Users and their visits, simulated as numpy arrays (no strings, no Python per event).

Each user alternates visits and idle periods (a renewal process), started close to its
steady state before the window, so the event rate is even across the window's hours.
Within a visit, think times come from a mixture shaped around the session gap:

- most are short (log-normal, median 3% of the gap);
- a few straddle the gap (75%..125% of it);
- a few sit exactly on it or one millisecond past it (`<=` joins, one ms more splits);
- a few are far above it (125%..400%): the visit is split into sessions nobody planned.

Between visits the user is idle for more than the gap, except that after half of the
`browser_close` events the user comes back within a think time: only the close splits those.
Event times are whole milliseconds and strictly increase per user, so no two distinct events
share the duplicate key (user_id, event_time, page.current).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from sessionize.errors import ConfigError
from sessionize.generate import catalog as cat
from sessionize.generate.config import GeneratorConfig

# Think-time mixture, in units of the gap.
SHORT_MEDIAN, SHORT_SIGMA = 0.03, 1.1
NEAR_P, NEAR_LO, NEAR_HI = 0.03, 0.75, 1.25
LONG_P, LONG_LO, LONG_HI = 0.015, 1.25, 4.0
EDGE_P = 0.004
MEAN_THINK_GAPS = (
    (1 - NEAR_P - LONG_P - EDGE_P) * SHORT_MEDIAN * math.exp(SHORT_SIGMA**2 / 2)
    + NEAR_P * (NEAR_LO + NEAR_HI) / 2
    + LONG_P * (LONG_LO + LONG_HI) / 2
    + EDGE_P
)
BACK_AFTER_CLOSE = 0.5  # share of closed visits followed by a return within a think time
MIN_MEAN_EVENTS = 8.0  # mean events per visit, raised for busy users
MAX_MEAN_EVENTS = 400.0
MAX_EVENTS_FACTOR = 20  # visits are capped at this many times the mean
WARM_UP_VISITS = 3  # simulated before the window, to reach a steady event rate
MIN_IDLE_SPREAD = 0.1  # idle time is gap + 1ms + exponential with at least this mean (gaps)


@dataclass(frozen=True)
class Plan:
    """Scalars derived from the config that size the simulation (times in ms)."""

    gap_ms: float
    think_ms: float  # mean think time
    mean_events: float  # mean events per visit, before the closing event
    cycle_ms: float  # mean time from one visit's start to the next
    idle_spread_ms: float  # mean of the exponential part of idle time

    @property
    def visit_ms(self) -> float:
        return self.mean_events * self.think_ms


def _idle_spread(cfg: GeneratorConfig, mean_events: float, rho: float, think: float) -> float:
    """Mean exponential idle part that gives `rho` events per ms per user, or -inf."""
    g, c = cfg.gap_us / 1000, cfg.close_rate
    cycle = (mean_events + c) / rho
    idle = cycle - (mean_events - 1 + c) * think
    return (idle - c * BACK_AFTER_CLOSE * think) / (1 - c * BACK_AFTER_CLOSE) - g


def make_plan(cfg: GeneratorConfig) -> Plan:
    """Visit length and idle time that yield `events_per_hour` across `users`.

    Busy users get longer visits; when even the longest visits cannot fit (a user would
    have to be active all the time), raise ConfigError naming the number of users needed.
    """
    g = cfg.gap_us / 1000
    think = MEAN_THINK_GAPS * g
    rho = cfg.events_per_hour / cfg.users / 3_600_000
    if rho == 0:
        return Plan(g, think, MIN_MEAN_EVENTS, math.inf, math.inf)
    length = MIN_MEAN_EVENTS
    while length <= MAX_MEAN_EVENTS:
        spread = _idle_spread(cfg, length, rho, think)
        if spread >= MIN_IDLE_SPREAD * g:
            return Plan(g, think, length, (length + cfg.close_rate) / rho, spread)
        length *= 1.1
    # Largest density: idle at its minimum, longest visits.
    c = cfg.close_rate
    idle = (1 - c * BACK_AFTER_CLOSE) * (1 + MIN_IDLE_SPREAD) * g + c * BACK_AFTER_CLOSE * think
    per_user_hour = 3_600_000 * (MAX_MEAN_EVENTS + c) / (idle + (MAX_MEAN_EVENTS - 1 + c) * think)
    need = math.ceil(cfg.events_per_hour / per_user_hour)
    raise ConfigError(
        f"{cfg.events_per_hour / cfg.users:.0f} events per user and hour is more than a "
        f"visitor makes with think times shaped around a {g / 60_000:g} min gap "
        f"(at most ~{per_user_hour:.0f}); use --users {need} or more"
    )


@dataclass
class Users:
    """One row per user; `ip` is a 32-bit address, lat/lon in hundredths of a degree."""

    ids: np.ndarray
    device: np.ndarray
    language: np.ndarray
    ip: np.ndarray
    lat: np.ndarray
    lon: np.ndarray


@dataclass
class Visits:
    """One row per visit (planned session)."""

    user: np.ndarray  # row in Users
    closed: np.ndarray  # ends with browser_close
    site: np.ndarray
    api: np.ndarray
    network: np.ndarray
    omit: np.ndarray  # bit 1: source, 2: user, 4: technical
    visit_id: np.ndarray  # (n, 16) uint8, hex in the line


@dataclass
class WebFields:
    """Per event, with web data (generate/web.py): codes into web_catalog's vocabularies,
    and the purchase value."""

    query: np.ndarray  # int16 into QUERIES ("" at every code of a kind without one)
    referrer: np.ndarray  # int16: -1 internal (the previous page), else into REFERRERS
    value_cents: np.ndarray  # int64, -1: no order object
    agent: np.ndarray  # int16 into AGENTS, -1: no user agent (no technical section)


@dataclass
class IdentityFields:
    """Per event, with identity data (generate/identity.py): its device's number (the
    anonymous id) and whether it carries the user id (logged in)."""

    device: np.ndarray  # int64
    logged_in: np.ndarray  # bool


@dataclass
class Events:
    """Distinct events inside the window, sorted by time (stable)."""

    t_ms: np.ndarray  # epoch ms
    visit: np.ndarray  # row in Visits
    page: np.ndarray  # code in catalog.PAGES
    prev: np.ndarray  # code in catalog.PAGES, -1: none (landing page)
    action: np.ndarray  # code in catalog.ACTIONS
    tz: np.ndarray  # code in catalog.TIME_SUFFIXES
    # Only with rule data (generate/rules.py): codes in catalog.CAMPAIGNS and
    # catalog.GAP_SECONDS, -1 where the event has no such field.
    campaign: np.ndarray | None = None
    gap: np.ndarray | None = None
    web: WebFields | None = None  # only with web data (generate/web.py)
    identity: IdentityFields | None = None  # only with identity data (generate/identity.py)


def make_users(cfg: GeneratorConfig, rng: np.random.Generator) -> Users:
    n = cfg.users
    # Distinct, realistic-looking ids: strided from 100000 with a random offset in each stride.
    ids = 100_000 + np.arange(n, dtype=np.int64) * 7 + rng.integers(0, 7, n)
    first_octet = rng.integers(11, 224, n)
    first_octet[first_octet == 127] = 128
    ip = (first_octet.astype(np.uint32) << 24) | rng.integers(0, 1 << 24, n).astype(np.uint32)
    return Users(
        ids=ids,
        device=cat.choose(rng, cat.DEVICE_COMBO_P, n),
        language=cat.choose(rng, cat.LANGUAGE_P, n),
        ip=ip,
        lat=rng.integers(-5500, 7000, n).astype(np.int32),
        lon=rng.integers(-18000, 18000, n).astype(np.int32),
    )


def _think_ms(rng: np.random.Generator, n: int, gap_us: int) -> np.ndarray:
    g = gap_us / 1000
    u, x, z = rng.random(n), rng.random(n), rng.standard_normal(n)
    out = SHORT_MEDIAN * g * np.exp(SHORT_SIGMA * z)
    near = u < NEAR_P
    out[near] = g * (NEAR_LO + (NEAR_HI - NEAR_LO) * x[near])
    far = (u >= NEAR_P) & (u < NEAR_P + LONG_P)
    out[far] = g * (LONG_LO + (LONG_HI - LONG_LO) * x[far])
    ms = np.maximum(1, np.rint(out)).astype(np.int64)
    edge = (u >= NEAR_P + LONG_P) & (u < NEAR_P + LONG_P + EDGE_P)
    # gap_us // 1000 ms is <= gap (joins); one ms more is > gap (splits).
    ms[edge] = gap_us // 1000 + (x[edge] < 0.5)
    return ms


def _idle_ms(rng, plan: Plan, gap_us: int, after_close: np.ndarray) -> np.ndarray:
    n = after_close.size
    idle = gap_us // 1000 + 1 + np.rint(rng.exponential(plan.idle_spread_ms, n)).astype(np.int64)
    back = after_close & (rng.random(n) < BACK_AFTER_CLOSE)
    return np.where(back, _think_ms(rng, n, gap_us), idle)


def pages(rng, visit: np.ndarray, pos: np.ndarray, interest: np.ndarray) -> np.ndarray:
    """A page code per event: `pos` 0 is a landing page, `interest[visit]` a category."""
    n = visit.size
    entry = pos == 0
    kind = np.where(
        entry, cat.choose(rng, cat.ENTRY_KIND_P, n), cat.choose(rng, cat.NEXT_KIND_P, n)
    )
    category = np.where(
        rng.random(n) < cat.STAY_IN_CATEGORY, interest[visit], cat.choose(rng, cat.CATEGORY_P, n)
    ).astype(np.int32)
    article = cat.choose(rng, cat.ARTICLE_P, n).astype(np.int32)
    misc = rng.integers(0, len(cat.MISC_PAGES), n).astype(np.int32)
    page = np.select(
        [kind == 0, kind == 1, kind == 2],
        [
            np.full(n, cat.HOME, np.int32),
            cat.FIRST_CATEGORY + category,
            cat.FIRST_ARTICLE + category * cat.ARTICLES_PER_CATEGORY + article,
        ],
        cat.FIRST_MISC + misc,
    )
    return page.astype(np.int16)


def time_zones(rng, n: int) -> np.ndarray:
    """A time suffix code per event: mostly UTC, a few naive or local offsets."""
    u = rng.random(n)
    others = len(cat.TIME_SUFFIXES) - 2
    rest = (u - cat.UTC_SHARE - cat.NAIVE_SHARE) / (1 - cat.UTC_SHARE - cat.NAIVE_SHARE)
    other = 2 + np.minimum(others - 1, (rest * others).astype(np.int64))
    return np.where(u < cat.UTC_SHARE, 0, np.where(u < cat.UTC_SHARE + cat.NAIVE_SHARE, 1, other))


def _round(cfg, plan, rng, users: np.ndarray, clock: np.ndarray, after_close: np.ndarray):
    """Simulate the next visits of `users`, whose next visit starts at `clock` (ms).

    Returns (visit columns, event columns, new clock, new after_close) for those users.
    """
    end_ms = cfg.end_us // 1000
    k = np.maximum(1, np.ceil((end_ms - clock) / plan.cycle_ms * 1.1)).astype(np.int64)
    v_user = np.repeat(users, k)
    nv = v_user.size
    first_of_user = np.r_[True, v_user[1:] != v_user[:-1]]
    last_of_user = np.r_[v_user[1:] != v_user[:-1], True]
    cap = int(MAX_EVENTS_FACTOR * plan.mean_events)
    length = np.minimum(rng.geometric(1 / plan.mean_events, nv), cap)
    closed = rng.random(nv) < cfg.close_rate
    m = length + closed
    idle_after = _idle_ms(rng, plan, cfg.gap_us, closed)
    interest = cat.choose(rng, cat.CATEGORY_P, nv)

    visit = np.repeat(np.arange(nv), m)
    starts = np.cumsum(m) - m
    pos = np.arange(visit.size) - np.repeat(starts, m)
    delta = _think_ms(rng, visit.size, cfg.gap_us)
    # A visit's first event follows the previous visit's idle time; a user's first visit in
    # this round starts exactly at the clock.
    delta[starts] = np.where(first_of_user, 0, np.r_[0, idle_after[:-1]])
    row = np.searchsorted(users, np.repeat(v_user, m))  # row of each event's user
    cs = np.cumsum(delta)
    t_ms = clock[row] + cs - cs[starts[first_of_user][row]]

    is_close = closed[visit] & (pos == m[visit] - 1)
    page = pages(rng, visit, pos, interest)
    close_at = np.flatnonzero(is_close)
    page[close_at] = page[close_at - 1]  # the page the browser was closed on
    prev = np.r_[np.int16(-1), page[:-1]].astype(np.int16)
    prev[pos == 0] = -1
    prev[close_at] = prev[close_at - 1]
    action = cat.choose(rng, cat.ACTION_P, visit.size).astype(np.int8)
    action[close_at] = cat.CLOSE

    last_event = (starts + m - 1)[last_of_user]
    new_clock = t_ms[last_event] + idle_after[last_of_user]
    visits = dict(
        user=v_user.astype(np.int32),
        closed=closed,
        site=cat.choose(rng, cat.SITE_P, nv).astype(np.int8),
        api=cat.choose(rng, cat.API_P, nv).astype(np.int8),
        network=cat.choose(rng, cat.NETWORK_P, nv).astype(np.int8),
        omit=(
            (rng.random(nv) < cat.OMIT_SOURCE) * 1
            + (rng.random(nv) < cat.OMIT_USER) * 2
            + (rng.random(nv) < cat.OMIT_TECHNICAL) * 4
        ).astype(np.int8),
        visit_id=np.frombuffer(rng.bytes(16 * nv), dtype=np.uint8).reshape(nv, 16),
    )
    events = dict(
        t_ms=t_ms, visit=visit, page=page, prev=prev, action=action, tz=time_zones(rng, visit.size)
    )
    return visits, events, new_clock, closed[last_of_user]


def _first_visit_offset(plan: Plan, rng: np.random.Generator, n: int) -> np.ndarray:
    """Start of each user's first simulated visit, relative to the window start (ms).

    The event rate should be even from the first hour on, as if users had been visiting
    forever (a renewal process in equilibrium). The state of each user at a warm-up time
    before the window is drawn close to equilibrium: in a visit with probability
    visit / cycle (begun up to one mean visit earlier), otherwise idle, with the memoryless
    exponential part of idle time left, plus part of the fixed gap if still in it. A warm-up
    of a few mean visits then washes out the approximation; its events are dropped.
    """
    warm_up = WARM_UP_VISITS * plan.visit_ms + plan.gap_ms
    in_visit = rng.random(n) < plan.visit_ms / plan.cycle_ms
    began = -plan.visit_ms * rng.random(n)
    in_fixed = rng.random(n) < plan.gap_ms / (plan.gap_ms + plan.idle_spread_ms)
    remaining = rng.exponential(plan.idle_spread_ms, n) + in_fixed * plan.gap_ms * rng.random(n)
    return np.rint(np.where(in_visit, began, remaining) - warm_up).astype(np.int64)


def simulate(cfg: GeneratorConfig, plan: Plan, rng: np.random.Generator) -> tuple[Visits, Events]:
    """All distinct events of the window, sorted by time, and the visits they belong to."""
    start_ms, end_ms = cfg.start_us // 1000, cfg.end_us // 1000
    clock = np.full(cfg.users, end_ms, dtype=np.int64)
    if math.isfinite(plan.cycle_ms):
        clock = start_ms + _first_visit_offset(plan, rng, cfg.users)
    after_close = np.zeros(cfg.users, dtype=bool)
    visit_parts: list[dict] = []
    event_parts: list[dict] = []
    n_visits = 0
    while True:
        users = np.flatnonzero(clock < end_ms)
        if users.size == 0:
            break
        v, e, clock[users], after_close[users] = _round(
            cfg, plan, rng, users, clock[users], after_close[users]
        )
        keep = (e["t_ms"] >= start_ms) & (e["t_ms"] < end_ms)
        e = {name: col[keep] for name, col in e.items()}
        e["visit"] = e["visit"] + n_visits
        n_visits += v["user"].size
        visit_parts.append(v)
        event_parts.append(e)

    def cat_(parts: list[dict], name: str, dtype) -> np.ndarray:
        cols = [p[name] for p in parts]
        return np.concatenate(cols).astype(dtype, copy=False) if cols else np.zeros(0, dtype)

    visits = Visits(
        user=cat_(visit_parts, "user", np.int32),
        closed=cat_(visit_parts, "closed", bool),
        site=cat_(visit_parts, "site", np.int8),
        api=cat_(visit_parts, "api", np.int8),
        network=cat_(visit_parts, "network", np.int8),
        omit=cat_(visit_parts, "omit", np.int8),
        visit_id=(
            np.concatenate([p["visit_id"] for p in visit_parts])
            if visit_parts
            else np.zeros((0, 16), np.uint8)
        ),
    )
    t_ms = cat_(event_parts, "t_ms", np.int64)
    order = np.argsort(t_ms, kind="stable")
    events = Events(
        t_ms=t_ms[order],
        visit=cat_(event_parts, "visit", np.int64)[order],
        page=cat_(event_parts, "page", np.int16)[order],
        prev=cat_(event_parts, "prev", np.int16)[order],
        action=cat_(event_parts, "action", np.int8)[order],
        tz=cat_(event_parts, "tz", np.int8)[order],
    )
    return visits, events
