"""The S3 API server of the tests: services/s3.sh (moto), started here if it is not running
(its port: SESSIONIZE_S3_PORT); each test gets its own bucket."""

from __future__ import annotations

import os
import re
import subprocess
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
S3_SCRIPT = str(REPO / "services" / "s3.sh")


def _script(action: str) -> str:
    done = subprocess.run([S3_SCRIPT, action], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, f"s3.sh {action}: {done.stderr[-2000:]}"
    return done.stdout


@contextmanager
def s3_stopped() -> Iterator[None]:
    """The S3 API server down for the block, started again however the block ends."""
    _script("stop")
    try:
        yield
    finally:
        _script("start")


@pytest.fixture(scope="session")
def s3_endpoint() -> str:
    """host:port of the S3 API server; its credentials are put into the environment. A
    server already named by SESSIONIZE_TEST_S3 (`source .services/env.sh` of a checkout that
    runs the services) is used as it is, as tests/state/services_fixtures.py does."""
    if "SESSIONIZE_TEST_S3" in os.environ:
        return os.environ["SESSIONIZE_TEST_S3"].removeprefix("http://")
    _script("install")
    _script("start")
    for line in _script("env").splitlines():
        name, value = re.match(r"export (\w+)=(\S+)", line).groups()
        os.environ.setdefault(name, value)
    return os.environ["SESSIONIZE_TEST_S3"].removeprefix("http://")


def s3_client(endpoint: str):
    import boto3

    return boto3.client("s3", endpoint_url=f"http://{endpoint}")


@pytest.fixture
def bucket_uri(s3_endpoint) -> str:
    name = f"t-{uuid.uuid4().hex[:12]}"
    s3_client(s3_endpoint).create_bucket(Bucket=name)
    return f"s3://{name}/out?endpoint_override={s3_endpoint}&scheme=http"
