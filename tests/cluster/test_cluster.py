"""`sessionize stream` on a real standalone cluster (services/spark-cluster.sh: a master and
two one-core workers): executors in other JVMs and Python processes than the driver's, which
can die, and a worker-side state cache per executor process.

The outputs must equal an uninterrupted local[2] run of the same input, also when an
executor JVM is killed with -9 in the middle of the run (Spark re-runs its tasks elsewhere,
and partitions move between executor processes and back) and when the driver is. One run
proves both, to keep the suite's time: each start of an application on the cluster costs
tens of seconds. A server state on the cluster is proven through Connect (test_connect.py).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess

from tests.cluster.cluster import (
    Cluster,
    kill_group,
    start_cli,
)
from tests.helpers import assert_same_as_clean, cli_env, sessionize

# The cluster's two one-core workers run one application at a time, and an executor is
# found by its application's name: nothing else runs on the cluster meanwhile (the
# parallel part runs tests/cluster on one worker: tests/conftest.py, ONE_WORKER).

APP = "sessionize-sessionize"  # the CLI's application name for the default job
DAEMON = "sessionize.worker_daemon"


def _children(pid: int, pattern: str) -> list[int]:
    found = subprocess.run(["pgrep", "-P", str(pid), "-f", pattern], capture_output=True, text=True)
    return [int(p) for p in found.stdout.split()]


def _args(inp, run, cluster: Cluster, *more: str) -> list[str]:
    return [
        "stream",
        "--input",
        str(inp),
        "--output",
        str(run / "out"),
        "--checkpoint",
        str(run / "chk"),
        "--partitions",
        "3",
        "--max-files-per-trigger",
        "1",
        "--master",
        cluster.master,
        # Any executor takes any task: partitions move between executor processes.
        "--conf",
        "spark.locality.wait=0",
        *more,
    ]


def _progress(run) -> list[dict]:
    lines = (run / "chk" / "progress.jsonl").read_text().splitlines()
    return [json.loads(line) for line in lines if line.strip()]


def test_executor_and_driver_killed_on_the_cluster_outputs_stay_exact(data, cluster: Cluster):
    """files state (the store with the executor-side cache): an executor JVM killed -9 after
    batch 0, the driver killed -9 after batch 1, then a restart on the cluster. The
    executors run sessionize's Python daemon (docs/scaling.md), as a cluster may be set."""
    root, inp = data
    run = root / "kills"
    args = _args(inp, run, cluster, "--conf", f"spark.python.daemon.module={DAEMON}")
    proc = start_cli(args, cli_env())
    killed, seen = None, []
    try:
        for line in proc.stdout:
            seen.append(line)
            if line.startswith("batch 0:"):
                pids = cluster.executor_pids(APP)
                assert pids, f"no executor of {APP} found: {cluster.apps()}"
                daemons = [_children(pid, DAEMON) for pid in pids]
                assert all(daemons), f"executors {pids} run no {DAEMON}: {daemons}"
                killed = pids[0]
                os.kill(killed, signal.SIGKILL)
            if line.startswith("batch 1:"):
                break
    finally:
        kill_group(proc)  # the driver, kill -9, in the middle of the run
    assert seen and seen[-1].startswith("batch 1:"), "".join(seen) + proc.stderr.read()[-3000:]
    assert killed is not None and killed not in cluster.executor_pids(APP)
    done = sessionize(*args)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "batch 0:" not in done.stdout and "batch 2:" in done.stdout  # resumed
    assert_same_as_clean(root, run)
    records = _progress(run)
    # After the loss, partitions were opened by executor processes that had not cached
    # their last version: state came from storage, and the outputs above are still exact.
    assert any(r["batch"]["state_rows_loaded"] > 0 for r in records[1:]), records
