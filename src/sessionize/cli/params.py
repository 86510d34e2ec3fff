"""The command line's parameter types (durations, hours, counts) and the session rule flags."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import TypeVar

import click

from sessionize.config import DEFAULT_ATTRIBUTION_LOOKBACK_US, SessionRules, parse_duration
from sessionize.errors import ConfigError

F = TypeVar("F", bound=Callable[..., object])


class Duration(click.ParamType):
    name = "duration"

    def convert(self, value, param, ctx):
        if isinstance(value, int):
            return value
        try:
            return parse_duration(value)
        except ConfigError as exc:
            self.fail(str(exc), param, ctx)


class Hour(click.ParamType):
    """An hour like 2026-11-01T09 (UTC)."""

    name = "hour"

    def convert(self, value, param, ctx):
        if isinstance(value, datetime):
            return value
        for fmt in ("%Y-%m-%dT%H", "%Y-%m-%dT%H:%M", "%Y-%m-%d"):
            try:
                return datetime.strptime(value, fmt).replace(tzinfo=UTC)
            except ValueError:
                pass
        self.fail(f"'{value}' is not an hour; write it like 2026-11-01T09", param, ctx)


DURATION = Duration()
HOUR = Hour()


_RULE_OPTIONS = (
    ("--gap", DURATION, "10m", "Inactivity that ends a session."),
    ("--lateness", DURATION, "10m", "Allowed lateness: the watermark trails the max event time."),
    ("--close-actions", str, "browser_close", "Comma-separated actions that end a session."),
    ("--max-duration", DURATION, None, "A session lasts less than this (e.g. 24h; unset: no cap)."),
    ("--timezone", str, "UTC", "IANA zone of session_date and of --split-at-midnight."),
    (
        "--user-ttl",
        DURATION,
        "400d",
        "With --anonymous-field: an identity is forgotten this long after its last event.",
    ),
    (
        "--attribution-lookback",
        DURATION,
        "90d",
        "With --anonymous-field: how far back a direct session looks for its user's last "
        "non-direct source.",
    ),
    (
        "--revise-within",
        DURATION,
        None,
        "Late events this far behind the watermark revise the sessions they join: written "
        "to session_revisions on Parquet, keyed by session_id on Kafka, upserted into "
        "sessions on Delta, PostgreSQL and Iceberg (unset: they go to late_events).",
    ),
)


def count_option(name: str, least: int, help: str, **more):
    """A flag of a whole number of at least `least`, None when left out."""
    return click.option(name, type=click.IntRange(least), default=None, help=help, **more)


def rules_options(f):
    """--gap, --lateness, --close-actions, --max-duration, --timezone, --user-ttl,
    --attribution-lookback, --revise-within, --split-at-midnight:
    the session rules (docs/design.md, "Semantics")."""
    f = click.option(
        "--split-at-midnight",
        is_flag=True,
        help="End sessions at midnight in --timezone.",
    )(f)
    for name, kind, default, text in reversed(_RULE_OPTIONS):
        f = click.option(name, type=kind, default=default, show_default=True, help=text)(f)
    return f


def make_rules(
    gap: int,
    lateness: int,
    close_actions: str,
    max_duration: int | None = None,
    timezone: str = "UTC",
    split_at_midnight: bool = False,
    user_ttl: int | None = None,
    attribution_lookback: int = DEFAULT_ATTRIBUTION_LOOKBACK_US,
    revise_within: int | None = None,
) -> SessionRules:
    actions = tuple(a.strip() for a in close_actions.split(",") if a.strip())
    return SessionRules(
        gap_us=gap,
        lateness_us=lateness,
        close_actions=actions,
        max_duration_us=max_duration,
        timezone=timezone.strip(),
        split_at_midnight=split_at_midnight,
        user_ttl_us=user_ttl,
        attribution_lookback_us=attribution_lookback,
        revise_within_us=revise_within,
    )


def metrics_options(f):
    """--metrics-port and --metrics-host: the stream's Prometheus endpoint."""
    f = click.option(
        "--metrics-host",
        default="127.0.0.1",
        show_default=True,
        metavar="HOST",
        help="The address the metrics listen on: 0.0.0.0 for every interface (a Prometheus "
        "server on another machine).",
    )(f)
    return click.option(
        "--metrics-port",
        type=click.IntRange(0, 65535),
        metavar="PORT",
        help="Serve Prometheus metrics on http://HOST:PORT/metrics while the stream runs "
        "(0: any free port); the address is printed first.",
    )(f)


def check_metrics_host(port: int | None) -> None:
    """--metrics-host given without --metrics-port would match nothing: said."""
    source = click.get_current_context().get_parameter_source("metrics_host")
    if port is None and source is click.core.ParameterSource.COMMANDLINE:
        raise click.UsageError("--metrics-host goes with --metrics-port")


def job_output_options(checkpoint_help: str) -> Callable[[F], F]:
    """--output (required) and --checkpoint: the flags of a command that reads or keeps up
    the output of a stream or batch job (`report`, `maintain`)."""

    def add(f: F) -> F:
        f = click.option("--checkpoint", help=checkpoint_help)(f)
        return click.option("--output", required=True, help="Output of a stream or batch job.")(f)

    return add
