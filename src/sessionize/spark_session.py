"""SparkSession for the CLI: local defaults that matter for correctness and speed."""

from __future__ import annotations

import inspect
import os
import re
import shutil
import socket
import sys
from collections.abc import Mapping
from urllib.parse import urlsplit

from sessionize import jvm_archive, spark_version
from sessionize.errors import ConfigError, EnvironmentProblem

# Bytes of lines Spark hands a Python task per Arrow batch (it also stops at 10,000 lines,
# `spark.sql.execution.arrow.maxRecordsPerBatch`): the parse holds a few copies of a batch,
# so this bounds a task's memory whatever the length of the lines (docs/operations.md).
ARROW_BATCH_BYTES = 16 << 20

# Spark's own logging quieted to what an operator needs (the driver JVM reads it at start).
LOG4J_OPTION = (
    f"-Dlog4j.configurationFile=file:{os.path.join(os.path.dirname(__file__), 'log4j2.properties')}"
)
# The driver JVM's optimizing compiler (C2) waits for ten times its default call and loop
# counts. A micro-batch runs Spark's analysis and planning over many code paths, each warm
# but not hot: with the defaults C2 compiles them all in the first few dozen batches, 11-16
# s of a core on a 1M-event run of 8 batches, competing with the batches on a small machine.
# Truly hot code still reaches C2 within a few dozen batches (docs/benchmarks.md).
JIT_OPTIONS = (
    "-XX:Tier4InvocationThreshold=50000 -XX:Tier4MinInvocationThreshold=6000 "
    "-XX:Tier4CompileThreshold=150000 -XX:Tier4BackEdgeThreshold=400000"
)


def driver_java_options() -> str:
    """sessionize's default `spark.driver.extraJavaOptions`: the log4j settings, the compile
    thresholds and, once recorded (`sessionize jvm-archive`), the class-data archive."""
    return " ".join(o for o in (LOG4J_OPTION, JIT_OPTIONS, jvm_archive.java_options()) if o)


def check_java() -> None:
    """Fail with one line when there is no Java for Spark to start, or one its line cannot
    run on (`spark_version`: Spark 3.5's Arrow cannot allocate on Java 21)."""
    home = os.environ.get("JAVA_HOME")
    if home and os.path.exists(os.path.join(home, "bin", "java")):
        return _check_java_line(home)
    if shutil.which("java"):
        java = os.path.realpath(shutil.which("java") or "java")
        return _check_java_line(os.path.dirname(os.path.dirname(java)))
    raise EnvironmentProblem(
        "Java 17 is required by Spark and was not found: install it "
        "(Debian: apt-get install openjdk-17-jre-headless) or set JAVA_HOME"
    )


def _check_java_line(home: str) -> None:
    """Refuse a Java newer than 17 in one line under a Spark line that cannot run on it,
    read from the runtime's `release` file (no process started); unknown means go on."""
    if spark_version.has("java_21"):
        return
    try:
        with open(os.path.join(home, "release")) as f:
            found = re.search(r'^JAVA_VERSION="(\d+)', f.read(), re.M)
    except OSError:
        return
    if found and int(found.group(1)) > 17:
        line = ".".join(map(str, spark_version.installed()))
        raise EnvironmentProblem(
            f"PySpark {line} runs on Java 17, not Java {found.group(1)} (its Arrow cannot "
            "allocate memory there): set JAVA_HOME to a Java 17, or use Spark 4.0+"
        )


def get_spark(
    app: str,
    *,
    master: str | None = None,
    conf: Mapping[str, str] | None = None,
    shuffle_partitions: int = 4,
    remote: str | None = None,
):
    """A session with UTC time, loopback binding, no UI and the venv's Python in workers.

    Precedence, lowest first: these defaults, then what `spark-submit` (or
    `spark-defaults.conf`) set, then `conf` (`--conf KEY=VALUE`) and `master` (`--master`).
    Without any master the session is `local[*]` (or `SESSIONIZE_SPARK_MASTER`). UTC is not
    cosmetic: offset-less event times are UTC by contract (docs/design.md, "Events"), and
    Spark parses them in the session time zone, so it is set even over spark-submit's.

    With `remote` (`--remote sc://HOST:PORT`) the session is a Spark Connect client: no local
    JVM, the server owns the cluster settings, and only session settings (`conf`, the time
    zone, the shuffle partitions) are sent.
    """
    if remote:
        if master:
            raise ConfigError("--master and --remote exclude each other: give one of them")
        return _connect(app, remote, conf or {}, shuffle_partitions)
    check_java()
    submitted_jvm = "PYSPARK_GATEWAY_PORT" in os.environ  # spark-submit started the driver
    if not submitted_jvm:
        check_master(master or os.environ.get("SESSIONIZE_SPARK_MASTER", "local[*]"))
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark import SparkConf, SparkContext
    from pyspark.sql import SparkSession

    defaults = {
        "spark.master": os.environ.get("SESSIONIZE_SPARK_MASTER", "local[*]"),
        "spark.ui.enabled": "false",
        "spark.sql.shuffle.partitions": str(shuffle_partitions),
        "spark.driver.memory": os.environ.get("SESSIONIZE_DRIVER_MEMORY", "2g"),
        "spark.ui.showConsoleProgress": "false",
        "spark.driver.extraJavaOptions": driver_java_options(),
        # Spark's status store keeps jobs, stages, tasks and SQL runs even with the UI off
        # (1,000 / 1,000 / 100,000 / 1,000 by default): a stream of small batches fills it
        # for days. These bounds keep the driver's heap flat within a few hundred batches.
        "spark.ui.retainedJobs": "100",
        "spark.ui.retainedStages": "100",
        "spark.ui.retainedTasks": "10000",
        "spark.sql.ui.retainedExecutions": "100",
        "spark.sql.execution.arrow.maxBytesPerBatch": str(ARROW_BATCH_BYTES),
        # PySpark's call-site capture asks the JVM for a setting and records the caller's
        # stack around every function call that builds a column (four round trips each):
        # hundreds per micro-batch's plan, for the line numbers in an analysis error.
        "spark.python.sql.dataFrameDebugging.enabled": "false",
    }
    if submitted_jvm:
        # Started by spark-submit: its JVM already runs and holds the user's settings.
        SparkContext._ensure_initialized()
    submitted = SparkConf()  # empty unless spark-submit started this driver
    chosen = (
        master
        or (conf or {}).get("spark.master")
        or submitted.get("spark.master", None)
        or defaults["spark.master"]
    )
    defaults |= _worker_daemon(chosen)
    builder = SparkSession.builder.appName(app)
    for key, value in defaults.items():
        if not submitted.contains(key):
            builder = builder.config(key, value)
    for key, value in {**(conf or {}), **({"spark.master": master} if master else {})}.items():
        builder = builder.config(key, value)
    spark = builder.config("spark.sql.session.timeZone", "UTC").getOrCreate()
    spark.sparkContext.setLogLevel(os.environ.get("SESSIONIZE_SPARK_LOG_LEVEL", "ERROR"))
    return spark


