"""Where the fields of a user's events are, and how they are typed (docs/design.md, "Events").

The defaults are the sample event contract: `user_id` a JSON integer, `event_time` an
ISO-8601 string, the page at `page.current`. The mapping decides which users and times the
state holds, so it is part of a checkpoint's settings like `--gap` (`record`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from sessionize.base_schema import (
    IDENTITY_RESERVED,
    MAPPED_COLUMNS,
    RESERVED_COLUMNS,
    SENT_USER,
)
from sessionize.content import (
    CONVERSION_SUFFIXES,
    DEFAULT_CONTENT_RECORD,
    SessionContent,
)
from sessionize.errors import ConfigError

TIME_FORMATS = ("iso8601", "epoch-ms", "epoch-s")
USER_TYPES = ("long", "string")
INPUT_FORMATS = ("json", "parquet")

# A string user key longer than this (UTF-8 bytes) is invalid: keys are stored in every
# state backend and embedded in `session_id`, so they are bounded.
MAX_USER_KEY_BYTES = 256

# Attributes of a session's first event that the session carries: output column -> path.
DEFAULT_KEEP = (
    ("site", "source.site"),
    ("api_version", "source.api_version"),
    ("browser", "technical.browser"),
    ("language", "technical.lang"),
    ("device_type", "technical.device.type"),
)
# PostgreSQL cuts longer identifiers, so a longer column name would not be its own there.
MAX_COLUMN_BYTES = 63
# The schemas of `sessions`: 1 is the columns of checkpoints created before a session
# carried its traffic source, engagement and conversions; 2 adds them; 3 is GA4's channel
# group, page-view rows, the `events` output, user agents parsed, click ids and sources
# kept across split sessions (docs/concepts/sessions.md, "What a session carries").
SESSION_COLUMNS = (1, 2, 3)
# The newest schema: what a new checkpoint or batch output gets.
NEWEST_COLUMNS = 3
# `--split-on-change` names that read the page URL's query (with schema 3), not a field.
URL_QUERY_NAMES = ("utm_source", "utm_medium", "utm_campaign", "utm_term", "utm_content")
LAST_PREFIX = "last:"


@dataclass(frozen=True)
class EventMapping:
    """Dotted paths into a JSON object or a Parquet struct, and the types read there.

    `change` (`--split-on-change`) is read as a kept field is (a string, null when
    missing) and `gap` (`--gap-field`) as a number of seconds; the session logic finds
    them in the event columns `change_value` and `gap_us`, which exist only when set.

    With `anonymous` (`--anonymous-field`) the anonymous id keys the sessions (typed by
    `user_type`) and the user id at `user` is read as a `last:` kept field is, into the
    event column `sent_user_id`: a string, null when missing (docs/design.md, "Identity").
    """

    user: str = "user_id"
    time: str = "event_time"
    page: str = "page.current"
    action: str = "action"
    time_format: str = "iso8601"
    user_type: str = "long"
    keep: tuple[tuple[str, str], ...] = field(default=DEFAULT_KEEP)
    input_format: str = "json"
    change: str | None = None
    gap: str | None = None
    url: str | None = None
    referrer: str | None = None
    user_agent: str | None = None
    last: tuple[tuple[str, str], ...] = ()
    anonymous: str | None = None
    session_columns: int = 1
    content: SessionContent = field(default_factory=SessionContent)

    def __post_init__(self) -> None:
        if self.time_format not in TIME_FORMATS:
            raise ConfigError(f"--time-format must be one of {', '.join(TIME_FORMATS)}")
        if self.user_type not in USER_TYPES:
            raise ConfigError(f"--user-type must be one of {', '.join(USER_TYPES)}")
        if self.input_format not in INPUT_FORMATS:
            raise ConfigError(f"--input-format must be one of {', '.join(INPUT_FORMATS)}")
        object.__setattr__(self, "keep", tuple((str(n), str(p)) for n, p in self.keep))
        object.__setattr__(self, "last", tuple((str(n), str(p)) for n, p in self.last))
        if self.session_columns not in SESSION_COLUMNS:
            raise ConfigError("session_columns must be 1, 2 or 3")
        for flag, path in self.fields():
            _check_path(flag, path)
        names = [name for name, _ in self.keep + self.last]
        reserved = self.reserved_columns
        for name in names:
            if not name.isidentifier() or name.lower() in reserved:
                raise ConfigError(
                    f"--keep-fields: '{name}' cannot name an output column; use letters, "
                    "digits and _ (not a column the outputs already have)"
                )
            if len(name.encode()) > MAX_COLUMN_BYTES:
                raise ConfigError(
                    f"--keep-fields: '{name[:20]}...' is longer than "
                    f"{MAX_COLUMN_BYTES} bytes; choose a shorter NAME"
                )
        if len({n.lower() for n in names}) != len(names):
            raise ConfigError("--keep-fields: each NAME may appear once")
        _check_conversions(self.content, names, reserved)
        if self.content.bots == "drop" and not self.user_agent:
            raise ConfigError("--bots drop needs --user-agent-field: where the user agent is")
        if self.change_query and not self.url:
            raise ConfigError(
                f"--split-on-change {self.change} reads the page URL's query: give --url-field too"
            )
        _check_tree(self.fields())

    def fields(self) -> list[tuple[str, str]]:
        """(flag, path) of every field read, the key (user or anonymous id) first."""
        return [
            self.key_flag,
            ("--time-field", self.time),
            ("--action-field", self.action),
            ("--page-field", self.page),
            *(("--keep-fields", path) for _, path in self.keep),
            *([("--split-on-change", self.change_field)] if self.change_field else []),
            *([("--gap-field", self.gap)] if self.gap else []),
            *(("--keep-fields", path) for _, path in self.last),
            *([("--user-field", self.user)] if self.anonymous else []),
            *((flag, path) for flag, path in self.mapped()),
            *(("--conversion", c.value) for c in self.content.conversions if c.value),
        ]

    @property
    def reserved_columns(self) -> frozenset[str]:
        """The names a kept attribute or a conversion's column cannot take."""
        return RESERVED_COLUMNS | (IDENTITY_RESERVED if self.anonymous else frozenset())

    @property
    def key_flag(self) -> tuple[str, str]:
        """(flag, path) of the field that keys the sessions: the anonymous id when set."""
        if self.anonymous:
            return ("--anonymous-field", self.anonymous)
        return ("--user-field", self.user)

    @property
    def key_field(self) -> str:
        """The path of the field that keys the sessions (the parsers' "user" column)."""
        return self.key_flag[1]

    @property
    def read_last(self) -> tuple[tuple[str, str], ...]:
        """(event column, path) of the fields read as `last:` kept fields are: the `last:`
        ones and, with `--anonymous-field`, the user id (`sent_user_id`)."""
        return self.last + (((SENT_USER, self.user),) if self.anonymous else ())

    @property
    def change_query(self) -> str | None:
        """The `utm_*` name `--split-on-change` reads from the page URL's query (schema 3),
        as the traffic columns read it; None when it reads a field or is unset."""
        if self.session_columns >= 3 and self.change in URL_QUERY_NAMES:
            return self.change
        return None

    @property
    def change_field(self) -> str | None:
        """The path `--split-on-change` reads from the event (None: unset, or the URL's)."""
        return None if self.change_query else self.change

    def mapped(self) -> list[tuple[str, str]]:
        """(flag, path) of the page URL, referrer and user agent fields that are set."""
        flags = (
            ("--url-field", self.url),
            ("--referrer-field", self.referrer),
            ("--user-agent-field", self.user_agent),
        )
        return [(flag, path) for flag, path in flags if path]

    @property
    def mapped_pairs(self) -> tuple[tuple[str, str], ...]:
        """(event column, path) of the mapped URL, referrer and user agent, in order."""
        paths = (self.url, self.referrer, self.user_agent)
        return tuple((name, path) for name, path in zip(MAPPED_COLUMNS, paths, strict=True) if path)

    @property
    def mapped_columns(self) -> tuple[str, ...]:
        """The event columns of the mapped URL, referrer and user agent, in order."""
        return tuple(name for name, _ in self.mapped_pairs)

    @property
    def attributes(self) -> tuple[str, ...]:
        """The kept attributes' output column names, in order."""
        return tuple(name for name, _ in self.keep)

    @property
    def string_keys(self) -> bool:
        return self.user_type == "string"

    def record(self) -> dict[str, str]:
        """The mapping as the flags spell it, for a checkpoint's recorded settings."""
        return {
            "user_field": self.user,
            "time_field": self.time,
            "page_field": self.page,
            "action_field": self.action,
            "time_format": self.time_format,
            "user_type": self.user_type,
            "keep_fields": format_keep(self.keep, self.last),
            "split_on_change": self.change or "",
            "gap_field": self.gap or "",
            "url_field": self.url or "",
            "referrer_field": self.referrer or "",
            "user_agent_field": self.user_agent or "",
            "anonymous_field": self.anonymous or "",
            "session_columns": str(self.session_columns),
            **self.content.record(),
        }

    @classmethod
    def from_record(cls, record: dict) -> EventMapping:
        """The mapping a checkpoint's or job record's settings name (`record`'s inverse);
        settings from before mappings existed name the default one."""
        r = {**DEFAULT_RECORD, **{k: v for k, v in record.items() if k in DEFAULT_RECORD}}
        keep, last = split_keep(parse_keep(r["keep_fields"]))
        return cls(
            user=r["user_field"],
            time=r["time_field"],
            page=r["page_field"],
            action=r["action_field"],
            time_format=r["time_format"],
            user_type=r["user_type"],
            keep=keep,
            change=r["split_on_change"] or None,
            gap=r["gap_field"] or None,
            url=r["url_field"] or None,
            referrer=r["referrer_field"] or None,
            user_agent=r["user_agent_field"] or None,
            last=last,
            anonymous=r["anonymous_field"] or None,
            session_columns=int(r["session_columns"]),
            content=SessionContent.from_record(r),
        )


