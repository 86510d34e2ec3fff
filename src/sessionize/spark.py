"""SparkSession for the CLI: local defaults that matter for correctness and speed."""

from __future__ import annotations

import os
import shutil
import sys

from sessionize.errors import EnvironmentProblem


def check_java() -> None:
    """Fail with one line when there is no Java for Spark to start."""
    home = os.environ.get("JAVA_HOME")
    if home and os.path.exists(os.path.join(home, "bin", "java")):
        return
    if shutil.which("java"):
        return
    raise EnvironmentProblem(
        "Java 17 is required by Spark and was not found: install it "
        "(Debian: apt-get install openjdk-17-jre-headless) or set JAVA_HOME"
    )


def get_spark(app: str, *, master: str | None = None, shuffle_partitions: int = 4):
    """A session with UTC time, loopback binding, no UI and the venv's Python in workers.

    UTC is not cosmetic: offset-less event times are UTC by contract (DESIGN §2), and
    Spark parses them in the session time zone.
    """
    check_java()
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    log4j = os.path.join(os.path.dirname(__file__), "log4j2.properties")
    builder = (
        SparkSession.builder.appName(app)
        .master(master or os.environ.get("SESSIONIZE_SPARK_MASTER", "local[*]"))
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", str(shuffle_partitions))
        .config("spark.driver.memory", os.environ.get("SESSIONIZE_DRIVER_MEMORY", "2g"))
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.extraJavaOptions", f"-Dlog4j.configurationFile=file:{log4j}")
    )
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel(os.environ.get("SESSIONIZE_SPARK_LOG_LEVEL", "ERROR"))
    return spark
