"""What the backends share besides the base class: URI query options and one-line error
text."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any
from urllib.parse import parse_qsl, urlencode

from sessionize.errors import ConfigError
from sessionize.redaction import redact_uri


def read_query(
    query: str, known: Sequence[str], shown_uri: str, *, keep_unknown: bool = False
) -> tuple[dict[str, str], list[tuple[str, str]]]:
    """(the known options of a URI's query string, the unknown ones in order). An unknown
    option is a ConfigError unless `keep_unknown` (options of another layer's URI)."""
    shown_uri = redact_uri(shown_uri)
    try:
        pairs = parse_qsl(query, keep_blank_values=True, strict_parsing=bool(query))
    except ValueError as e:
        raise ConfigError(
            f"state store URI {shown_uri!r} has a bad query string: {redact_uri(str(e))}"
        ) from None
    options: dict[str, str] = {}
    unknown: list[tuple[str, str]] = []
    for name, value in pairs:
        if name in known:
            options[name] = value
        elif keep_unknown:
            unknown.append((name, value))
        else:
            raise ConfigError(
                f"unknown option '{name}' in state store URI {shown_uri!r};"
                f" known: {', '.join(known)}"
            )
    return options, unknown


def typed_options(options: dict[str, str], defaults: dict[str, Any], uri: str) -> dict[str, Any]:
    """`options` converted to the types of their defaults (a bad one named in one line,
    with `uri` redacted)."""
    out = {}
    for name, value in options.items():
        try:
            out[name] = type(defaults[name])(value)
        except ValueError:
            raise ConfigError(
                f"option {name}={value!r} in {redact_uri(uri)!r} is not valid"
            ) from None
    return out


def query_of(owner: object, defaults: dict[str, Any]) -> str:
    """`?name=value&...` of the attributes of `owner` that differ from `defaults`, or ''."""
    changed = {
        name: getattr(owner, name)
        for name, default in defaults.items()
        if getattr(owner, name) != default
    }
    return f"?{urlencode(changed)}" if changed else ""


def one_line(error: BaseException, secret: str | None = None) -> str:
    """The text of `error` on one line, without `secret` or any URI's password; a
    PostgreSQL login refused for its password says where the password comes from."""
    text = " ".join(str(error).split()) or type(error).__name__
    if "password authentication failed" in text or "no password supplied" in text:
        text += (
            " (the password comes from the URI, percent-encoded, or else from PGPASSWORD "
            "or ~/.pgpass)"
        )
    return redact_uri(text, secret)