def parse_keep(text: str) -> tuple[tuple[str, str], ...]:
    """`NAME=PATH,...` -> ((NAME, PATH), ...); an empty text keeps no attribute."""
    pairs = []
    for item in (p.strip() for p in text.split(",")):
        if not item:
            continue
        name, sep, path = item.partition("=")
        if not sep or not name.strip() or not path.strip() or "=" in path:
            raise ConfigError(
                f"--keep-fields: '{item}' is not NAME=PATH, e.g. site=source.site (pairs are "
                "separated by commas)"
            )
        pairs.append((name.strip(), path.strip()))
    return tuple(pairs)


def split_keep(pairs: tuple[tuple[str, str], ...]):
    """Parsed `--keep-fields` -> (first-event pairs, `last:` pairs without the prefix)."""
    first = tuple((n, p) for n, p in pairs if not n.startswith(LAST_PREFIX))
    last = tuple(
        (n.removeprefix(LAST_PREFIX).strip(), p) for n, p in pairs if n.startswith(LAST_PREFIX)
    )
    return first, last


def format_keep(keep: tuple[tuple[str, str], ...], last: tuple[tuple[str, str], ...] = ()) -> str:
    pairs = [*keep, *((LAST_PREFIX + name, path) for name, path in last)]
    return ",".join(f"{name}={path}" for name, path in pairs)


