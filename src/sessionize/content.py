"""What a session carries beyond its times and pages (docs/concepts/sessions.md, "What a
session carries"): the options of engagement, conversions, channels and bots.

They decide the values of `sessions` columns, so a checkpoint records them with the event
mapping (`mapping.EventMapping.record`) and refuses a later change, naming the flag.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

from sessionize.durations import format_duration, parse_duration
from sessionize.errors import ConfigError

BOT_MODES = ("flag", "drop")
_MINUTE_US = 60_000_000
_SECOND_US = 1_000_000
# The session columns of each conversion NAME, and the event column holding its value.
CONVERSION_SUFFIXES = ("_count", "_value", "_first_at")
CONVERSION_VALUE_SUFFIX = "_value_json"


@dataclass(frozen=True)
class Conversion:
    """`--conversion NAME=ACTION[,value=PATH]`: the events with `action` are conversions
    named `name`; `value` is the dotted path of their value (a JSON number), if any."""

    name: str
    action: str
    value: str | None = None

    @property
    def value_column(self) -> str:
        """The event column that carries the value as written (a JSON number's text)."""
        return self.name + CONVERSION_VALUE_SUFFIX

    def spell(self) -> str:
        return f"{self.name}={self.action}" + (f",value={self.value}" if self.value else "")


def parse_conversion(text: str) -> Conversion:
    """`purchase=order_completed,value=order.total` -> Conversion.

    Every part must be understood: a part other than one `value=PATH` after
    `NAME=ACTION` (`currency=...`, a second `value=`) is refused, named, rather than read
    as the end of the path.

    Raises:
        ConfigError: the text is not `NAME=ACTION[,value=PATH]`, naming the part.
    """
    grammar = "NAME=ACTION[,value=PATH], e.g. purchase=order_completed,value=order.total"
    head, *options = (part.strip() for part in text.strip().split(","))
    name, sep, action = (p.strip() for p in head.partition("="))
    if not sep or not name or not action or "=" in action:
        raise ConfigError(f"--conversion '{text}': '{head}' is not NAME=ACTION; write {grammar}")
    value = None
    for part in options:
        key, vsep, path = (p.strip() for p in part.partition("="))
        if key != "value" or not vsep or not path or value is not None:
            why = (
                "a second value="
                if key == "value" and value is not None
                else f"'{part}'"
                if part
                else "an empty part"
            )
            raise ConfigError(
                f"--conversion '{text}': {why} is not understood; after NAME=ACTION only "
                "value=PATH may follow, once (a conversion has no currency: NAME_value "
                "sums the values as they are)"
            )
        value = path
    return Conversion(name, action, value)


@dataclass(frozen=True)
class SessionContent:
    """The options of the columns a session carries (all have defaults).

    Args (as attributes):
        site_hosts: The site's own hosts (`--site-hosts`): a referrer there is no source.
        channel_rules: The text of a `--channel-rules` file (None: the default table),
            and `channel_rules_path` where it was read.
        page_view_actions: Actions counted in `page_view_count` (`--page-view-actions`).
        max_page_time_us: The longest time one event counts in `engaged_time_ms`.
        ping_action: The heartbeat action (`--ping-action`; None: engaged time from the
            gaps between events); `heartbeat_us` its period, `min_visit_us` what a
            session with a ping adds.
        engaged_after_us: A session this long (first to last event) is engaged.
        conversions: `--conversion` in the order given.
        bots: `flag` (sessions carry `is_bot`) or `drop` (bots' events are dropped).

    Example:
        >>> SessionContent(ping_action="ping", heartbeat_us=10_000_000).record()["heartbeat"]
        '10s'

    Raises:
        ConfigError: a value no session could have, or a conversion named twice.
    """

    site_hosts: tuple[str, ...] = ()
    channel_rules: str | None = None
    channel_rules_path: str = ""
    page_view_actions: tuple[str, ...] = ("view",)
    max_page_time_us: int = 30 * _MINUTE_US
    ping_action: str | None = None
    heartbeat_us: int = 10 * _SECOND_US
    min_visit_us: int = 5 * _SECOND_US
    engaged_after_us: int = 10 * _SECOND_US
    conversions: tuple[Conversion, ...] = field(default=())
    bots: str = "flag"

    def __post_init__(self) -> None:
        if self.bots not in BOT_MODES:
            raise ConfigError(f"--bots must be one of {', '.join(BOT_MODES)}")
        for flag, us in (
            ("--max-page-time", self.max_page_time_us),
            ("--heartbeat", self.heartbeat_us),
        ):
            if us <= 0:
                raise ConfigError(f"{flag} must be positive, e.g. 30m")
        if self.min_visit_us < 0 or self.engaged_after_us < 0:
            raise ConfigError("--min-visit and --engaged-after must be zero or positive")
        names = [c.name.lower() for c in self.conversions]
        if len(set(names)) != len(names):
            raise ConfigError("--conversion: each NAME may appear once")
        for c in self.conversions:
            if not c.name.isidentifier():
                raise ConfigError(
                    f"--conversion: '{c.name}' cannot name columns; use letters, digits and _"
                )

    def columns(self) -> list[str]:
        """The session columns the conversions add, in order."""
        return [c.name + s for c in self.conversions for s in CONVERSION_SUFFIXES]

    def record(self) -> dict[str, str]:
        """The options as the flags spell them (a rules file by its path and digest)."""
        digest = ""
        if self.channel_rules is not None:
            sha = hashlib.sha256(self.channel_rules.encode()).hexdigest()[:16]
            digest = f"{self.channel_rules_path}#sha256:{sha}"
        return {
            "site_hosts": ",".join(self.site_hosts),
            "channel_rules": digest,
            "page_view_actions": ",".join(self.page_view_actions),
            "max_page_time": format_duration(self.max_page_time_us),
            "ping_action": self.ping_action or "",
            "heartbeat": format_duration(self.heartbeat_us),
            "min_visit": format_duration(self.min_visit_us),
            "engaged_after": format_duration(self.engaged_after_us),
            "conversion": ";".join(c.spell() for c in self.conversions),
            "bots": self.bots,
        }

    @classmethod
    def from_record(cls, record: dict) -> SessionContent:
        """`record`'s inverse; a recorded rules file is read again from its path, and must
        still hold what it held (the digest)."""
        rules, path = None, ""
        if record.get("channel_rules"):
            path = str(record["channel_rules"]).rsplit("#sha256:", 1)[0]
            rules = read_rules_file(path)
        return cls(
            site_hosts=split_list(record.get("site_hosts", "")),
            channel_rules=rules,
            channel_rules_path=path,
            page_view_actions=split_list(record.get("page_view_actions", "view")),
            max_page_time_us=parse_duration(str(record.get("max_page_time", "30m"))),
            ping_action=str(record.get("ping_action") or "") or None,
            heartbeat_us=parse_duration(str(record.get("heartbeat", "10s"))),
            min_visit_us=parse_duration(str(record.get("min_visit", "5s"))),
            engaged_after_us=parse_duration(str(record.get("engaged_after", "10s"))),
            conversions=tuple(
                parse_conversion(c) for c in str(record.get("conversion", "")).split(";") if c
            ),
            bots=str(record.get("bots", "flag")),
        )


def split_list(text: object) -> tuple[str, ...]:
    """`a, b,,c` -> ('a', 'b', 'c')."""
    return tuple(p.strip() for p in str(text).split(",") if p.strip())


def read_rules_file(path: str) -> str:
    """The text of a `--channel-rules` file; a ConfigError naming it when unreadable."""
    try:
        with open(path, encoding="utf-8") as f:
            return f.read()
    except OSError as e:
        raise ConfigError(f"--channel-rules {path}: cannot read it ({e.strerror})") from e


DEFAULT_CONTENT_RECORD = SessionContent().record()
