"""Validated settings: durations like `10m`, and the parameters that are part of the state."""

from __future__ import annotations

import os
import zoneinfo
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from sessionize.durations import _UNIT_US, format_duration, parse_duration
from sessionize.errors import ConfigError
from sessionize.timezones import zone


def format_instant(us: int | None) -> str | None:
    """Microseconds since the epoch -> `2026-11-01T01:50:00Z` (None stays None)."""
    if us is None:
        return None
    # numpy's calendar reaches far beyond Python's years 1-9999, so that a time recorded
    # before times were bounded (a watermark in the year 0) still prints.
    return f"{np.datetime_as_string(np.datetime64(int(us), 'us'), unit='s')}Z"


def counted(n: int, noun: str) -> str:
    """`1 open session`, `2 open sessions`: a count with its noun in the right number."""
    return f"{n:,} {noun}" if n == 1 else f"{n:,} {noun}s"


def describe_differences(recorded: Mapping[str, object], current: Mapping[str, object]) -> str:
    """The settings that differ, spelled as flags: `--gap 10m (this run: 5m); ...`."""
    return "; ".join(
        f"--{k.replace('_', '-')} {recorded.get(k)!s} (this run: {current.get(k)!s})"
        for k in sorted(set(recorded) | set(current))
        if recorded.get(k) != current.get(k)
    )


# The longest gap an event may ask for with `--gap-field` (30 days).
MAX_EVENT_GAP_US = 30 * _UNIT_US["d"]
# The longest `--gap`, `--lateness` and `--max-duration` (a year): event times hold the
# years 0002-9998 (events/rules.py), so every time derived from them holds in 0001-9999.
MAX_RULE_US = 365 * _UNIT_US["d"]
# How far back a direct session looks for its user's last non-direct one (GA4's default).
DEFAULT_ATTRIBUTION_LOOKBACK_US = 90 * _UNIT_US["d"]


