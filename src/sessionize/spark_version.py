"""Which PySpark this process has, read once, and the Spark line each feature needs.

sessionize runs on PySpark 3.5 to 4.3 and does not install it (`pip install
'sessionize[spark]'` brings the default one where the platform has none). A module that
imports from PySpark does it inside the function that needs it, or in a module only reached
once a job starts, so `sessionize --version` and `sessionize generate` run on any line and a
missing PySpark is one line saying what to install.

A feature that needs a newer line than the one installed is refused in one line naming the
line it needs (`require`), or falls back to what every line can do (`has`), decided here
and nowhere else:

    feature                         needs   without it
    spark-rocksdb state             4.1     refused (transformWithState's Row API)
    spark-hdfs state                4.0     refused (3.5's applyInPandasWithState and pyarrow)
    kafka:// and kinesis:// inputs  4.0     refused (Python streaming data sources): pass
                                            Sessionizer.stream a platform connector's DataFrame
    maxRecordsPerTrigger of those   4.2     refused (admission control); each micro-batch
                                            reads all the input holds (sources/admission.py)
    the parse analysed once         4.0     the parse built for every micro-batch
    a wrong type named (variant)    4.0     the line read by Python (events/json_types.py)
    Arrow tables in and out         4.0     as rows and collected batches (spark_arrow)
    Java 21                         4.0     refused: set JAVA_HOME to a Java 17 (spark_session)
"""

from __future__ import annotations

import functools
import re

from sessionize.errors import EnvironmentProblem

# The lines sessionize is tested on, lowest and highest (docs/installation.md).
LOWEST = (3, 5)
HIGHEST = (4, 3)
# The line that `sessionize[spark]` and the project's own venv install.
DEFAULT = "4.3.0"

# What a feature needs: (major, minor), the reason named in its refusal.
FEATURES: dict[str, tuple[tuple[int, int], str]] = {
    "transform_with_state": ((4, 1), "transformWithState's Row API"),
    # PySpark 3.5 slices its Arrow batches at row offsets it reads back as floats (null rows
    # pad the column), which pyarrow's Cython 3 builds (those numpy 2 needs) refuse.
    "pandas_with_state": ((4, 0), "applyInPandasWithState with current pyarrow"),
    "python_stream_sources": (
        (4, 0),
        "Python streaming data sources, pyspark.sql.datasource; with the platform's "
        "Kafka connector (spark.readStream.format('kafka')), pass Sessionizer.stream its "
        "DataFrame",
    ),
    "source_admission_control": (
        (4, 2),
        "admission control of Python streaming data sources; without it every "
        "micro-batch reads all that the input holds",
    ),
    "plan_once": ((4, 0), "the classic Dataset of org.apache.spark.sql.classic"),
    "variant": ((4, 0), "the VARIANT type"),
    "column_try_cast": ((4, 0), "Column.try_cast"),
    "arrow_frames": ((4, 0), "createDataFrame of an Arrow table, DataFrame.toArrow"),
    "arrow_schema_zone": ((4, 2), "to_arrow_schema's timezone"),
    "java_21": ((4, 0), "Java 21: Spark 3.5's Arrow cannot allocate memory there"),
}


@functools.cache
def installed() -> tuple[int, int, int]:
    """The (major, minor, patch) of the PySpark this process imports, read once.

    Raises:
        EnvironmentProblem: no PySpark, or a line older than 3.5 (one line, what to install).

    Example:
        >>> installed() >= (3, 5, 0)
        True
    """
    try:
        from pyspark.version import __version__
    except ModuleNotFoundError as exc:
        if not (exc.name or "").startswith("pyspark"):
            raise
        raise EnvironmentProblem(
            "PySpark is not installed: pip install 'sessionize[spark]' (PySpark "
            f"{DEFAULT}), or run where the platform's PySpark {_range()} is installed"
        ) from None
    found = parse(__version__)
    if found[:2] < LOWEST:
        raise EnvironmentProblem(
            f"PySpark {__version__} is too old: sessionize runs on PySpark {_range()} "
            f"(pip install 'pyspark=={DEFAULT}', or a platform runtime with Spark 3.5+)"
        )
    return found


def parse(version: str) -> tuple[int, int, int]:
    """`"4.0.1"`, `"3.5.2.dev0"`, `"4.1.0-preview1"` -> (4, 0, 1), (3, 5, 2), (4, 1, 0).

    >>> parse("3.5.9")
    (3, 5, 9)
    """
    match = re.match(r"(\d+)\.(\d+)(?:\.(\d+))?", version)
    if not match:
        raise EnvironmentProblem(f"cannot read the PySpark version {version!r}")
    major, minor, patch = match.groups()
    return int(major), int(minor), int(patch or 0)


def has(feature: str) -> bool:
    """Whether the installed PySpark has `feature` (a key of FEATURES).

    >>> has("plan_once") == (installed() >= (4, 0, 0))
    True
    """
    needed, _ = FEATURES[feature]
    return installed()[:2] >= needed


def require(feature: str, what: str) -> None:
    """Refuse `what` (as the user gave it: `--state spark-rocksdb`) in one line naming the
    Spark line it needs, unless the installed PySpark has `feature`.

    Raises:
        EnvironmentProblem: the installed line is older than the feature needs.

    Example:
        >>> require("python_stream_sources", "--input kafka://...")  # on 4.0+: nothing
    """
    if has(feature):
        return
    (major, minor), reason = FEATURES[feature]
    found = ".".join(map(str, installed()))
    raise EnvironmentProblem(
        f"{what} needs Spark {major}.{minor} or newer ({reason}); this is PySpark {found}: "
        f"run it on Spark {major}.{minor}+, or choose another option"
    )


def import_problem(exc: BaseException) -> EnvironmentProblem | None:
    """A failed import of PySpark (or of a module it lacks) as the one line to print, or
    None for any other failure: the command line's last word on an exception.

    >>> import_problem(ValueError("x")) is None
    True
    """
    if not isinstance(exc, ModuleNotFoundError) or not (exc.name or "").startswith("pyspark"):
        return None
    try:
        found = ".".join(map(str, installed()))
    except EnvironmentProblem as problem:
        return problem
    return EnvironmentProblem(
        f"PySpark {found} has no module {exc.name}: sessionize runs on PySpark {_range()}; "
        "reinstall PySpark (pip install --force-reinstall 'sessionize[spark]')"
    )


def describe() -> str:
    """`PySpark 4.3.0`, or `PySpark not installed` (for `sessionize --version`)."""
    try:
        return "PySpark " + ".".join(map(str, installed()))
    except EnvironmentProblem:
        return "PySpark not installed"


def _range() -> str:
    return f"{LOWEST[0]}.{LOWEST[1]} to {HIGHEST[0]}.{HIGHEST[1]}"
