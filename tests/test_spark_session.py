"""Whose Spark settings win: ours < spark-submit's < --conf / --master."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

PROBE = textwrap.dedent(
    """
    import json, sys
    from sessionize.spark_session import get_spark
    conf = json.loads(sys.argv[1])
    worker = conf.pop("worker", False)
    jit = conf.pop("jit", False)
    spark = get_spark("probe", master=conf.pop("master", None), conf=conf, shuffle_partitions=4)
    got = {
        "master": spark.sparkContext.master,
        "partitions": spark.conf.get("spark.sql.shuffle.partitions"),
        "tz": spark.conf.get("spark.sql.session.timeZone"),
        "tasks": spark.sparkContext.getConf().get("spark.ui.retainedTasks"),
    }
    if worker:  # where a Python task's PySpark and worker module come from
        got["worker"] = spark.sparkContext.parallelize([0], 1).map(
            lambda _: [__import__("pyspark.worker").__file__,
                       sys.modules["pyspark.worker"].__file__]).collect()[0]
        got["daemon"] = spark.sparkContext.getConf().get("spark.python.daemon.module", None)
    if jit:  # the driver JVM's options about its compilers
        args = spark.sparkContext._jvm.java.lang.management.ManagementFactory \\
            .getRuntimeMXBean().getInputArguments()
        got["jit"] = sorted(a for a in args if a.startswith("-XX:Tier"))
    print(json.dumps(got))
    spark.stop()
    """
)


def _probe(tmp_path: Path, conf: dict, submit_args: list[str] | None = None) -> dict:
    script = tmp_path / "probe.py"
    script.write_text(PROBE)
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable}
    env.pop("SESSIONIZE_SPARK_MASTER", None)
    if submit_args is None:
        cmd = [sys.executable, str(script), json.dumps(conf)]
    else:
        submit = Path(sys.executable).parent / "spark-submit"
        cmd = [str(submit), *submit_args, str(script), json.dumps(conf)]
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_defaults_then_user_settings(tmp_path):
    # The status store's bound (docs/operations.md, "Bounds") is a default the user can raise.
    got = _probe(tmp_path, {})
    assert got == {"master": "local[*]", "partitions": "4", "tz": "UTC", "tasks": "10000"}
    got = _probe(
        tmp_path,
        {
            "master": "local[1]",
            "spark.sql.shuffle.partitions": "11",
            "spark.ui.retainedTasks": "500",
        },
    )
    assert got == {"master": "local[1]", "partitions": "11", "tz": "UTC", "tasks": "500"}


def test_spark_submit_settings_win_over_defaults(tmp_path):
    submit = ["--master", "local[2]", "--conf", "spark.sql.shuffle.partitions=9"]
    got = _probe(tmp_path, {}, submit)
    assert (got["master"], got["partitions"], got["tz"]) == ("local[2]", "9", "UTC")
    # --conf of the command still wins over spark-submit's.
    got = _probe(tmp_path, {"spark.sql.shuffle.partitions": "3"}, submit)
    assert got["partitions"] == "3"


def test_the_driver_jvm_waits_longer_before_its_optimizing_compiles(tmp_path):
    """Ten times the default counts (5,000 calls, 15,000 calls and loops) before C2 compiles
    a method; a user's own `spark.driver.extraJavaOptions` replaces ours."""
    got = _probe(tmp_path, {"jit": True, "master": "local[1]"})
    assert got["jit"] == sorted(
        [
            "-XX:Tier4InvocationThreshold=50000",
            "-XX:Tier4MinInvocationThreshold=6000",
            "-XX:Tier4CompileThreshold=150000",
            "-XX:Tier4BackEdgeThreshold=400000",
        ]
    ), got
    got = _probe(
        tmp_path, {"jit": True, "master": "local[1]", "spark.driver.extraJavaOptions": "-Dx=1"}
    )
    assert got["jit"] == [], got


def test_local_workers_import_pyspark_from_the_installed_package(tmp_path):
    """Not from Spark's `pyspark.zip`, which every worker would compile anew."""
    import pyspark

    got = _probe(tmp_path, {"worker": True, "master": "local[1]"})
    package = os.path.dirname(pyspark.__file__)
    assert got["daemon"] == "sessionize.worker_daemon"
    assert [os.path.dirname(f) for f in got["worker"]] == [package, package], got