def _check_conversions(content: SessionContent, names: list[str], reserved: frozenset[str]) -> None:
    """A conversion's columns may not collide with another column (refused at start)."""
    taken = {n.lower() for n in names} | reserved
    for c in content.conversions:
        for column in (c.name + s for s in (*CONVERSION_SUFFIXES, "_value_json")):
            if len(column.encode()) > MAX_COLUMN_BYTES:
                raise ConfigError(
                    f"--conversion {c.name[:20]}...: its column {column[:20]}... "
                    f"is longer than {MAX_COLUMN_BYTES} bytes; choose a shorter "
                    "NAME"
                )
            if column.lower() in taken:
                raise ConfigError(
                    f"--conversion {c.name}: its column {column} collides with another "
                    "column; choose another NAME"
                )
            taken.add(column.lower())


def _check_path(flag: str, path: str) -> None:
    parts = path.split(".")
    # `=` and `,` separate the parts of --keep-fields and --conversion: in a path they are
    # the rest of the option read as a field name, which would match nothing.
    bad = ("'", "`", "=", ",")
    if not path or any(not p or p != p.strip() or any(c in p for c in bad) for p in parts):
        raise ConfigError(
            f"{flag} '{path}' is not a dotted path of field names, e.g. page.current "
            "(no empty names, quotes, '=', ',' or surrounding spaces)"
        )


def _check_tree(fields: list[tuple[str, str]]) -> None:
    """A path may not run through another field read as a value (`page` and `page.url`)."""
    leaves = {path: flag for flag, path in fields}
    for flag, path in fields[:2]:  # the user and the time have their own types
        if sum(p == path for _, p in fields) > 1:
            raise ConfigError(f"{flag} '{path}' is also read as another field; use another path")
    for flag, path in fields:
        parts = path.split(".")
        for i in range(1, len(parts)):
            prefix = ".".join(parts[:i])
            if prefix in leaves:
                raise ConfigError(
                    f"{flag} '{path}' runs through '{prefix}', which {leaves[prefix]} reads as "
                    "a value: a field is either a value or an object"
                )


def new_columns(revise_within: object = None) -> int:
    """The `sessions` schema of a new checkpoint or batch output: the newest, or with
    `--revise-within` schema 2, since schema 3's continued visits are not revised yet.

    >>> new_columns(), new_columns("3d")
    (3, 2)
    """
    return NEWEST_COLUMNS if revise_within is None else 2


def new_mapping() -> EventMapping:
    """The default mapping of a new run: a checkpoint or output it creates carries every
    `sessions` column (the newest schema); a resumed one keeps its recorded schema."""
    return EventMapping(session_columns=NEWEST_COLUMNS)


DEFAULT_RECORD = {**EventMapping().record(), **DEFAULT_CONTENT_RECORD, "session_columns": "1"}
"""What a checkpoint recorded before mappings existed means: the default mapping, and the
`sessions` columns of that time (schema 1)."""
