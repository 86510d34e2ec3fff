"""A job run with the venv's Python, not activated: Spark's workers start the `python3` on
PATH, which has no sessionize. The API says so in one line before the first job, naming
the PYSPARK_PYTHON to set; with the venv's Python there, the probe passes and the job runs.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

# The user's job; after the one line, it does what the line says (one JVM for both).
_JOB = """
import os, sys
from pyspark.sql import SparkSession
from sessionize import Sessionizer
from sessionize.errors import EnvironmentProblem

def run():
    spark = SparkSession.builder.master("local[1]").config("spark.ui.enabled", "false") \\
        .config("spark.sql.shuffle.partitions", "1").getOrCreate()
    df = spark.createDataFrame([(7, "2026-11-01T00:10:00Z", "a")],
                               "user_id long, event_time string, page string")
    try:
        result = Sessionizer(page="page", keep={}, partitions=1).sessions(df)
        print("sessions:", result.sessions.count())
    finally:
        spark.stop()

try:
    run()
except EnvironmentProblem as e:
    print("error:", e)
os.environ["PYSPARK_PYTHON"] = sys.argv[1]
run()
"""


def test_workers_without_sessionize_are_one_line_naming_pyspark_python(tmp_path: Path):
    job = tmp_path / "myjob.py"
    job.write_text(_JOB)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYSPARK_")}
    env.update(PATH="/usr/bin:/bin", SPARK_LOCAL_IP="127.0.0.1")  # python3: the system's
    assert subprocess.run(["python3", "-c", "import sessionize"], env=env).returncode == 1
    # The venv's other name for its Python: another path, so the probe job runs, and passes.
    me = Path(sys.executable)
    workers = str(me.with_name("python" if me.name != "python" else "python3"))
    assert workers != sys.executable
    done = subprocess.run(
        [sys.executable, str(job), workers],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=550,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.splitlines()[-2:] == [
        "error: Spark's Python workers cannot import sessionize (they run python3): start "
        f"the SparkSession with PYSPARK_PYTHON={sys.executable} set in the environment (or "
        "install sessionize into the workers' Python)",
        "sessions: 1",
    ], (done.stdout, done.stderr[-3000:])
