"""The `postgresql` backend: the contract suite on a real server (services/postgres.sh), plus
its layout, batching bounds, failure handling and URI rules."""

from __future__ import annotations

import uuid

import psycopg
import pytest

from sessionize.state.backends.postgres import PostgresBackend

from .contract import StateBackendContract
from .services_fixtures import postgres_uri  # noqa: F401 - fixture


def _drop(uri: str, schema: str) -> None:
    with psycopg.connect(uri, autocommit=True) as conn:
        conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


@pytest.fixture
def pg_schema(postgres_uri):  # noqa: F811
    schema = f"t_{uuid.uuid4().hex[:12]}"
    yield schema
    _drop(postgres_uri, schema)


class TestPostgresContract(StateBackendContract):
    @pytest.fixture
    def make_backend(self, postgres_uri, pg_schema):  # noqa: F811
        def make(spec=None, cache=True):
            return PostgresBackend(f"{postgres_uri}?schema={pg_schema}", spec=spec)

        return make
