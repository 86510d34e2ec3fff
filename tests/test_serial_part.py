"""The suite's parallel part leaves out every test that stops a shared server: `./dev test`
runs them alone afterwards (`-m serial`), so no test beside them sees its server vanish.
The tests that use a server-stopping fixture are marked by tests/conftest.py, the others
by hand; here both kinds are left out of `-m "not serial"` and kept by `-m serial`, while
their neighbours in the same modules stay in the parallel part. The Spark cluster's tests are
in the parallel part, all sent to one worker."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MODULES = [
    "tests/services/test_postgres_service.py",
    "tests/state/test_redis.py",
    "tests/sinks/test_crash_and_outage.py",
]
# Each stops PostgreSQL, Redis or the S3 server (by a fixture or by hand).
STOPPING = {
    "tests/services/test_postgres_service.py::test_data_survives_restart",
    "tests/state/test_redis.py::TestRedisChecks::test_down_at_start_is_one_clear_line",
    "tests/state/test_redis.py::TestRedisChecks::test_lost_mid_batch_then_a_restart_completes",
    "tests/sinks/test_crash_and_outage.py::test_s3_down_mid_publish_is_one_line_and_a_retry_"
    "completes[parquet-s3]",
}
# Their neighbours, which only use the servers.
USING = {
    "tests/services/test_postgres_service.py::test_round_trip",
    "tests/sinks/test_crash_and_outage.py::test_kill_after_one_output_then_rerun[parquet-s3]",
}


def _collected(marks: str) -> set[str]:
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider"]
        + ["-m", marks, *MODULES],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return {line for line in done.stdout.splitlines() if "::" in line}


def test_tests_that_stop_a_server_are_only_in_the_serial_part():
    parallel, serial = _collected("not serial"), _collected("serial")
    assert not parallel & serial
    assert serial >= STOPPING and not STOPPING & parallel, sorted(serial)
    assert parallel >= USING and not USING & serial, sorted(parallel)


def test_the_cluster_tests_are_in_the_parallel_part_on_one_worker():
    """Run with three workers and every test skipped at once (tests/worker_probe.py), the
    cluster's tests, in three modules, all go to one worker, the others' modules beside."""
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "tests.worker_probe"]
        + ["-n", "3", "--dist", "loadfile", "-rs", "-m", "not serial"]
        + ["tests/cluster", "tests/test_dev_script.py", "tests/services"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    sent = [line.split(": worker ", 1)[1].split(maxsplit=1) for line in done.stdout.splitlines()
            if ": worker " in line]  # fmt: skip
    cluster = {test.split("::")[0]: worker for worker, test in sent if "tests/cluster/" in test}
    assert len(cluster) == 3 and len(set(cluster.values())) == 1, sent
    assert len({worker for worker, _ in sent}) > 1, sent
