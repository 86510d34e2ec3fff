"""Spark's Python worker daemon, importing PySpark from its installed package.

Spark starts its Python daemon with `$SPARK_HOME/python/lib/pyspark.zip` first on the path,
and every worker the daemon forks imports `pyspark.worker` and the modules a task needs.
Python writes no bytecode cache for modules imported from a zip, so each worker compiles
them anew: about half a second per worker process, paid on a fresh driver's first Python
task. With a pip-installed PySpark, Spark's home is the installed package and the zip is its
own copy of the same code, whose compiled bytecode is cached beside it: the daemon imports
that instead. Any other zip (a Spark home of its own) stays first, as Spark set it.

`spark_session.get_spark` names this module as `spark.python.daemon.module` for local
masters, where the workers run this interpreter with sessionize installed.
"""

from __future__ import annotations

import os
import sys
from importlib.machinery import PathFinder

ZIP = "pyspark.zip"


def prefer_installed(path: list[str]) -> list[str]:
    """`path` without the `pyspark.zip` entries that are the installed package's own copy
    (`<package>/python/lib/pyspark.zip`); unchanged when any other zip is on it."""
    zips = [p for p in path if os.path.basename(p) == ZIP]
    if not zips:
        return path
    rest = [p for p in path if p not in zips]
    spec = PathFinder.find_spec("pyspark", rest)
    if spec is None or spec.origin is None:
        return path
    own = os.path.join(os.path.dirname(spec.origin), "python", "lib", ZIP)
    try:
        if all(os.path.samefile(z, own) for z in zips):
            return rest
    except OSError:  # a zip that is not there: Spark's own setup, left as it is
        pass
    return path


if __name__ == "__main__":
    sys.path[:] = prefer_installed(sys.path)
    from pyspark import daemon

    daemon.manager()
