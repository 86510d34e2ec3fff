"""A PostgreSQL output's URI as a connection target, and psycopg's errors as one line: what
the PostgreSQL sink, its records and its move share.

URI: `postgresql://USER[:PASSWORD]@HOST[:PORT]/DB?schema=analytics` (prefer PGPASSWORD or
~/.pgpass to a password in the URI: a password is never logged, shown in an error or
recorded). Options: `schema` (created if missing; default `sessionize`) and the libpq
options `connect_timeout` (default 5 s), `sslmode`, `sslrootcert`, `sslcert`, `sslkey`,
`application_name`.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from urllib.parse import unquote, urlencode, urlsplit

import psycopg

from sessionize.errors import ConfigError, SinkError
from sessionize.fs import postgres_location
from sessionize.redaction import check_userinfo, redact_uri
from sessionize.state.backends.common import one_line, read_query
from sessionize.state.backends.postgres import LIBPQ_OPTIONS
from sessionize.state.backends.postgres_pool import ROLLED_BACK

DEFAULT_SCHEMA = "sessionize"
# A schema name PostgreSQL takes as it is: unquoted-style, at most 63 bytes (longer names
# are cut), `pg_` being reserved for the system's schemas.
_SCHEMA_NAME = re.compile(r"[a-z_][a-z0-9_]{0,62}")
_OPTIONS = ("schema", *LIBPQ_OPTIONS)


@dataclass(frozen=True)
class Target:
    """A parsed output URI: what to connect to, and how to name it without secrets."""

    conninfo: str
    schema: str
    password: str | None
    shown: str  # postgresql://user@host:port/db?schema=S, for messages


def parse(uri: str) -> Target:
    """Raises ConfigError (one line, no password) for a URI that names no database."""
    shown_uri = redact_uri(uri)
    check_userinfo(uri, "--output")
    try:
        parts = urlsplit(uri)
        parts.port  # noqa: B018 - raises on a bad port
    except ValueError as e:
        raise ConfigError(f"--output {shown_uri}: not a valid URI ({redact_uri(str(e))})") from None
    if not parts.hostname or not parts.path.strip("/"):
        raise ConfigError(
            f"--output {shown_uri}: give a host and a database: "
            "postgresql://USER@HOST[:PORT]/DB?schema=NAME"
        )
    given, _ = read_query(parts.query, _OPTIONS, shown_uri)
    schema = given.pop("schema", DEFAULT_SCHEMA)
    if not _SCHEMA_NAME.fullmatch(schema) or schema.startswith("pg_"):
        raise ConfigError(
            f"--output {shown_uri}: schema={schema[:70]!r}: use lower-case ASCII letters, "
            "digits and '_', starting with a letter or '_', at most 63, not starting pg_"
        )
    password = unquote(parts.password) if parts.password is not None else None
    if password == "***":  # a recorded location (passwords are never recorded)
        password = None
        uri = uri.replace(":***@", "@", 1)
    base = uri.split("?", 1)[0]
    conninfo = f"{base}?{urlencode({'connect_timeout': '5', **given})}"
    return Target(conninfo, schema, password, postgres_location(uri))


_CONNECTION_LOST = (psycopg.OperationalError, psycopg.InterfaceError)
REPUBLISHED = " The batch is published again when the job is restarted"


@contextmanager
def connection_errors(what: str, target: Target, after_lost: str = "") -> Iterator[None]:
    """psycopg's errors as one SinkError line naming `what`, without the password; a lost
    connection asks whether the server is reachable, then says `after_lost`."""
    try:
        yield
    except psycopg.Error as e:
        detail = one_line(e, target.password)[:300]
        lost = isinstance(e, _CONNECTION_LOST) and not isinstance(e, ROLLED_BACK)
        advice = f"; is the server reachable?{after_lost}" if lost else ""
        raise SinkError(f"{what} failed: {detail}{advice}") from e
