"""Fixtures for the smoke tests of the local test services started by services/start.sh."""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def service_setting() -> Callable[[str], str]:
    """Look up a variable that `services/NAME.sh env` prints: from the environment, else from
    `.services/env.sh` (written by services/start.sh); fail loudly when neither has it."""

    def lookup(name: str) -> str:
        if name in os.environ:
            return os.environ[name]
        env_file = REPO / ".services" / "env.sh"
        if env_file.exists():
            match = re.search(rf"\b{name}=(\S+)", env_file.read_text())
            if match:
                return match.group(1)
        pytest.fail(f"{name} is not set: start the local services with services/start.sh")

    return lookup


@pytest.fixture
def restart_service() -> Callable[[str], None]:
    """Stop and start a service with its script; fail unless that script says it is running
    (the URI may point at a server that the scripts do not manage)."""

    def restart(name: str) -> None:
        script = str(REPO / "services" / f"{name}.sh")
        if subprocess.run([script, "status"], capture_output=True).returncode != 0:
            pytest.fail(f"{name} is not running: start it with services/{name}.sh start")
        for action in ("stop", "start"):
            done = subprocess.run([script, action], capture_output=True, text=True, timeout=120)
            assert done.returncode == 0, f"{name}.sh {action}: {done.stderr}"

    return restart
