"""End-to-end tests run once per state backend: `files` and the three remote
ones on the servers of services/NAME.sh.

A test takes the `state` fixture and passes `state(name)` as the `--state` of each job it
runs: the same name gives the same state within the test, every test gets namespaces of its
own (a PostgreSQL schema, a Redis key prefix, a DynamoDB table prefix), dropped afterwards.
`files` keeps its default place, under the checkpoint or the batch output.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Callable, Iterator

import pytest

from tests.state.services_fixtures import service_env

STATE_BACKENDS = ("files", "postgres", "redis", "dynamodb")


def _postgres(tag: str) -> tuple[str, Callable[[], None]]:
    import psycopg

    uri = service_env("postgres")["SESSIONIZE_TEST_POSTGRES"]

    def drop() -> None:
        with psycopg.connect(uri, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{tag}" CASCADE')

    return f"{uri}?schema={tag}", drop


def _redis(tag: str) -> tuple[str, Callable[[], None]]:
    import redis

    uri = service_env("redis")["SESSIONIZE_TEST_REDIS"]

    def drop() -> None:
        with redis.Redis.from_url(uri) as client:
            keys = list(client.scan_iter(f"{tag}:*", count=1000))
            if keys:
                client.delete(*keys)

    return f"{uri}?prefix={tag}", drop


def _dynamodb(tag: str) -> tuple[str, Callable[[], None]]:
    import boto3

    endpoint = service_env("dynamodb")["SESSIONIZE_TEST_DYNAMODB"]

    def drop() -> None:
        client = boto3.client("dynamodb", endpoint_url=endpoint, region_name="us-east-1")
        with contextlib.suppress(client.exceptions.ResourceNotFoundException):
            client.delete_table(TableName=f"{tag}_state")

    return f"dynamodb://{tag}?endpoint={endpoint}&region=us-east-1", drop


_REMOTE = {"postgres": _postgres, "redis": _redis, "dynamodb": _dynamodb}


@pytest.fixture(params=STATE_BACKENDS)
def state(request) -> Iterator[Callable[[str], str]]:
    """state(name) -> the `--state` of the job called `name`, on this run's backend."""
    backend = request.param
    uris: dict[str, str] = {}
    drops: list[Callable[[], None]] = []

    def uri(name: str = "main") -> str:
        if backend == "files":
            return "files"
        if name not in uris:
            uris[name], drop = _REMOTE[backend](f"t{uuid.uuid4().hex[:12]}")
            drops.append(drop)
        return uris[name]

    yield uri
    for drop in drops:
        drop()
