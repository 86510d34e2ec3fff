"""`spark-submit` with a packed environment, the way Spark documents shipping a PySpark
job's dependencies: a venv holding the built wheel, packed by `venv-pack`, sent with
`--archives env.tar.gz#env` and run by the executors as `./env/bin/python`. The workers of
services/spark-cluster.sh have no sessionize of their own here: their inherited PYTHONPATH
(a checkout's src/) is emptied for the application, and a probe job asks an executor where
it imported sessionize from. The stream's outputs must equal the uninterrupted local run.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pyspark
import pytest

from tests.cluster.cluster import Cluster
from tests.distribution.builds import run, venv
from tests.helpers import assert_same_as_clean, cli_env

# The cluster's two one-core workers run one application at a time: tests/cluster runs on
# one worker of the parallel part (tests/conftest.py, ONE_WORKER).

# The application: the CLI as spark-submit's Python file, then a probe on an executor.
JOB = """
import sys
from sessionize.cli import main
main(sys.argv[1:])
from pyspark.sql import SparkSession
spark = SparkSession.builder.getOrCreate()
where = spark.sparkContext.parallelize([0], 1).map(
    lambda _: __import__("sessionize").__file__).collect()[0]
print("executor imports sessionize from", where)
"""


# Building and installing the package into a new venv takes minutes before any Spark.
@pytest.mark.timeout(1800)
def test_a_stream_submitted_with_a_packed_venv_equals_the_local_run(data, cluster: Cluster, wheel):
    root, inp = data
    work = root / "submit"
    env_dir = venv(work / "venv")
    run(env_dir / "pip", "install", "-q", wheel)  # no PySpark: the cluster's
    packed = work / "env.tar.gz"
    run(Path(sys.executable).parent / "venv-pack", "-p", work / "venv", "-o", packed)
    (work / "job.py").write_text(JOB)

    submit = Path(pyspark.__file__).parent / "bin" / "spark-submit"
    env = cli_env()
    for name in ("PYTHONPATH", "PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON"):
        env.pop(name, None)
    done = run(
        submit,
        "--master",
        cluster.master,
        "--archives",
        f"{packed}#env",
        "--conf",
        "spark.pyspark.python=./env/bin/python",
        "--conf",
        f"spark.pyspark.driver.python={env_dir / 'python'}",
        "--conf",
        "spark.executorEnv.PYTHONPATH=",  # nothing of a checkout on the workers
        "--conf",
        "spark.executor.memory=512m",
        "--conf",
        "spark.locality.wait=0",
        work / "job.py",
        "stream",
        "--input",
        inp,
        "--output",
        work / "out",
        "--checkpoint",
        work / "chk",
        "--partitions",
        "3",
        "--max-files-per-trigger",
        "1",
        env=env,
        timeout=1200,
    )
    where = done.stdout.rsplit("executor imports sessionize from ", 1)[-1].strip()
    assert "/env/lib/" in where and str(work) not in where, done.stdout[-2000:]
    assert_same_as_clean(root, work)
