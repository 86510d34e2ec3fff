"""How the API reads its arguments: durations, triggers and the state's home."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sessionize.config import DEFAULT_ATTRIBUTION_LOOKBACK_US, SessionRules
from sessionize.content import (
    Conversion,
    SessionContent,
    parse_conversion,
    read_rules_file,
    split_list,
)
from sessionize.durations import duration_us
from sessionize.errors import ConfigError
from sessionize.fs import absolute_local
from sessionize.logic.channel import parse_rules
from sessionize.mapping import DEFAULT_KEEP, EventMapping, new_columns, split_keep

# The arguments of what a session carries (`session_content`).
CONTENT_ARGS = (
    "site_hosts",
    "channel_rules",
    "page_view_actions",
    "max_page_time",
    "ping_action",
    "heartbeat",
    "min_visit",
    "engaged_after",
    "conversions",
    "bots",
)


def parse_trigger(text: str) -> dict[str, object]:
    """`available-now` or `processing-time=30s` -> DataStreamWriter.trigger kwargs."""
    if text == "available-now":
        return {"availableNow": True}
    if text.startswith("processing-time="):
        seconds = duration_us(text.removeprefix("processing-time="), "--trigger") / 1e6
        return {"processingTime": f"{seconds:g} seconds"}
    raise ConfigError(f"--trigger '{text}': use available-now or processing-time=DURATION")


def state_uri(state: str, home: str) -> str:
    """`files` keeps the store at `home` (under the checkpoint, or the batch output's
    `_state`); `files:PATH` and server URIs are used as given."""
    return f"files:{home}" if state == "files" else state


def progress_path(explicit: str | None, root: str, name: str) -> str | None:
    """Where the progress log goes: `explicit`, else `root/name` when `root` is a local
    path (the log is appended to, which object stores cannot do)."""
    if explicit:
        return explicit
    if "://" in root and not root.startswith("file://"):
        return None
    return f"{root.removeprefix('file://').rstrip('/')}/{name}"


def session_content(args: Mapping[str, Any]) -> SessionContent:
    """The SessionContent of Sessionizer's arguments named in CONTENT_ARGS (None or
    missing: the default), checked: a `--channel-rules` file is read and its rules parsed
    here, so that a bad line is refused at start, naming it."""
    default = SessionContent()
    channel_rules = args.get("channel_rules")
    rules, path = None, ""
    if channel_rules:
        path = absolute_local(channel_rules)
        rules = read_rules_file(path)
        parse_rules(rules, f"--channel-rules {channel_rules}")

    def listed(value, fallback: tuple[str, ...]) -> tuple[str, ...]:
        if value is None:
            return fallback
        return split_list(value) if isinstance(value, str) else split_list(",".join(value))

    def us(value, name: str, fallback: int) -> int:
        return fallback if value is None else duration_us(value, name)

    return SessionContent(
        site_hosts=listed(args.get("site_hosts"), ()),
        channel_rules=rules,
        channel_rules_path=path,
        page_view_actions=listed(args.get("page_view_actions"), default.page_view_actions),
        max_page_time_us=us(args.get("max_page_time"), "max_page_time", default.max_page_time_us),
        ping_action=(args.get("ping_action") or "").strip() or None,
        heartbeat_us=us(args.get("heartbeat"), "heartbeat", default.heartbeat_us),
        min_visit_us=us(args.get("min_visit"), "min_visit", default.min_visit_us),
        engaged_after_us=us(args.get("engaged_after"), "engaged_after", default.engaged_after_us),
        conversions=tuple(
            c if isinstance(c, Conversion) else parse_conversion(c)
            for c in args.get("conversions") or ()
        ),
        bots=args.get("bots") or default.bots,
    )


def session_rules(args: Mapping[str, Any]) -> SessionRules:
    """The SessionRules of Sessionizer's arguments (None: the default)."""
    close_actions = args.get("close_actions")
    close_actions = ("browser_close",) if close_actions is None else close_actions
    if isinstance(close_actions, str):
        close_actions = close_actions.split(",")
    max_duration = args.get("max_duration")
    user_ttl = args.get("user_ttl")
    if user_ttl is None and args.get("anonymous_field"):
        user_ttl = "400d"  # the default applies to identities only
    return SessionRules(
        gap_us=duration_us("10m" if args.get("gap") is None else args["gap"], "gap"),
        lateness_us=duration_us(
            "10m" if args.get("lateness") is None else args["lateness"], "lateness"
        ),
        close_actions=tuple(a.strip() for a in close_actions if a.strip()),
        max_duration_us=None if max_duration is None else duration_us(max_duration, "max_duration"),
        timezone=args.get("timezone") or "UTC",
        split_at_midnight=bool(args.get("split_at_midnight")),
        user_ttl_us=None if user_ttl is None else duration_us(user_ttl, "user_ttl"),
        attribution_lookback_us=DEFAULT_ATTRIBUTION_LOOKBACK_US
        if args.get("attribution_lookback") is None
        else duration_us(args["attribution_lookback"], "attribution_lookback"),
        revise_within_us=None
        if args.get("revise_within") is None
        else duration_us(args["revise_within"], "revise_within"),
    )


def event_mapping(args: Mapping[str, Any]) -> EventMapping:
    """The EventMapping of Sessionizer's arguments (None: the default), with the `sessions`
    columns of a new checkpoint (schema 2; a resumed one takes its recorded schema)."""
    default = EventMapping()
    keep = args.get("keep")
    pairs, last = split_keep(DEFAULT_KEEP if keep is None else tuple(dict(keep).items()))
    return EventMapping(
        user=args.get("user") or default.user,
        time=args.get("time") or default.time,
        page=args.get("page") or default.page,
        action=args.get("action") or default.action,
        time_format=args.get("time_format") or default.time_format,
        user_type=args.get("user_type") or default.user_type,
        keep=tuple(pairs),
        change=args.get("split_on_change") or None,
        gap=args.get("gap_field") or None,
        url=args.get("url") or None,
        referrer=args.get("referrer") or None,
        user_agent=args.get("user_agent") or None,
        last=last,
        anonymous=args.get("anonymous_field") or None,
        session_columns=new_columns(args.get("revise_within")),
        content=session_content(args),
    )