@dataclass(frozen=True)
class SessionRules:
    """The session rules (docs/design.md, "Semantics").

    `gap` and `close_actions` decide where sessions split and `lateness` which events
    are late, so they are part of the state: changing any of them (or the partition
    count) against an existing checkpoint would mix two semantics, and is refused. So are
    the optional rules: `max_duration_us` (a session lasts less than this), `timezone`
    (the zone of `session_date` and of the midnight split) and `split_at_midnight`. The
    per-event rules (`--split-on-change`, `--gap-field`) read fields, so they belong to the
    event mapping (`mapping.EventMapping`). `user_ttl_us` (`--user-ttl`, with
    `--anonymous-field`) is how long an anonymous id's identity outlives its last event
    (None: for ever): it decides which events an identity folds, so it is part of the
    state as well, and refused on change. `revise_within_us` (`--revise-within`, None: off)
    is how long an emitted session stays in the state for late events to revise it
    (docs/design.md, "Revisions"): it decides what is late and what the state holds.
    `attribution_lookback_us` (`--attribution-lookback`, with `--anonymous-field`) is how
    far back a direct session looks for its user's last non-direct one: it decides what
    the users step attributes and keeps, so it is refused on change too.

    Example:
        >>> SessionRules(gap_us=600_000_000, max_duration_us=86_400_000_000,
        ...              timezone="Europe/Paris", split_at_midnight=True).timezone
        'Europe/Paris'

    Raises:
        ConfigError: a value no session could have (a gap of zero, an unknown zone).
    """

    gap_us: int = 10 * 60_000_000
    lateness_us: int = 10 * 60_000_000
    close_actions: tuple[str, ...] = field(default=("browser_close",))
    max_duration_us: int | None = None
    timezone: str = "UTC"
    split_at_midnight: bool = False
    user_ttl_us: int | None = None
    revise_within_us: int | None = None
    attribution_lookback_us: int = DEFAULT_ATTRIBUTION_LOOKBACK_US

    def __post_init__(self) -> None:
        if self.gap_us <= 0:
            raise ConfigError("--gap must be positive, e.g. 10m")
        if self.lateness_us < 0:
            raise ConfigError("--lateness must be zero or positive, e.g. 10m")
        if self.max_duration_us is not None and self.max_duration_us <= 0:
            raise ConfigError("--max-duration must be positive, e.g. 24h")
        for flag, us in (
            ("--gap", self.gap_us),
            ("--lateness", self.lateness_us),
            ("--max-duration", self.max_duration_us or 0),
            ("--revise-within", self.revise_within_us or 0),
        ):
            if us > MAX_RULE_US:
                raise ConfigError(
                    f"{flag} must be at most 365d (event times are kept within "
                    "the years 0002-9998 and what follows from them within "
                    "0001-9999)"
                )
        if self.user_ttl_us is not None and self.user_ttl_us < self.gap_us:
            raise ConfigError(
                "--user-ttl must be at least --gap (an identity outlives its sessions), e.g. 400d"
            )
        if self.revise_within_us is not None and self.revise_within_us <= 0:
            raise ConfigError("--revise-within must be positive, e.g. 3d")
        if self.attribution_lookback_us <= 0:
            raise ConfigError("--attribution-lookback must be positive, e.g. 90d")
        check_timezone(self.timezone)

    def record(self) -> dict[str, object]:
        """The optional rules as a checkpoint records them (unset: `""`, `UTC`, false),
        so that a checkpoint from before they existed reads as all unset (no `--user-ttl`:
        identities kept for ever, as they were; the lookback of 90 days, then fixed)."""
        return {
            "max_duration": ""
            if self.max_duration_us is None
            else format_duration(self.max_duration_us),
            "timezone": self.timezone,
            "split_at_midnight": self.split_at_midnight,
            "user_ttl": "" if self.user_ttl_us is None else format_duration(self.user_ttl_us),
            # Only when set: a record from before revisions reads as "off".
            **(
                {}
                if self.revise_within_us is None
                else {"revise_within": format_duration(self.revise_within_us)}
            ),
            "attribution_lookback": format_duration(self.attribution_lookback_us),
        }

    @classmethod
    def from_record(cls, settings: Mapping[str, object]) -> SessionRules:
        """The rules a checkpoint's or a job record's settings name (`record`'s inverse)."""
        actions = str(settings.get("close_actions", "browser_close"))
        max_duration = str(settings.get("max_duration") or "")
        user_ttl = str(settings.get("user_ttl") or "")
        revise = str(settings.get("revise_within") or "")
        lookback = str(settings.get("attribution_lookback") or "")
        return cls(
            gap_us=parse_duration(str(settings["gap"])),
            lateness_us=parse_duration(str(settings["lateness"])),
            close_actions=tuple(a for a in actions.split(",") if a),
            max_duration_us=parse_duration(max_duration) if max_duration else None,
            timezone=str(settings.get("timezone") or "UTC"),
            split_at_midnight=bool(settings.get("split_at_midnight", False)),
            user_ttl_us=parse_duration(user_ttl) if user_ttl else None,
            revise_within_us=parse_duration(revise) if revise else None,
            attribution_lookback_us=parse_duration(lookback)
            if lookback
            else DEFAULT_ATTRIBUTION_LOOKBACK_US,
        )


def check_timezone(name: str, flag: str = "--timezone") -> None:
    """Raise a one-line ConfigError unless `name` is an IANA time zone (`Europe/Paris`)."""
    try:
        zone(name)
    except zoneinfo.ZoneInfoNotFoundError as e:
        raise ConfigError(
            f"{flag} '{name}' is not an IANA time zone; write it like Europe/Paris or UTC"
        ) from e


DEFAULT_RULES_RECORD = SessionRules().record()
"""What a checkpoint recorded before the optional rules existed means: none of them set."""


def retained_batches(environ: Mapping[str, str] | None = None) -> int:
    """How many batches stay restorable (`SESSIONIZE_RETAIN_BATCHES`, default 100): Spark's
    logs, the state versions and the batch records of a job keep that many."""
    text = (os.environ if environ is None else environ).get("SESSIONIZE_RETAIN_BATCHES", "100")
    if not text.strip().isdigit() or int(text) < 1:
        raise ConfigError(
            f"SESSIONIZE_RETAIN_BATCHES={text!r}: give a whole number of batches, 1 or more"
        )
    return int(text)
