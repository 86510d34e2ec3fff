"""`sessionize jvm-archive`: record the classes a driver loads into the class-data archive
(`sessionize.jvm_archive`) that every later session maps instead of loading them.

The recording runs in a process of its own: a small stream of generated events, on a driver
JVM started with `-XX:ArchiveClassesAtExit`, which writes the archive as it exits. The file
is written under a temporary name and renamed into place once the JVM has exited, so a
session never maps half an archive, and two recordings at once leave one whole archive.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

from sessionize import jvm_archive
from sessionize.errors import EnvironmentProblem

_TIMEOUT_S = 900  # a recording takes about a minute on a 2-core machine
_PARTIAL = ".partial"  # an archive being written (or left by an interrupted recording)


def record(say: Callable[[str], None] = print) -> Path:
    """Record the archive of this Java and these Spark jars, unless it is there already;
    returns its path.

    Raises:
        EnvironmentProblem: the recording failed (its last line of output says why).

    Example:
        >>> record()  # ~/.cache/sessionize/spark-driver-<fingerprint>.jsa
    """
    path = jvm_archive.archive_path()
    if path.is_file():
        say(
            f"already recorded for this Java and these Spark jars: {path} (--remove first to "
            "record it again)"
        )
        return path
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        if not os.access(path.parent, os.W_OK):
            raise PermissionError(13, "Permission denied")
    except OSError as e:
        raise EnvironmentProblem(
            f"cannot write the JVM class archive into {path.parent} ({e.strerror}): set "
            "SESSIONIZE_JVM_CACHE to a directory of yours"
        ) from e
    partial = path.with_name(f".{path.name}.{os.getpid()}{_PARTIAL}")
    say(f"recording the classes a Spark driver loads (about a minute) into {path}")
    try:
        with tempfile.TemporaryDirectory(prefix="sessionize-jvm-archive-") as work:
            command = [sys.executable, "-m", "sessionize.commands.jvm_archive", work, str(partial)]
            done = subprocess.run(command, capture_output=True, text=True, timeout=_TIMEOUT_S)
        if done.returncode != 0 or not partial.is_file() or partial.stat().st_size == 0:
            lines = (done.stderr or done.stdout).strip().splitlines()
            why = lines[-1] if lines else f"exit code {done.returncode}, no archive written"
            raise EnvironmentProblem(f"recording the JVM class archive failed: {why}")
        os.replace(partial, path)
    except subprocess.TimeoutExpired as e:
        raise EnvironmentProblem(
            f"recording the JVM class archive took over {_TIMEOUT_S} s: is the machine busy?"
        ) from e
    finally:
        partial.unlink(missing_ok=True)
    say(f"{path.stat().st_size / 1e6:,.0f} MB; sessions sessionize starts now map it")
    return path


def remove(say: Callable[[str], None] = print) -> list[Path]:
    """Delete every recorded archive in the cache directory (any Java, any Spark jars), and
    what an interrupted recording left."""
    cache = jvm_archive.cache_dir()
    gone = sorted(
        [
            *cache.glob(f"{jvm_archive.PREFIX}*.jsa"),
            *cache.glob(f".{jvm_archive.PREFIX}*{_PARTIAL}"),
        ]
    )
    for path in gone:
        path.unlink(missing_ok=True)
        say(f"removed {path}")
    if not gone:
        say(f"no archive in {cache}")
    return gone


def _workload(work: str, archive: str) -> None:
    """In the recording process: a driver that writes `archive` as it exits runs a short
    stream (files in, sessions out, `files` state), then exits and waits for its JVM."""
    from pyspark import SparkContext

    from sessionize.commands.stream import StreamOptions, run_stream
    from sessionize.generate.config import GeneratorConfig
    from sessionize.generate.writer import write_files
    from sessionize.spark_session import JIT_OPTIONS, LOG4J_OPTION, get_spark

    record_at_exit = f"-XX:ArchiveClassesAtExit={archive} {jvm_archive.QUIET}"
    conf = {"spark.driver.extraJavaOptions": f"{LOG4J_OPTION} {JIT_OPTIONS} {record_at_exit}"}
    spark = get_spark("sessionize-jvm-archive", master="local[2]", conf=conf)
    cfg = GeneratorConfig(
        start=datetime(2026, 11, 1, tzinfo=UTC),
        hours=2,
        users=50,
        events_per_hour=500,
        files_per_hour=1,
    )
    write_files(cfg, f"{work}/input")
    opts = StreamOptions(
        input=f"{work}/input",
        output=f"{work}/output",
        checkpoint=f"{work}/checkpoint",
        state="files",
        partitions=2,
        max_files_per_trigger=1,
    )
    run_stream(opts, spark, on_batch=lambda _: None)
    gateway = SparkContext._gateway
    assert gateway is not None  # the session above started it
    jvm = gateway.proc  # the driver JVM, started by this process
    spark.stop()
    jvm.stdin.close()  # Spark's gateway exits on the end of its input, writing the archive
    jvm.wait(timeout=_TIMEOUT_S)


if __name__ == "__main__":
    _workload(sys.argv[1], sys.argv[2])