def _worker_daemon(master: str) -> dict[str, str]:
    """`spark.python.daemon.module` for a local master whose workers run this interpreter
    with sessionize installed as files: PySpark imported from its installed package
    (`worker_daemon`). A cluster's executors, whose installs the driver cannot see, or a
    sessionize shipped in a zip (`--py-files`), keep Spark's own daemon."""
    local = master.startswith("local")
    python = os.environ.get("PYSPARK_PYTHON", sys.executable)
    same = os.path.abspath(shutil.which(python) or python) == os.path.abspath(sys.executable)
    files = os.path.isfile(os.path.join(os.path.dirname(__file__), "worker_daemon.py"))
    if not (local and same and files):
        return {}
    return {"spark.python.daemon.module": "sessionize.worker_daemon"}


def _connect(app: str, remote: str, conf: Mapping[str, str], shuffle_partitions: int):
    try:
        from pyspark.sql import SparkSession
        from pyspark.sql.connect.utils import check_dependencies

        # Before 4.3 it takes the caller's module name (doctests skip themselves by it).
        takes_name = bool(inspect.signature(check_dependencies).parameters)
        check_dependencies(*([__name__] if takes_name else []))
    except ImportError as e:
        raise EnvironmentProblem(
            f"--remote needs the Spark Connect client ({e}): pip install 'sessionize[connect]'"
        ) from None
    check_reachable(remote)
    settings = {"spark.sql.shuffle.partitions": str(shuffle_partitions), **conf}
    builder = SparkSession.builder.remote(remote).appName(app)
    for key, value in settings.items():
        builder = builder.config(key, value)
    return builder.config("spark.sql.session.timeZone", "UTC").getOrCreate()


def check_reachable(remote: str, timeout_s: float = 10.0) -> None:
    """One line when nothing answers at `remote`: the Connect client would retry in silence
    for minutes before failing."""
    url = urlsplit(remote.split(";", 1)[0])
    if url.scheme != "sc" or not url.hostname:
        raise ConfigError(f"--remote {remote}: give it as sc://HOST:PORT")
    port = url.port or 15002  # Spark Connect's default port
    problem = _unanswered(url.hostname, port, timeout_s)
    if problem:
        raise EnvironmentProblem(
            f"no Spark Connect server answers at {url.hostname}:{port} ({problem}): "
            "start it, or give --remote the address of a running one"
        )


def check_master(master: str, timeout_s: float = 10.0) -> None:
    """One line when no standalone master answers at `master` (`spark://HOST:PORT`, or
    `spark://H1:P1,H2:P2` for standby masters): the JVM would fail with a long trace after
    retrying. Other masters (`local[*]`, `yarn`, `k8s://...`) are Spark's to reach."""
    if not master.startswith("spark://"):
        return
    addresses = []
    for item in master.removeprefix("spark://").split(","):
        url = urlsplit(f"spark://{item.strip()}")
        try:
            port = url.port or 7077  # the standalone master's default port
        except ValueError:
            port = None
        if not url.hostname or port is None:
            raise ConfigError(f"--master {master}: give it as spark://HOST:PORT")
        addresses.append((url.hostname, port))
    problems = [_unanswered(host, port, timeout_s) for host, port in addresses]
    if all(problems):
        where = ", ".join(f"{host}:{port}" for host, port in addresses)
        raise EnvironmentProblem(
            f"no Spark master answers at {where} ({problems[0]}): start it "
            "($SPARK_HOME/sbin/start-master.sh), or give --master the address of a running "
            "one (or local[*] to run on this machine)"
        )


def _unanswered(host: str, port: int, timeout_s: float) -> str | None:
    """Why a TCP connection to host:port fails, or None when something answers there."""
    try:
        with socket.create_connection((host, port), timeout=timeout_s):
            return None
    except OSError as e:
        return e.strerror or str(e)


def is_connect(spark) -> bool:
    """A Spark Connect session (no SparkContext, functions run on the server)."""
    return type(spark).__module__.startswith("pyspark.sql.connect")
