"""Shared fixtures: one local SparkSession for the whole test session (one per worker when
pytest-xdist runs the suite in parallel: each is its own driver JVM, with Spark's own
scratch directories and no UI port)."""

from __future__ import annotations

import os
import sys

import pytest

from sessionize import spark_version
from tests.state_params import state  # noqa: F401 - fixture: one run per state backend

# Spark must bind to loopback and run the venv's interpreter in its Python workers.
os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
os.environ["PYSPARK_PYTHON"] = sys.executable
os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable


@pytest.fixture(scope="session")
def spark():
    from pyspark.sql import SparkSession

    session = (
        SparkSession.builder.master("local[2]")
        .appName("sessionize-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "4")
        .config("spark.default.parallelism", "4")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.driver.memory", "2g")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()


@pytest.fixture(scope="session")
def wheel(tmp_path_factory):
    """This checkout's wheel (its sdist beside it), built once for every test that installs
    it (tests/distribution/builds.py)."""
    from tests.distribution.builds import build

    return build(tmp_path_factory.mktemp("dist"))


# Directories whose tests need a resource to themselves and run one after another on one
# worker of the parallel part, beside the other workers' tests: the Spark cluster's two
# one-core workers run one application at a time (tests/cluster).
ONE_WORKER = ("tests/cluster/",)


@pytest.hookimpl(optionalhook=True)  # pytest-xdist's hook: absent without it
def pytest_xdist_make_scheduler(config, log):
    """`--dist loadfile` (`./dev test`'s parallel part) with each `ONE_WORKER` directory as
    one unit: a module's tests stay on one worker, and so do the directory's."""
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    class ModuleOrDirectory(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return next((d for d in ONE_WORKER if nodeid.startswith(d)), None) or (
                super()._split_scope(nodeid)
            )

    return ModuleOrDirectory(config, log)


# The fixtures of the tests that stop and start a shared server (tests/state/services_fixtures.py,
# tests/services/conftest.py): any test beside them would see its server vanish.
STOPS_A_SERVER = {"restartable", "restart_service"}


@pytest.hookimpl(tryfirst=True)  # before `-m` deselects by the marks added here
def pytest_collection_modifyitems(items) -> None:
    """`@pytest.mark.needs_spark(FEATURE)`: a test of a feature this PySpark line lacks
    (`spark_version.FEATURES`) is skipped, naming the line it needs; on such a line the
    feature is refused in one line, which tests/test_spark_lines.py proves.

    A test that uses a fixture stopping a shared server is `serial` (pyproject.toml):
    `./dev test` runs it alone, after the tests it runs in parallel (README, "Tests")."""
    for item in items:
        if STOPS_A_SERVER & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.serial)
        for mark in item.iter_markers("needs_spark"):
            feature = mark.args[0]
            if not spark_version.has(feature):
                (major, minor), reason = spark_version.FEATURES[feature]
                item.add_marker(
                    pytest.mark.skip(
                        reason=f"needs Spark {major}.{minor} ({reason.split(';')[0]}); refused on "
                        "this line (tests/test_spark_lines.py)"
                    )
                )
