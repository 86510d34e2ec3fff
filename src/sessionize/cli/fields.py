"""The field mapping flags of `stream` and `batch` (docs/design.md, "Events"), and which
recorded flags a command line gave."""

from __future__ import annotations

from typing import Any

import click

from sessionize.api.arguments import CONTENT_ARGS, session_content
from sessionize.cli.params import DURATION
from sessionize.content import BOT_MODES
from sessionize.mapping import (
    TIME_FORMATS,
    USER_TYPES,
    EventMapping,
    format_keep,
    new_columns,
    parse_keep,
    split_keep,
)

_DEFAULT = EventMapping()
_OPTIONS = (
    ("--user-field", {"default": _DEFAULT.user, "help": "Dotted path of the user id."}),
    (
        "--anonymous-field",
        {
            "metavar": "PATH",
            "default": None,
            "help": "The anonymous id (cookie, device): sessions per anonymous id, stitched "
            "to the user id (then optional).",
        },
    ),
    ("--time-field", {"default": _DEFAULT.time, "help": "Dotted path of the event time."}),
    ("--page-field", {"default": _DEFAULT.page, "help": "Dotted path of the page."}),
    (
        "--action-field",
        {
            "default": _DEFAULT.action,
            "help": "Dotted path of the action (absent: view).",
        },
    ),
    (
        "--time-format",
        {
            "type": click.Choice(TIME_FORMATS),
            "default": _DEFAULT.time_format,
            "help": "ISO-8601 strings, or epoch milliseconds / seconds as JSON numbers.",
        },
    ),
    (
        "--user-type",
        {
            "type": click.Choice(USER_TYPES),
            "default": _DEFAULT.user_type,
            "help": "User ids are JSON integers (64-bit) or strings (1-256 UTF-8 bytes).",
        },
    ),
    (
        "--keep-fields",
        {
            "metavar": "NAME=PATH,...",
            "default": format_keep(_DEFAULT.keep),
            "help": "Attributes of a session's first event that the session carries "
            "(last:NAME=PATH: the last non-null value).",
        },
    ),
    (
        "--split-on-change",
        {
            "metavar": "PATH",
            "default": None,
            "help": "Start a new session when the value at PATH changes (e.g. a campaign).",
        },
    ),
    (
        "--gap-field",
        {
            "metavar": "PATH",
            "default": None,
            "help": "Each event's own gap in seconds at PATH (missing: --gap).",
        },
    ),
    (
        "--url-field",
        {
            "metavar": "PATH",
            "default": None,
            "help": "The page URL with its query string (utm_*, gclid).",
        },
    ),
    (
        "--referrer-field",
        {"metavar": "PATH", "default": None, "help": "The referrer (referrer_host, channel)."},
    ),
    (
        "--user-agent-field",
        {"metavar": "PATH", "default": None, "help": "The user agent (is_bot, --bots)."},
    ),
    (
        "--site-hosts",
        {
            "metavar": "HOST,...",
            "default": None,
            "help": "The site's own hosts (default: the landing URL's).",
        },
    ),
    (
        "--channel-rules",
        {
            "metavar": "FILE",
            "default": None,
            "help": "A channel rules file replacing the default table.",
        },
    ),
    (
        "--page-view-actions",
        {"metavar": "ACTION,...", "default": "view", "help": "Actions counted in page_view_count."},
    ),
    (
        "--max-page-time",
        {
            "type": DURATION,
            "default": "30m",
            "help": "The longest time one event counts in engaged_time_ms.",
        },
    ),
    (
        "--ping-action",
        {
            "metavar": "ACTION",
            "default": None,
            "help": "Heartbeat action: engaged time from pings.",
        },
    ),
    ("--heartbeat", {"type": DURATION, "default": "10s", "help": "The pings' period."}),
    (
        "--min-visit",
        {"type": DURATION, "default": "5s", "help": "Engaged time a session with a ping adds."},
    ),
    (
        "--engaged-after",
        {"type": DURATION, "default": "10s", "help": "A session this long is engaged."},
    ),
    (
        "--conversion",
        {
            "metavar": "NAME=ACTION[,value=PATH]",
            "multiple": True,
            "help": "A conversion (repeatable): NAME_count, NAME_value, NAME_first_at.",
        },
    ),
    (
        "--bots",
        {
            "type": click.Choice(BOT_MODES),
            "default": "flag",
            "help": "flag: sessions carry is_bot; drop: bots' events are dropped.",
        },
    ),
)
# The flags of the mapping's dotted paths, by EventMapping field: the required ones,
# then those that are off when empty.
_PATHS = {
    "user": "user_field",
    "time": "time_field",
    "page": "page_field",
    "action": "action_field",
}
_OPTIONAL_PATHS = {
    "anonymous": "anonymous_field",
    "change": "split_on_change",
    "gap": "gap_field",
    "url": "url_field",
    "referrer": "referrer_field",
    "user_agent": "user_agent_field",
}


def mapping_options(f):
    """The field mapping flags; all are part of the state, like --gap."""
    for name, settings in reversed(_OPTIONS):
        f = click.option(name, show_default=True, **settings)(f)
    return f


def pop_mapping(params: dict) -> EventMapping:
    """The EventMapping of the flags, removed from a command's keyword arguments."""
    paths: dict[str, Any] = {f: params.pop(flag).strip() for f, flag in _PATHS.items()}
    optional: dict[str, Any] = {
        f: (params.pop(flag) or "").strip() or None for f, flag in _OPTIONAL_PATHS.items()
    }
    keep, last = split_keep(parse_keep(params.pop("keep_fields")))
    content = session_content(
        {"conversions": params.pop("conversion")}
        | {name: params.pop(name) for name in CONTENT_ARGS if name != "conversions"}
    )
    return EventMapping(
        **paths,
        **optional,
        time_format=params.pop("time_format"),
        user_type=params.pop("user_type"),
        keep=keep,
        last=last,
        session_columns=new_columns(params.get("revise_within")),
        content=content,
    )


def given_settings(extra: tuple[str, ...] = ()) -> frozenset[str]:
    """The recorded settings (`--gap`, `--state`, the mapping, ...; and a command's `extra`
    ones) given on the command line, even at their default value: the others take a
    checkpoint's or state's record."""
    from click.core import ParameterSource

    from sessionize.api.sessionizer import RECORDED

    ctx = click.get_current_context()
    defaults = (None, ParameterSource.DEFAULT, ParameterSource.DEFAULT_MAP)
    names = (*RECORDED, *extra)
    return frozenset(n for n in names if ctx.get_parameter_source(n) not in defaults)
