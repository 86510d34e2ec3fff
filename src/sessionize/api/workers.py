"""Whether Spark's Python workers can run our tasks, checked before the first job.

The tasks import `sessionize` in the Python that Spark starts for them: `PYSPARK_PYTHON`
(or `spark.pyspark.python`) as it was when the session started, else the `python3` on
PATH. A job started with `.venv/bin/python job.py` without the venv activated has a driver
that imports sessionize and workers that cannot: the first job would fail after a while
with a long trace. One tiny probe job per session tells, and the failure becomes one line.
The probe is what counts, not the path: on a cluster the workers' Python legitimately
lives elsewhere. Only where the workers are this very interpreter (a local master running
`sys.executable`) is the probe skipped.
"""

from __future__ import annotations

import os
import re
import shutil
import sys
from collections.abc import Iterator

import pyarrow as pa
from pyspark.sql import SparkSession

from sessionize.errors import EnvironmentProblem
from sessionize.spark_session import is_connect

# Application ids of the sessions whose workers passed the probe (one probe per session).
_CHECKED: set[str] = set()
_MISSING = re.compile(r"No module named '([^']+)'")


def check_workers(spark: SparkSession) -> None:
    """Raise the one-line EnvironmentProblem when Spark's Python workers cannot import
    sessionize (or what it needs).

    Args:
        spark: the session whose workers will run the tasks.

    Raises:
        EnvironmentProblem: a worker could not import a module; the line says what to set.

    Example:
        >>> check_workers(df.sparkSession)  # before the first job on df
    """
    if is_connect(spark):
        return  # the server's workers: the Connect server's setup (README, cluster)
    context = spark.sparkContext
    if context.applicationId in _CHECKED or _same_interpreter(context):
        return
    try:
        spark.range(1, numPartitions=1).mapInArrow(_probe, "ok boolean").collect()
    except Exception as exc:
        missing = _MISSING.search(str(exc))
        if missing is None:
            raise
        raise EnvironmentProblem(
            f"Spark's Python workers cannot import {missing.group(1)} (they run "
            f"{context.pythonExec}): start the SparkSession with "
            f"PYSPARK_PYTHON={sys.executable} set in the environment (or install sessionize "
            "into the workers' Python)"
        ) from None
    _CHECKED.add(context.applicationId)


def _same_interpreter(context) -> bool:
    """A local master whose workers run this very Python: they import what it imports."""
    if not context.master.startswith("local"):
        return False
    # Paths, not files: a venv's python is a link to the base interpreter, which does not
    # see the venv's packages.
    found = shutil.which(context.pythonExec)
    return found is not None and os.path.abspath(found) == os.path.abspath(sys.executable)


def _probe(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    # Unpickling this function on a worker imports sessionize.api.workers; the tasks need
    # the session logic as well.
    import sessionize.logic  # noqa: F401

    for _ in batches:
        pass
    yield pa.RecordBatch.from_pydict({"ok": [True]})
