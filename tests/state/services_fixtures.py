"""The local PostgreSQL, Redis and DynamoDB servers for the state tests, through the project's
own scripts (services/NAME.sh).

A test module imports the fixture it needs (`from .services_fixtures import postgres_uri`).
The session fixture starts the service with `services/start.sh NAME` when it is not running
(a no-op when it is), and reads its address from `services/NAME.sh env`. A variable already
in the environment (SESSIONIZE_TEST_POSTGRES, ...) that names another server than the
scripts' points the tests at it; then the tests that stop and start the server are skipped.
If the service cannot be started, the tests that need it fail with the script's error.
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SERVICES = REPO / "services"


def _export_aws_settings() -> None:
    """Put the dummy AWS credentials and region of services/dynamodb.sh into the environment
    when this module is imported (at collection, before any fixture starts Spark), so that
    the Python workers of a shared SparkSession inherit them too."""
    env = REPO / ".services" / "env.sh"
    if not env.exists():
        return
    for name, value in re.findall(r"\b(AWS_[A-Z_]+)=(\S+)", env.read_text()):
        os.environ.setdefault(name, value)


_export_aws_settings()

_VARIABLE = {
    "postgres": "SESSIONIZE_TEST_POSTGRES",
    "redis": "SESSIONIZE_TEST_REDIS",
    "dynamodb": "SESSIONIZE_TEST_DYNAMODB",
}


def _script(name: str, action: str, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(SERVICES / f"{name}.sh"), action], capture_output=True, text=True, timeout=timeout
    )


def service_env(name: str) -> dict[str, str]:
    """The variables `services/NAME.sh env` exports, starting the service if needed."""
    variable = _VARIABLE[name]
    if variable in os.environ:
        return {variable: os.environ[variable]}
    if _script(name, "status").returncode != 0:
        started = subprocess.run(
            [str(SERVICES / "start.sh"), name], capture_output=True, text=True, timeout=900
        )
        if started.returncode != 0:
            pytest.fail(f"services/start.sh {name} failed: {started.stderr.strip()[-500:]}")
    out = _script(name, "env").stdout
    found = dict(re.findall(r"(\w+)=(\S+)", out))
    if variable not in found:
        pytest.fail(f"services/{name}.sh env does not give {variable}")
    return found


def _ours(name: str) -> str | None:
    """The address `services/NAME.sh env` gives for the server the scripts run."""
    found = dict(re.findall(r"(\w+)=(\S+)", _script(name, "env").stdout))
    return found.get(_VARIABLE[name])


def managed(name: str) -> bool:
    """Whether the tests talk to the server the scripts run (and may stop and start it):
    no variable in the environment, or one naming the scripts' own server."""
    ours = _ours(name)
    return os.environ.get(_VARIABLE[name], ours) == ours


def running(name: str) -> bool:
    return _script(name, "status").returncode == 0


def stop_service(name: str) -> None:
    done = _script(name, "stop", timeout=120)
    assert done.returncode == 0, f"services/{name}.sh stop: {done.stderr}"


def start_service(name: str) -> None:
    done = _script(name, "start", timeout=120)
    assert done.returncode == 0, f"services/{name}.sh start: {done.stderr}"


@pytest.fixture(scope="session")
def postgres_uri() -> str:
    return service_env("postgres")["SESSIONIZE_TEST_POSTGRES"]


@pytest.fixture(scope="session")
def redis_uri() -> str:
    return service_env("redis")["SESSIONIZE_TEST_REDIS"]


@pytest.fixture(scope="session")
def dynamodb_endpoint() -> str:
    env = service_env("dynamodb")
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_DEFAULT_REGION"):
        if name in env:
            os.environ.setdefault(name, env[name])
    return env["SESSIONIZE_TEST_DYNAMODB"]


@pytest.fixture
def restartable():
    """`restartable(name)`: the test will stop and start the service; yields a function that
    checks it may (skip when the environment points the tests at another server), starts the
    scripts' server if it is down (failing loudly if it cannot), and restores it, started,
    at the end."""
    used: list[str] = []

    def need(name: str) -> None:
        if not managed(name):
            pytest.skip(
                f"{_VARIABLE[name]} points at a server services/{name}.sh does not run; "
                "it is not stopped by tests"
            )
        if not running(name):
            start_service(name)  # a test before may have left it stopped; fails loudly
        used.append(name)

    yield need
    for name in used:
        if not running(name):
            start_service(name)
