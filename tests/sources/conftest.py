"""Real Kafka and Kinesis servers for the source tests, started by the project's scripts.

The first test that needs a server runs `services/NAME.sh install` and `start` (both no-ops when
done already) and reads `services/NAME.sh env`; a failure fails the tests with the script's
own message, which says what is missing.
"""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def _service_env(name: str) -> dict[str, str]:
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
    """The test server's endpoint. The streams the session's tests create are deleted at its
    end: the server keeps them across restarts, and its account allows 200 shards."""
    env = _service_env("kinesis")
    for key in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_DEFAULT_REGION"):
        os.environ.setdefault(key, env[key])
    endpoint = env["SESSIONIZE_TEST_KINESIS"]
    client = _kinesis(endpoint)
    before = _stream_names(client)
    yield endpoint
    for name in sorted(_stream_names(client) - before):
        client.delete_stream(StreamName=name, EnforceConsumerDeletion=True)


def _kinesis(endpoint: str):
    import boto3

    return boto3.client("kinesis", endpoint_url=endpoint, region_name="us-east-1")


def _stream_names(client) -> set[str]:
    pages = client.get_paginator("list_streams").paginate()
    return {name for page in pages for name in page["StreamNames"]}


@pytest.fixture(scope="session")
def kinesis_client(kinesis_endpoint):
    return _kinesis(kinesis_endpoint)
