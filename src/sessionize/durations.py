"""Durations as the flags write them: `90s`, `10m`, `1h30m`, `250ms` <-> microseconds."""

from __future__ import annotations

import re

from sessionize.errors import ConfigError

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
