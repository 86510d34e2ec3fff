"""Validated settings: durations like `10m`, and the parameters that are part of the state."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime

from sessionize.errors import ConfigError

_DURATION = re.compile(r"(\d+)(ms|s|m|h|d)")
_UNIT_US = {"ms": 1_000, "s": 1_000_000, "m": 60_000_000, "h": 3_600_000_000, "d": 86_400_000_000}


_SECRET_PARAM = re.compile(r"([?&][^=&]*(?:password|secret|token|access_key)[^=&]*=)[^&]*", re.I)


def redact_uri(uri: str) -> str:
    """`uri` without its password (`user:pw@` and `:pw@` alike) or secret query parameters
    (`?secret_key=...`, `password=`, `token=`, `access_key=`), for logs, errors and files."""
    uri = re.sub(r"(//[^/@:]*):[^/@]*@", r"\1:***@", uri)
    return _SECRET_PARAM.sub(r"\1***", uri)


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


def format_instant(us: int | None) -> str | None:
    """Microseconds since the epoch -> `2026-11-01T01:50:00Z` (None stays None)."""
    if us is None:
        return None
    return datetime.fromtimestamp(us / 1e6, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def counted(n: int, noun: str) -> str:
    """`1 open session`, `2 open sessions`: a count with its noun in the right number."""
    return f"{n:,} {noun}" if n == 1 else f"{n:,} {noun}s"


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


def describe_differences(recorded: Mapping[str, object], current: Mapping[str, object]) -> str:
    """The settings that differ, spelled as flags: `--gap 10m (this run: 5m); ...`."""
    return "; ".join(
        f"--{k.replace('_', '-')} {recorded.get(k)!s} (this run: {current.get(k)!s})"
        for k in sorted(set(recorded) | set(current))
        if recorded.get(k) != current.get(k)
    )


@dataclass(frozen=True)
class SessionRules:
    """The session rules (docs/design.md, "Semantics").

    `gap` and `close_actions` decide where sessions split and `lateness` which events
    are late, so they are part of the state: changing any of them (or the partition
    count) against an existing checkpoint would mix two semantics, and is refused.
    """

    gap_us: int = 10 * 60_000_000
    lateness_us: int = 10 * 60_000_000
    close_actions: tuple[str, ...] = field(default=("browser_close",))

    def __post_init__(self) -> None:
        if self.gap_us <= 0:
            raise ConfigError("--gap must be positive, e.g. 10m")
        if self.lateness_us < 0:
            raise ConfigError("--lateness must be zero or positive, e.g. 10m")
