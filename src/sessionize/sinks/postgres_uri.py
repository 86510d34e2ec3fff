"""Whether `--output` names PostgreSQL tables: kept apart from the sink so that every
command can ask without the `postgres` extra (psycopg) installed."""

from __future__ import annotations

SCHEMES = ("postgresql://", "postgres://")


def is_postgres(output: str) -> bool:
    """Whether `output` is a PostgreSQL URI.

    >>> is_postgres("postgresql://me@db/analytics?schema=web"), is_postgres("out/")
    (True, False)
    """
    return output.lower().startswith(SCHEMES)
