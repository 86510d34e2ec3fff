"""Where the fields of a user's events are, and how they are typed (docs/design.md, "Events").

The defaults are the sample event contract: `user_id` a JSON integer, `event_time` an
ISO-8601 string, the page at `page.current`. The mapping decides which users and times the
state holds, so it is part of a checkpoint's settings like `--gap`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from sessionize.errors import ConfigError

TIME_FORMATS = ("iso8601", "epoch-ms", "epoch-s")
USER_TYPES = ("long", "string")
INPUT_FORMATS = ("json", "parquet")

# Attributes of a session's first event that the session carries: output column -> path.
DEFAULT_KEEP = (
    ("site", "source.site"),
    ("api_version", "source.api_version"),
    ("browser", "technical.browser"),
    ("language", "technical.lang"),
    ("device_type", "technical.device.type"),
)


@dataclass(frozen=True)
class EventMapping:
    """Dotted paths into a JSON object or a Parquet struct, and the types read there."""

    user: str = "user_id"
    time: str = "event_time"
    page: str = "page.current"
    action: str = "action"
    time_format: str = "iso8601"
    user_type: str = "long"
    keep: tuple[tuple[str, str], ...] = field(default=DEFAULT_KEEP)
    input_format: str = "json"

    def __post_init__(self) -> None:
        if self.time_format not in TIME_FORMATS:
            raise ConfigError(f"--time-format must be one of {', '.join(TIME_FORMATS)}")
        if self.user_type not in USER_TYPES:
            raise ConfigError(f"--user-type must be one of {', '.join(USER_TYPES)}")
        if self.input_format not in INPUT_FORMATS:
            raise ConfigError(f"--input-format must be one of {', '.join(INPUT_FORMATS)}")
