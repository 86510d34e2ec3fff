"""Data that exercises the session rules (`sessionize generate --rule-data`).

Added on top of the simulated visits, from its own random stream, so that the default data
stays the same for a seed:

- long visits: a few extra users who browse without a pause longer than half the gap for
  LONG_VISIT_MS (2.5 h), beyond a typical `--max-duration 2h`;
- midnight visits: for every local midnight of each zone in RULE_ZONES inside the window,
  an extra user active from before to after it (America/New_York ends daylight saving time
  on 2026-11-01, Europe/Paris on 2026-10-25: a window over those days holds a DST day);
- `utm.campaign` on a share of all visits, changing mid-visit in some of them;
- `gap_s`, a per-event gap in seconds, on most events of a share of all visits.

Extra users' events follow each other by 10%..60% of the gap, so a visit is one
gap-connected run; they strictly increase per user, as for simulated users.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, time, timedelta
from zoneinfo import ZoneInfo

import numpy as np

from sessionize.generate import catalog as cat
from sessionize.generate.config import GeneratorConfig
from sessionize.generate.visits import Events, Users, Visits, make_users, pages, time_zones

RULE_ZONES = ("UTC", "Europe/Paris", "America/New_York", "Asia/Kolkata")
LONG_VISIT_MS = 150 * 60_000
LONG_USERS_PER = 200  # one long visit per this many users (at least one)
MIDNIGHT_SIDE_MS = (5 * 60_000, 30 * 60_000)  # active this long before and after midnight
THINK_GAPS = (0.1, 0.6)  # extra users' think times, in units of the gap
CAMPAIGN_SHARE = 0.3  # visits that carry utm.campaign
CHANGE_SHARE = 0.3  # of those, the visits whose campaign changes mid-visit
GAP_FIELD_SHARE = 0.3  # visits whose events carry gap_s
GAP_MISSING = 0.1  # events of those visits without it (the run's --gap applies)


def local_midnights(cfg: GeneratorConfig, zone: str) -> list[int]:
    """Epoch ms of the local midnights of `zone` with room for a visit on both sides."""
    tz = ZoneInfo(zone)
    lo = cfg.start_us // 1000 + MIDNIGHT_SIDE_MS[1]
    hi = cfg.end_us // 1000 - MIDNIGHT_SIDE_MS[1]
    day = cfg.start.astimezone(tz).date()
    out: list[int] = []
    while True:
        at = datetime.combine(day, time(0), tzinfo=tz).astimezone(UTC)
        ms = int(at.timestamp() * 1000)
        if ms >= hi:
            return out
        if ms > lo:
            out.append(ms)
        day += timedelta(days=1)


def _extra_spans(cfg: GeneratorConfig, rng: np.random.Generator) -> list[tuple[int, int]]:
    """(first, last) ms of each extra visit: long visits, then midnight visits."""
    start, end = cfg.start_us // 1000, cfg.end_us // 1000
    spans = []
    latest = max(start, end - LONG_VISIT_MS - 60_000)
    for _ in range(max(1, cfg.users // LONG_USERS_PER)):
        first = int(rng.integers(start, latest + 1))
        spans.append((first, first + LONG_VISIT_MS))
    for zone in RULE_ZONES:
        for midnight in local_midnights(cfg, zone):
            before, after = rng.integers(*MIDNIGHT_SIDE_MS, 2)
            spans.append((midnight - int(before), midnight + int(after)))
    return spans


def _run(cfg: GeneratorConfig, rng: np.random.Generator, first: int, last: int) -> np.ndarray:
    """Times from `first` to the first one at or past `last`, steps within the gap."""
    gap_ms = cfg.gap_us / 1000
    lo, hi = THINK_GAPS
    n = int((last - first) / (lo * gap_ms)) + 2  # enough steps even if all are the shortest
    steps = np.maximum(1, np.rint(gap_ms * rng.uniform(lo, hi, n))).astype(np.int64)
    t = first + np.r_[0, np.cumsum(steps)]
    return t[: int(np.searchsorted(t, last)) + 1]


def _extra(cfg: GeneratorConfig, users: Users, visits: Visits, rng: np.random.Generator):
    """Users, visits and events of the extra visits, one user each."""
    spans = _extra_spans(cfg, rng)
    k = len(spans)
    more = make_users(replace(cfg, users=k), rng)
    more.ids = more.ids + 7 * users.ids.size  # strides after the simulated users: distinct
    times = [_run(cfg, rng, first, last) for first, last in spans]
    sizes = np.array([t.size for t in times])
    visit = np.repeat(np.arange(k), sizes)
    pos = np.arange(visit.size) - np.repeat(np.cumsum(sizes) - sizes, sizes)
    page = pages(rng, visit, pos, cat.choose(rng, cat.CATEGORY_P, k))
    prev = np.r_[np.int16(-1), page[:-1]].astype(np.int16)
    prev[pos == 0] = -1
    new_visits = dict(
        user=(users.ids.size + np.arange(k)).astype(np.int32),
        closed=np.zeros(k, bool),
        site=cat.choose(rng, cat.SITE_P, k).astype(np.int8),
        api=cat.choose(rng, cat.API_P, k).astype(np.int8),
        network=cat.choose(rng, cat.NETWORK_P, k).astype(np.int8),
        omit=np.zeros(k, np.int8),
        visit_id=np.frombuffer(rng.bytes(16 * k), dtype=np.uint8).reshape(k, 16),
    )
    new_events = dict(
        t_ms=np.concatenate(times).astype(np.int64),
        visit=visit + visits.user.size,
        page=page,
        prev=prev,
        action=cat.choose(rng, cat.ACTION_P, visit.size).astype(np.int8),
        tz=time_zones(rng, visit.size).astype(np.int8),
    )
    return more, new_visits, new_events


def _fields(visit: np.ndarray, t_ms: np.ndarray, n_visits: int, rng: np.random.Generator):
    """Per event: campaign code and gap code (-1: field absent)."""
    order = np.lexsort((t_ms, visit))
    count = np.bincount(visit, minlength=n_visits)
    pos = np.empty(visit.size, np.int64)
    pos[order] = np.arange(visit.size) - np.repeat(np.cumsum(count) - count, count)
    n_camp = len(cat.CAMPAIGNS)
    has = rng.random(n_visits) < CAMPAIGN_SHARE
    base = rng.integers(0, n_camp, n_visits)
    other = (base + rng.integers(1, n_camp, n_visits)) % n_camp
    changes = (rng.random(n_visits) < CHANGE_SHARE) & (count >= 2)
    change_at = 1 + (rng.random(n_visits) * np.maximum(count - 1, 1)).astype(np.int64)
    switched = changes[visit] & (pos >= change_at[visit])
    campaign = np.where(has[visit], np.where(switched, other[visit], base[visit]), -1)
    with_gap = rng.random(n_visits) < GAP_FIELD_SHARE
    gap_code = rng.integers(0, len(cat.GAP_SECONDS), visit.size)
    gap = np.where(with_gap[visit] & (rng.random(visit.size) >= GAP_MISSING), gap_code, -1)
    return campaign.astype(np.int8), gap.astype(np.int8)


def add_rule_data(
    cfg: GeneratorConfig, users: Users, visits: Visits, events: Events, rng: np.random.Generator
) -> tuple[Users, Visits, Events]:
    """The simulated data plus the extra visits and fields described in the module docstring.

    Args:
        cfg: the settings; the extra visits fall inside its window.
        users, visits, events: the simulation's output (events sorted by time).
        rng: a random stream of its own, so the simulated data does not depend on it.

    Returns:
        (users, visits, events) with the extra rows appended; events sorted by time (stable)
        and carrying `campaign` and `gap` codes.

    Example:
        >>> users, visits, events = add_rule_data(cfg, users, visits, events, rng)
    """
    more, new_visits, new_events = _extra(cfg, users, visits, rng)
    all_users = Users(
        **{f: np.concatenate([getattr(users, f), getattr(more, f)]) for f in vars(users)}
    )
    all_visits = Visits(
        **{f: np.concatenate([getattr(visits, f), new_visits[f]]) for f in new_visits}
    )
    start_ms, end_ms = cfg.start_us // 1000, cfg.end_us // 1000
    keep = (new_events["t_ms"] >= start_ms) & (new_events["t_ms"] < end_ms)
    cols = {
        f: np.concatenate([getattr(events, f), new_events[f][keep]]).astype(
            getattr(events, f).dtype
        )
        for f in new_events
    }
    order = np.argsort(cols["t_ms"], kind="stable")
    cols = {f: c[order] for f, c in cols.items()}
    campaign, gap = _fields(cols["visit"], cols["t_ms"], all_visits.user.size, rng)
    return all_users, all_visits, Events(**cols, campaign=campaign, gap=gap)  # type: ignore[arg-type]
