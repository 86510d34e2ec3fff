"""Local dates and midnights in an IANA time zone, from the pinned `tzdata` package.

The zone rules come from the `tzdata` package (pinned in pyproject.toml), never from the
machine's own database, so that every executor cuts sessions at the same instants. The
zone is consulted once per calendar day that the instants touch, not once per event;
the instants are then placed among those midnights with one `np.searchsorted`.
"""

from __future__ import annotations

import functools
import importlib.resources
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import numpy as np

US_PER_DAY = 86_400_000_000
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_EPOCH_DATE = _EPOCH.date()


@functools.lru_cache(maxsize=64)
def zone(name: str) -> ZoneInfo:
    """The zone `name` as the `tzdata` package defines it.

    Raises:
        ZoneInfoNotFoundError: `name` is not a zone of the package (`Mars/Olympus`).
    """
    if name == "UTC":
        return ZoneInfo("UTC")
    parts = name.split("/")
    if not name or any(p in ("", ".", "..") for p in parts):
        raise ZoneInfoNotFoundError(name)
    try:
        path = importlib.resources.files("tzdata").joinpath("zoneinfo", *parts)
        with path.open("rb") as f:
            return ZoneInfo.from_file(f, key=name)
    except (OSError, ValueError) as e:
        raise ZoneInfoNotFoundError(name) from e


def local_days(time_us: np.ndarray, timezone: str) -> np.ndarray:
    """The date of each instant (µs since the epoch) in `timezone`, as days since the epoch."""
    if timezone == "UTC" or len(time_us) == 0:
        return (time_us // US_PER_DAY).astype(np.int32)
    days, midnights = _midnights(time_us, timezone)
    return days[np.searchsorted(midnights, time_us, side="right") - 1].astype(np.int32)


def next_midnight(time_us: np.ndarray, timezone: str) -> np.ndarray:
    """Per instant, the first later instant whose date in `timezone` differs: the next local
    midnight, or where a DST change skips it, the end of the skipped time."""
    if timezone == "UTC" or len(time_us) == 0:
        return (time_us // US_PER_DAY + 1) * US_PER_DAY
    _, midnights = _midnights(time_us, timezone)
    return midnights[np.searchsorted(midnights, time_us, side="right")]


def _midnights(time_us: np.ndarray, timezone: str) -> tuple[np.ndarray, np.ndarray]:
    """(local dates as days since the epoch, the instant each begins), ascending, covering
    every instant given and the day after. An instant's local date is at most one day off
    its UTC date, so the local dates around each UTC date suffice."""
    tz = zone(timezone)
    utc_days = np.unique(time_us // US_PER_DAY)
    days = np.unique((utc_days[:, None] + np.arange(-1, 3)).ravel())
    starts = np.empty(len(days), dtype=np.int64)
    for i, day in enumerate(days.tolist()):  # once per calendar day, not per event
        d = _EPOCH_DATE + timedelta(days=day)
        # A midnight that a DST gap skips reads with the offset before the gap (fold=0):
        # the instant the gap starts, which is the first of the new date.
        start = datetime(d.year, d.month, d.day, tzinfo=tz)
        starts[i] = (start - _EPOCH) // timedelta(microseconds=1)
    return days, starts
