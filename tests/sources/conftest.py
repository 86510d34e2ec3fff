"""Real Kafka and Kinesis servers for the source tests, started by the project's scripts.

A server named by `SESSIONIZE_TEST_KAFKA` / `SESSIONIZE_TEST_KINESIS` (services/env.sh) is
used as it runs. Otherwise the first test that needs a server runs `services/NAME.sh install`
and `start` (both no-ops when done already) and reads `services/NAME.sh env`; a failure fails
the tests with the script's own message, which says what is missing.
"""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.sources.helpers import unique

REPO = Path(__file__).resolve().parents[2]


def _service_env(name: str) -> dict[str, str]:
    variable = f"SESSIONIZE_TEST_{name.upper()}"
    if variable in os.environ:  # a server already running (services/env.sh), maybe shared
        keys = (variable, "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_DEFAULT_REGION")
        return {k: os.environ[k] for k in keys if k in os.environ}
    script = REPO / "services" / f"{name}.sh"
    for action in ("install", "start"):
        done = subprocess.run(
            ["bash", str(script), action], capture_output=True, text=True, timeout=900
        )
        if done.returncode != 0:
            pytest.fail(
                f"services/{name}.sh {action} failed (exit {done.returncode}); the tests need a "
                f"real {name} server. Its output:\n{done.stdout}\n{done.stderr}\n"
                f"Fix that, then run: services/{name}.sh install && services/{name}.sh start",
                pytrace=False,
            )
    out = subprocess.run(
        ["bash", str(script), "env"], capture_output=True, text=True, check=True
    ).stdout
    return dict(re.findall(r"(\w+)=(\S+)", out))


@pytest.fixture(scope="session")
def kafka_bootstrap() -> str:
    """HOST:PORT of the test broker."""
    uri = _service_env("kafka")["SESSIONIZE_TEST_KAFKA"]
    return uri.removeprefix("kafka://")


@pytest.fixture(scope="session")
def kinesis_endpoint() -> Iterator[str]:
    """The test server's endpoint. The server keeps streams across restarts and its account
    allows 200 shards, and other test sessions share it: every test deletes the streams it
    creates (`kinesis_names`); at the start, streams left by a session that died before
    deleting them (named after a process of this host that no longer runs: the server
    listens on 127.0.0.1) are deleted, and at the end those of this session, never what
    another session created meanwhile."""
    env = _service_env("kinesis")
    for key in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_DEFAULT_REGION"):
        os.environ.setdefault(key, env[key])
    endpoint = env["SESSIONIZE_TEST_KINESIS"]
    client = _kinesis(endpoint)
    delete_streams(client, left_by_dead_sessions(client))
    yield endpoint
    delete_streams(client, [n for n in _stream_names(client) if _made_by(n) == os.getpid()])


@pytest.fixture
def kinesis_names(kinesis_endpoint) -> Iterator[Callable[[str], str]]:
    """`new(prefix)`: a unique stream name (`helpers.unique`); the streams so named are
    deleted when the test ends, whether it passed or not."""
    with made_streams(_kinesis(kinesis_endpoint)) as new:
        yield new


@contextlib.contextmanager
def made_streams(client) -> Iterator[Callable[[str], str]]:
    """`new(prefix)` names a stream; every stream so named is deleted on the way out."""
    made: list[str] = []

    def new(prefix: str) -> str:
        made.append(unique(prefix))
        return made[-1]

    try:
        yield new
    finally:
        delete_streams(client, made)


def left_by_dead_sessions(client) -> list[str]:
    """The streams named by a process of this host that no longer runs."""
    return [n for n in _stream_names(client) if _made_by_dead_process(n)]


def delete_streams(client, names: list[str]) -> None:
    """Delete `names` (those that exist; one already gone is fine)."""
    for name in names:
        with contextlib.suppress(client.exceptions.ResourceNotFoundException):
            client.delete_stream(StreamName=name, EnforceConsumerDeletion=True)


def _made_by(name: str) -> int | None:
    """The process that named the stream (`unique`: PREFIX-PID-N-HEX), or None."""
    found = re.search(r"-(\d+)-\d+-[0-9a-f]{6}$", name)
    return int(found.group(1)) if found else None


def _made_by_dead_process(name: str) -> bool:
    pid = _made_by(name)
    if pid is None:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:  # another user's live process
        return False
    return False


def _kinesis(endpoint: str):
    import boto3

    return boto3.client("kinesis", endpoint_url=endpoint, region_name="us-east-1")


def _stream_names(client) -> set[str]:
    pages = client.get_paginator("list_streams").paginate()
    return {name for page in pages for name in page["StreamNames"]}


@pytest.fixture(scope="session")
def kinesis_client(kinesis_endpoint):
    return _kinesis(kinesis_endpoint)
