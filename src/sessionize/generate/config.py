"""What to generate: the validated settings of `sessionize generate`."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

from sessionize.errors import ConfigError

HOUR_US = 3_600_000_000
MAX_FILES_PER_HOUR = 3600  # slices of at least one second, so arrival times stay distinct


def parse_hour(text: str) -> datetime:
    """`2019-10-10T15`, `2019-10-10T15:00`, `2019-10-10 15:00:00+02:00` -> aware UTC datetime.

    Offset-less means UTC (as for event times). Raises ConfigError unless the
    time is on a whole hour.
    """
    try:
        value = datetime.fromisoformat(text.strip())
    except ValueError:
        raise ConfigError(
            f"--start '{text}' is not an ISO-8601 time; write it like 2019-10-10T15:00"
        ) from None
    return _utc_hour(value)


def _utc_hour(value: datetime) -> datetime:
    value = value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)
    if (value.minute, value.second, value.microsecond) != (0, 0, 0):
        raise ConfigError(f"--start {value.isoformat()} is not on a whole hour")
    return value


def _rate(name: str, value: float) -> None:
    if not 0.0 <= value <= 1.0:
        raise ConfigError(f"--{name} must be between 0 and 1, got {value}")


@dataclass(frozen=True)
class GeneratorConfig:
    """Settings of one generated tree; equal settings give byte-identical files.

    Rates are per distinct valid event (duplicates, invalid lines, late events) or per visit
    (close_rate: the share of visits that end with an explicit `browser_close`). `gap_us` and
    `lateness_us` are not enforced on the data: they shape it. Think times straddle the gap,
    and lateness bounds how far events may travel across files without becoming late.
    """

    start: datetime  # first event hour; naive means UTC; must be on a whole hour
    hours: int = 3
    users: int = 1000
    events_per_hour: int = 20000
    seed: int = 42
    duplicate_rate: float = 0.01
    late_rate: float = 0.0
    invalid_rate: float = 0.0
    close_rate: float = 0.05
    files_per_hour: int = 1
    gap_us: int = 600_000_000
    lateness_us: int = 600_000_000
    gzip: bool = False
    rule_data: bool = False  # add data for the session rules (generate/rules.py)
    web_data: bool = False  # add URLs, referrers, user agents, pings, purchases (generate/web.py)
    identity_data: bool = False  # anonymous ids on every event, user ids once logged in

    def __post_init__(self) -> None:
        if not isinstance(self.start, datetime):
            raise ConfigError("--start must be a datetime on a whole hour")
        object.__setattr__(self, "start", _utc_hour(self.start))
        if self.hours < 1:
            raise ConfigError("--hours must be at least 1")
        if self.users < 1:
            raise ConfigError("--users must be at least 1")
        if self.events_per_hour < 0:
            raise ConfigError("--events-per-hour must be zero or positive")
        if self.seed < 0:
            raise ConfigError("--seed must be zero or positive")
        for name in ("duplicate_rate", "late_rate", "invalid_rate", "close_rate"):
            _rate(name.replace("_", "-"), getattr(self, name))
        if not 1 <= self.files_per_hour <= MAX_FILES_PER_HOUR:
            raise ConfigError(f"--files-per-hour must be between 1 and {MAX_FILES_PER_HOUR}")
        if self.gap_us < 1000:
            raise ConfigError("--gap must be at least 1ms, e.g. 10m")
        if self.lateness_us < 0:
            raise ConfigError("--lateness must be zero or positive, e.g. 10m")

    @property
    def start_us(self) -> int:
        """Epoch microseconds of the first hour."""
        return int(self.start.timestamp()) * 1_000_000

    @property
    def end_us(self) -> int:
        """Epoch microseconds just past the last hour (exclusive)."""
        return self.start_us + self.hours * HOUR_US