def test_the_daemon_is_set_only_where_this_interpreter_runs_the_workers(monkeypatch):
    """A cluster's executors (whatever the master came from: --master, --conf or
    spark-submit) and another worker interpreter keep Spark's own daemon."""
    from sessionize.spark_session import _worker_daemon

    monkeypatch.setenv("PYSPARK_PYTHON", sys.executable)
    assert _worker_daemon("local[2]") == {"spark.python.daemon.module": "sessionize.worker_daemon"}
    assert _worker_daemon("spark://127.0.0.1:7077") == {}
    monkeypatch.setenv("PYSPARK_PYTHON", "/usr/bin/false")
    assert _worker_daemon("local[2]") == {}


def test_the_daemon_drops_only_the_installed_packages_own_zip(tmp_path):
    from sessionize.worker_daemon import prefer_installed

    site = tmp_path / "site"
    (site / "pyspark" / "python" / "lib").mkdir(parents=True)
    (site / "pyspark" / "__init__.py").write_text("")
    own = site / "pyspark" / "python" / "lib" / "pyspark.zip"
    own.write_bytes(b"")
    other = tmp_path / "spark-home" / "python" / "lib" / "pyspark.zip"
    other.parent.mkdir(parents=True)
    other.write_bytes(b"")
    py4j = str(own.parent / "py4j-src.zip")
    assert prefer_installed([str(own), py4j, str(site)]) == [py4j, str(site)]
    # A Spark home of its own (another zip), no installed package, or no zip: as Spark set it.
    for path in (
        [str(other), str(site)],
        [str(own), str(tmp_path)],
        [str(site)],
        [str(tmp_path / "gone" / "pyspark.zip"), str(site)],
    ):
        assert prefer_installed(path) == path


def test_master_and_remote_exclude_each_other():
    from sessionize.errors import ConfigError
    from sessionize.spark_session import get_spark

    with pytest.raises(ConfigError, match="--master and --remote exclude each other"):
        get_spark("x", master="local[1]", remote="sc://127.0.0.1:1")


def test_a_remote_that_nothing_answers_is_one_line_at_once():
    """The Connect client alone would retry for minutes; the session refuses first."""
    import socket

    from sessionize.errors import ConfigError, EnvironmentProblem
    from sessionize.spark_session import get_spark

    with socket.socket() as s:  # a port that was just free: nothing listens there
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(
        EnvironmentProblem, match=f"no Spark Connect server answers at 127.0.0.1:{port}"
    ):
        get_spark("x", remote=f"sc://127.0.0.1:{port}")
    with pytest.raises(ConfigError, match="give it as sc://HOST:PORT"):
        get_spark("x", remote="http://127.0.0.1:1")


def test_a_standalone_master_that_nothing_answers_is_one_line_at_once():
    """Every address of `spark://H1:P1,H2:P2` is tried; one that answers is enough."""
    import socket

    from sessionize.errors import ConfigError, EnvironmentProblem
    from sessionize.spark_session import check_master

    with socket.socket() as a, socket.socket() as b:  # ports that were just free
        a.bind(("127.0.0.1", 0))
        b.bind(("127.0.0.1", 0))
        free = [a.getsockname()[1], b.getsockname()[1]]
    both = f"127.0.0.1:{free[0]}, 127.0.0.1:{free[1]}"
    with pytest.raises(EnvironmentProblem, match=f"no Spark master answers at {both} "):
        check_master(f"spark://127.0.0.1:{free[0]},127.0.0.1:{free[1]}")
    with socket.socket() as listening:
        listening.bind(("127.0.0.1", 0))
        listening.listen()
        port = listening.getsockname()[1]
        check_master(f"spark://127.0.0.1:{free[0]},127.0.0.1:{port}")
    with pytest.raises(ConfigError, match="give it as spark://HOST:PORT"):
        check_master("spark://127.0.0.1:port")
    check_master("local[2]")  # Spark's to reach: nothing to check
