"""A stream's per-batch DataFrame analysed once per query rather than once per micro-batch.

Spark analyses a DataFrame as it is built: for the parse of a micro-batch (a dozen
projections and the reading task) that is 0.15-0.25 s of the driver's time per batch, on a
plan that is the same for every batch but for its input. The DataFrame a `foreachBatch`
function receives is a leaf (`LogicalRDD`) whose columns keep the same attributes in every
micro-batch of a query, so the analysed plan built over the first batch takes each later
batch's leaf in place of the first one's, and runs marked as analysed: Spark optimizes and
plans it anew for each batch, as any DataFrame (a physical plan run twice would reuse its
shuffle output).

Spark 4.0 and later only (`spark_version`): before it, every batch is built anew, as over
Spark Connect. Only a plan that holds nothing of its batch but the leaf may be reused (the
batch's time travels in a local property of the batch's job: `events/batch_time.py`), only a classic
DataFrame has a plan to take (over Spark Connect every batch is built as before), and
only a plan that reaches the leaf through single-input steps is taken apart; any other is
built anew for every batch.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

from pyspark.sql import DataFrame

from sessionize import spark_version

# The longest chain of single-input steps from the top of a plan to its leaf taken apart.
MAX_STEPS = 64


def is_classic(df: DataFrame) -> bool:
    """Whether `df` is a classic DataFrame (a JVM plan of this process), not Spark Connect's."""
    return type(df).__module__.startswith("pyspark.sql.classic")


def can_reuse(df: DataFrame) -> bool:
    """Whether a plan over `df` can be taken apart and reused: a classic DataFrame on a
    Spark that has the JVM calls `_with_leaf` makes (4.0+, `spark_version`). Before 4.0 the
    classic DataFrame lives in `pyspark.sql.dataframe`, so `is_classic` alone says no too;
    the version check says why."""
    return spark_version.has("plan_once") and is_classic(df)


def properties_reach_jobs(df: DataFrame) -> bool:
    """Whether a local property this thread sets reaches the jobs it runs: a classic
    DataFrame of a gateway that pins each Python thread to one JVM thread (PySpark's default;
    with `PYSPARK_PIN_THREAD=false` consecutive calls may run on different JVM threads)."""
    from py4j.clientserver import ClientServer

    return is_classic(df) and isinstance(df.sparkSession.sparkContext._gateway, ClientServer)


class PlanOnce:
    """`over(raw, build)`: `build(raw)` for the first micro-batch of a query, then that
    plan with each later batch's `raw` in place of the first one's (`build` is not called).

    One per stream and kind of DataFrame built; not shared between threads.
    """

    def __init__(self) -> None:
        self._columns = ""  # the first batch's leaf: its attributes (names and ids), schema
        self._steps: list[Any] = []  # the plan's steps, from its top down to the leaf
        self.reused = 0  # batches run on the first batch's plan

    def over(self, raw: DataFrame, build: Callable[[DataFrame], DataFrame]) -> DataFrame:
        """`build(raw)`, analysed once per query (see the module)."""
        if not can_reuse(raw):
            return build(raw)  # Spark Connect, or a Spark before 4.0: built every batch
        leaf = raw._jdf.queryExecution().analyzed()
        columns = _columns(leaf)
        if self._steps and columns == self._columns:
            self.reused += 1
            return self._with_leaf(raw, leaf)
        built = build(raw)
        steps = _steps_to(built._jdf.queryExecution().analyzed(), leaf)
        self._columns, self._steps = columns, steps
        return built

    def _with_leaf(self, raw: DataFrame, leaf: Any) -> DataFrame:
        jvm = raw.sparkSession._jvm
        assert jvm is not None  # a classic session's (plans are reused there only)
        plan = leaf
        for step in reversed(self._steps):
            plan = step.withNewChildren(jvm.org.apache.spark.api.python.PythonUtils.toSeq([plan]))
        plan.setAnalyzed()  # its steps were analysed over a leaf of the same attributes
        session = raw.sparkSession
        jdf = jvm.org.apache.spark.sql.classic.Dataset.ofRows(session._jsparkSession, plan)
        return DataFrame(jdf, session)

    def __getstate__(self) -> dict:
        # A copy (the engine pickled for Spark Connect's server) starts without a plan.
        return {}

    def __setstate__(self, state: dict) -> None:
        self.__init__()  # type: ignore[misc]


def _columns(leaf: Any) -> str:
    return f"{leaf.getClass().getName()} {leaf.output().toString()} {leaf.schema().json()}"


def _steps_to(top: Any, leaf: Any) -> list[Any]:
    """The steps from `top` down to `leaf`, each with `leaf` as its only input somewhere
    below it ([]: not such a chain, the plan is not reused)."""
    steps: list[Any] = []
    node = top
    for _ in range(MAX_STEPS):
        if node.equals(leaf):
            return steps
        children = node.children()
        if children.size() != 1:
            return []
        steps.append(node)
        node = children.head()
    return []


@contextlib.contextmanager
def job_property(df: DataFrame, key: str, value: str | None) -> Iterator[None]:
    """Spark local property `key` set to `value` for the jobs this thread runs meanwhile
    (where `properties_reach_jobs`: Spark Connect has no local properties); removed after."""
    if value is None or not properties_reach_jobs(df):
        yield
        return
    context = df.sparkSession.sparkContext
    context.setLocalProperty(key, value)
    try:
        yield
    finally:
        context.setLocalProperty(key, None)  # type: ignore[arg-type]
