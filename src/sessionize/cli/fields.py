"""The field mapping flags of `stream` and `batch` (docs/design.md, "Events"), and which
recorded flags a command line gave."""

from __future__ import annotations

import click

from sessionize.mapping import TIME_FORMATS, USER_TYPES, EventMapping, format_keep, parse_keep

_DEFAULT = EventMapping()
_OPTIONS = (
    ("--user-field", {"default": _DEFAULT.user, "help": "Dotted path of the user id."}),
    ("--time-field", {"default": _DEFAULT.time, "help": "Dotted path of the event time."}),
    ("--page-field", {"default": _DEFAULT.page, "help": "Dotted path of the page."}),
    ("--action-field", {
        "default": _DEFAULT.action, "help": "Dotted path of the action (absent: view).",
    }),
    ("--time-format", {
        "type": click.Choice(TIME_FORMATS), "default": _DEFAULT.time_format,
        "help": "ISO-8601 strings, or epoch milliseconds / seconds as JSON numbers.",
    }),
    ("--user-type", {
        "type": click.Choice(USER_TYPES), "default": _DEFAULT.user_type,
        "help": "User ids are JSON integers (64-bit) or strings (1-256 UTF-8 bytes).",
    }),
    ("--keep-fields", {
        "metavar": "NAME=PATH,...", "default": format_keep(_DEFAULT.keep),
        "help": "Attributes of a session's first event that the session carries.",
    }),
    ("--split-on-change", {
        "metavar": "PATH", "default": None,
        "help": "Start a new session when the value at PATH changes (e.g. a campaign).",
    }),
    ("--gap-field", {
        "metavar": "PATH", "default": None,
        "help": "Each event's own gap in seconds at PATH (missing: --gap).",
    }),
)  # fmt: skip
_NAMES = ("user_field", "time_field", "page_field", "action_field", "time_format", "user_type",
          "keep_fields", "split_on_change", "gap_field")  # fmt: skip


def mapping_options(f):
    """The field mapping flags; all are part of the state, like --gap."""
    for name, settings in reversed(_OPTIONS):
        f = click.option(name, show_default=True, **settings)(f)
    return f


def pop_mapping(params: dict) -> EventMapping:
    """The EventMapping of the flags, removed from a command's keyword arguments."""
    v = {name: params.pop(name) for name in _NAMES}
    return EventMapping(
        user=v["user_field"].strip(),
        time=v["time_field"].strip(),
        page=v["page_field"].strip(),
        action=v["action_field"].strip(),
        time_format=v["time_format"],
        user_type=v["user_type"],
        keep=parse_keep(v["keep_fields"]),
        change=(v["split_on_change"] or "").strip() or None,
        gap=(v["gap_field"] or "").strip() or None,
    )


def given_settings() -> frozenset[str]:
    """The recorded settings (`--gap`, `--state`, the mapping, ...) given on the command
    line, even at their default value: the others take a checkpoint's or state's record."""
    from click.core import ParameterSource

    from sessionize.api.sessionizer import RECORDED

    ctx = click.get_current_context()
    defaults = (None, ParameterSource.DEFAULT, ParameterSource.DEFAULT_MAP)
    return frozenset(n for n in RECORDED if ctx.get_parameter_source(n) not in defaults)
