"""`sessionize stream` on a real standalone cluster (services/spark-cluster.sh: a master and
two one-core workers): executors in other JVMs and Python processes than the driver's, which
can die, and a worker-side state cache per executor process.

The outputs must equal an uninterrupted local[2] run of the same input, also when an
executor JVM is killed with -9 in the middle of the run (Spark re-runs its tasks elsewhere,
and partitions move between executor processes and back), and when the driver is.
"""

from __future__ import annotations

import json
import os
import signal

import pytest

from tests.cluster.cluster import (
    Cluster,
    clean_local_run,
    kill_group,
    small_input,
    start_cli,
)
from tests.helpers import assert_same_as_clean, cli_env, run_until_killed, sessionize

APP = "sessionize-sessionize"  # the CLI's application name for the default job


@pytest.fixture(scope="module")
def data(spark, tmp_path_factory):
    root = tmp_path_factory.mktemp("cluster")
    inp = small_input(root)
    clean_local_run(spark, inp, root)
    return root, inp


def _args(inp, run, cluster: Cluster, *more: str) -> list[str]:
    return [
        "stream", "--input", str(inp), "--output", str(run / "out"),
        "--checkpoint", str(run / "chk"), "--partitions", "3", "--max-files-per-trigger", "1",
        "--master", cluster.master,
        # Any executor takes any task: partitions move between executor processes.
        "--conf", "spark.locality.wait=0", *more,
    ]  # fmt: skip


def _progress(run) -> list[dict]:
    lines = (run / "chk" / "progress.jsonl").read_text().splitlines()
    return [json.loads(line) for line in lines if line.strip()]


def test_files_state_survives_an_executor_killed_mid_run(data, cluster: Cluster):
    root, inp = data
    run = root / "executor-loss"
    proc = start_cli(_args(inp, run, cluster), cli_env())
    killed = None
    try:
        for line in proc.stdout:
            if line.startswith("batch 0:"):
                pids = cluster.executor_pids(APP)
                assert pids, f"no executor of {APP} found: {cluster.apps()}"
                killed = pids[0]
                os.kill(killed, signal.SIGKILL)
        proc.wait()
    finally:
        kill_group(proc)
    assert proc.returncode == 0, proc.stderr.read()[-3000:]
    assert killed is not None and killed not in cluster.executor_pids(APP)
    assert_same_as_clean(root, run)
    records = _progress(run)
    # After the loss, partitions were opened by an executor process that had not cached
    # them: the state came from storage, and the outputs above are still exact.
    assert any(r["batch"]["state_rows_loaded"] > 0 for r in records[1:]), records


@pytest.mark.parametrize("state", ["redis"], indirect=True)
def test_a_driver_killed_on_the_cluster_resumes_exactly_once(data, cluster, state):
    root, inp = data
    run = root / "driver-kill"
    args = _args(inp, run, cluster, "--state", state())
    run_until_killed(args, "batch 1:", cli_env())
    done = sessionize(*args)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "batch 0:" not in done.stdout  # resumed, not started over
    assert_same_as_clean(root, run)
