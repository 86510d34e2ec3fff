"""The built wheel, installed (not editable) into a clean venv: without PySpark every
command that needs it says so in one line; installed after the platform's PySpark 3.5 it
leaves that PySpark in place; and from there the demo runs, and a stream with the Redis
store and the Delta sink gives the sessions of the same stream in this checkout's venv
(PySpark 4.3, files state, Parquet)."""

from __future__ import annotations

import os
import uuid

import pyarrow as pa
import pytest
from deltalake import DeltaTable

from sessionize import __version__
from tests.cluster.cluster import clean_local_run, small_input
from tests.distribution.builds import PLATFORM_PYSPARK, pyspark_version, run, venv
from tests.helpers import OUTPUTS, SORT_KEYS, cli_env, read_output, stream_args
from tests.state.services_fixtures import service_env

pytestmark = pytest.mark.services


def _delta(root, name: str) -> pa.Table:
    table = DeltaTable(str(root / name)).to_pyarrow_table()
    keys = ["batch_id", *(k for k in SORT_KEYS[name] if k in table.column_names)]
    return table.sort_by([(k, "ascending") for k in keys])


def _env(bin_) -> dict[str, str]:
    """The CLI's test environment with the venv first on PATH and nothing of this checkout's
    on PYTHONPATH: the venv's Python finds only what was installed into it."""
    env = cli_env(PATH=f"{bin_}{os.pathsep}{os.environ['PATH']}")
    env.pop("PYTHONPATH", None)
    env.pop("PYSPARK_PYTHON", None)
    env.pop("PYSPARK_DRIVER_PYTHON", None)
    return env


# Building and installing the package into a new venv takes minutes before any Spark.
@pytest.mark.timeout(1800)
def test_the_wheel_installs_without_pyspark_then_beside_pyspark_3_5_and_runs_there(
    spark, tmp_path, wheel
):
    bin_ = venv(tmp_path / "venv")
    run(bin_ / "pip", "install", "-q", wheel)
    env = _env(bin_)
    site = run(bin_ / "python", "-c", "import sessionize; print(sessionize.__file__)", env=env)
    assert str(tmp_path / "venv") in site.stdout  # the installed copy, not this checkout's

    # Without PySpark: the version, the generator, and one line for what needs Spark.
    shown = run(bin_ / "sessionize", "--version", env=env).stdout
    assert shown == f"sessionize {__version__} (PySpark not installed)\n"
    events = tmp_path / "events"
    run(
        bin_ / "sessionize",
        "generate",
        "--output",
        events,
        "--hours",
        "1",
        "--users",
        "20",
        "--events-per-hour",
        "200",
        env=env,
    )
    refused = run(
        bin_ / "sessionize",
        "stream",
        "--input",
        events,
        "--output",
        tmp_path / "o",
        "--checkpoint",
        tmp_path / "c",
        env=env,
        check=False,
    )
    assert refused.returncode == 2
    assert refused.stderr.splitlines() == [
        "sessionize: error: PySpark is not installed: pip install 'sessionize[spark]' "
        "(PySpark 4.3.0), or run where the platform's PySpark 3.5 to 4.3 is installed"
    ]

    # The platform's PySpark first, then the package with its extras: PySpark stays.
    run(bin_ / "pip", "install", "-q", PLATFORM_PYSPARK)
    run(bin_ / "pip", "install", "-q", f"{wheel}[spark,redis]")
    assert pyspark_version(bin_) == PLATFORM_PYSPARK.split("==")[1]
    shown = run(bin_ / "sessionize", "--version", env=env).stdout
    assert shown == f"sessionize {__version__} (PySpark 3.5.9)\n"

    demo = run(
        bin_ / "sessionize",
        "demo",
        "--workdir",
        tmp_path / "demo",
        "--hours",
        "1",
        "--users",
        "50",
        "--events-per-hour",
        "500",
        env=env,
        timeout=900,
    )
    assert (tmp_path / "demo" / "report.html").stat().st_size > 0, demo.stdout

    inp = small_input(tmp_path)  # four micro-batches, the last of late events
    clean_local_run(spark, inp, tmp_path)  # this checkout, PySpark 4.3, files, Parquet
    redis = f"{service_env('redis')['SESSIONIZE_TEST_REDIS']}?prefix=wheel-{uuid.uuid4().hex}"
    args = [*stream_args(inp, tmp_path / "wheel"), "--state", redis, "--output-format", "delta"]
    run(bin_ / "sessionize", *args, env=env, timeout=900)
    for name in OUTPUTS:
        expected = read_output(tmp_path / "clean" / "out", name)
        if not expected.num_rows:
            assert not DeltaTable.is_deltatable(str(tmp_path / "wheel" / "out" / name)), name
            continue
        got = _delta(tmp_path / "wheel" / "out", name).select(expected.column_names)
        assert got.cast(expected.schema).equals(expected), name
    assert read_output(tmp_path / "clean" / "out", "sessions").num_rows > 0
