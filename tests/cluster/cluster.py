"""The Spark standalone cluster and Connect server of services/spark-cluster.sh, for tests.

`find_cluster` (the `cluster` fixture of tests/cluster/conftest.py) gives their addresses
(from the environment, else from the script's `env`) and fails, naming the command to run,
when they are not up: these tests prove the engine on real executors, so a missing
cluster is a failure, never a skip.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import pytest

from sessionize.commands.stream import StreamOptions, run_stream
from tests.helpers import generate

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "services" / "spark-cluster.sh"
_VARIABLES = (
    "SESSIONIZE_TEST_SPARK_MASTER",
    "SESSIONIZE_TEST_SPARK_MASTER_UI",
    "SESSIONIZE_TEST_SPARK_REMOTE",
)


@dataclass(frozen=True)
class Cluster:
    master: str  # spark://127.0.0.1:P
    ui: str  # the master's web UI, whose /json/ lists workers and applications
    remote: str  # sc://127.0.0.1:Q

    def apps(self) -> list[dict]:
        with urllib.request.urlopen(f"{self.ui}/json/", timeout=10) as r:
            return json.load(r)["activeapps"]

    def alive_workers(self) -> int:
        with urllib.request.urlopen(f"{self.ui}/json/", timeout=10) as r:
            return sum(w["state"] == "ALIVE" for w in json.load(r)["workers"])

    def executor_pids(self, app_name: str) -> list[int]:
        """The executor JVMs of the running application `app_name`."""
        ids = [a["id"] for a in self.apps() if a["name"] == app_name]
        pids = []
        for app in ids:
            found = subprocess.run(
                ["pgrep", "-f", f"CoarseGrainedExecutorBackend.*--app-id {app}"],
                capture_output=True,
                text=True,
            )
            pids += [int(p) for p in found.stdout.split()]
        return pids


def _addresses() -> dict[str, str]:
    if all(v in os.environ for v in _VARIABLES):
        return {v: os.environ[v] for v in _VARIABLES}
    status = subprocess.run([str(SCRIPT), "status"], capture_output=True, text=True)
    if status.returncode != 0:
        pytest.fail(
            "the Spark cluster is not running: start it with `services/spark-cluster.sh "
            f"start` (or services/start.sh); status said: {status.stdout.strip()}"
        )
    out = subprocess.run([str(SCRIPT), "env"], capture_output=True, text=True).stdout
    return dict(re.findall(r"(\w+)=(\S+)", out))


def find_cluster() -> Cluster:
    found = _addresses()
    c = Cluster(
        found["SESSIONIZE_TEST_SPARK_MASTER"],
        found["SESSIONIZE_TEST_SPARK_MASTER_UI"],
        found["SESSIONIZE_TEST_SPARK_REMOTE"],
    )
    if c.alive_workers() < 2:
        pytest.fail(
            f"the master at {c.master} has fewer than 2 alive workers: run "
            "`services/spark-cluster.sh stop && services/spark-cluster.sh start`"
        )
    return c


def small_input(root: Path) -> Path:
    """One hour in three files: three micro-batches of one file each, and then the
    late-event file the generator adds."""
    return generate(
        root / "in",
        hours=1,
        users=200,
        events_per_hour=2400,
        files_per_hour=3,
        invalid_rate=0.01,
        late_rate=0.01,
    )


def clean_local_run(spark, inp: Path, root: Path) -> None:
    """The uninterrupted run on local[2] in `root/clean`: what every run must equal."""
    opts = StreamOptions(
        input=str(inp),
        output=str(root / "clean" / "out"),
        checkpoint=str(root / "clean" / "chk"),
        partitions=3,
        max_files_per_trigger=1,
    )
    run_stream(opts, spark, on_batch=lambda _: None)


def start_cli(args: list[str], env: dict[str, str]) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "sessionize", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        start_new_session=True,
    )


def kill_group(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
