"""A script that streams with `Sessionizer.stream`, awaits the query and ends: sessionize's
StreamingQueryListener is gone before PySpark stops the JVM, so Spark's listener bus never
calls a Python that has exited (`ERROR StreamingQueryListenerBus ... Connection refused`
and a trace of some 80 lines)."""

from __future__ import annotations

import subprocess
import sys
import textwrap

from tests.helpers import cli_env, generate

SCRIPT = textwrap.dedent(
    """
    import atexit, sys
    from pyspark.sql import SparkSession
    from sessionize import Sessionizer

    spark = SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false") \\
        .getOrCreate()

    def listeners_left():
        left = [str(x) for x in spark._jsparkSession.streams().listListeners()]
        print("python listeners at exit:", sum("Python" in x for x in left), flush=True)

    # Registered after PySpark's own exit hook: it runs before it, when the JVM still
    # answers, and after whatever the stream registers (last in, first out).
    atexit.register(listeners_left)
    events = spark.readStream.text(sys.argv[1] + "/*/*/*.json")
    query = Sessionizer().stream(events, output=sys.argv[2], checkpoint=sys.argv[3])
    query.awaitTermination()
    """
)


def test_a_script_that_awaits_its_stream_ends_without_a_listener_left(tmp_path):
    inp = generate(tmp_path / "in", hours=1, users=50, events_per_hour=500, files_per_hour=1)
    script = tmp_path / "stream.py"
    script.write_text(SCRIPT)
    done = subprocess.run(
        [sys.executable, str(script), str(inp), str(tmp_path / "out"), str(tmp_path / "chk")],
        capture_output=True,
        text=True,
        env=cli_env(PYSPARK_PYTHON=sys.executable),
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "python listeners at exit: 0" in done.stdout, done.stdout
    assert "StreamingQueryListenerBus" not in done.stderr
    assert "Connection refused" not in done.stderr
