"""Durations as the flags write them: `90s`, `10m`, `1h30m`, `250ms` <-> microseconds."""

from __future__ import annotations

import re
from datetime import timedelta

from sessionize.errors import ConfigError

Duration = str | int | timedelta  # "10m", microseconds, or a timedelta

_DURATION = re.compile(r"(\d+)(ms|s|m|h|d)")
_UNIT_US = {"ms": 1_000, "s": 1_000_000, "m": 60_000_000, "h": 3_600_000_000, "d": 86_400_000_000}


def parse_duration(text: str) -> int:
    """`90s`, `10m`, `1h30m`, `250ms` -> microseconds. Raises ConfigError on anything else."""
    s = text.strip().lower()
    pos, total = 0, 0
    for m in _DURATION.finditer(s):
        if m.start() != pos:
            break
        total += int(m.group(1)) * _UNIT_US[m.group(2)]
        pos = m.end()
    if not s or pos != len(s):
        raise ConfigError(f"'{text}' is not a duration; write it like 90s, 10m, 1h or 1h30m")
    return total


def format_duration(us: int) -> str:
    """Inverse of parse_duration for display: 600_000_000 -> '10m'."""
    if us == 0:
        return "0s"
    parts = []
    for unit in ("d", "h", "m", "s", "ms"):
        n, us = divmod(us, _UNIT_US[unit])
        if n:
            parts.append(f"{n}{unit}")
    return "".join(parts) or "0s"


def duration_us(value: Duration, name: str) -> int:
    """`"10m"`, a timedelta, or microseconds -> microseconds; a ConfigError naming `name`
    for anything else."""
    if isinstance(value, timedelta):
        return int(value / timedelta(microseconds=1))
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if not isinstance(value, str):
        raise ConfigError(f"{name}: give a duration like '10m', a timedelta or microseconds")
    try:
        return parse_duration(value)
    except ConfigError as e:
        raise ConfigError(f"{name}: {e}") from None
