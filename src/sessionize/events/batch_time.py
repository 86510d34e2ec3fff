"""The batch's time in the reading task, for a plan that holds none.

A stream's parse is built once and run for every micro-batch (`engines/plan_once.py`), so
its plan cannot hold a batch's time. The driver sets the time as a Spark local property of
the batch's jobs, which Spark hands every task of them, and the reading task reads it there
(`FROM_JOB` in place of the time). The lines the reading task leaves to Spark's exact path
take the time along as a column (`NOW_COLUMN`), so that the exact path's limit is no
constant of the plan either.
"""

from __future__ import annotations

PROPERTY = "sessionize.batch_now_us"
# In place of a batch's time: the time is the job's PROPERTY (an empty value: no time).
FROM_JOB = "batch time from the job"
# The reading task's time on its rows, for the exact path (`parsing`'s carried prefix, so
# that the exact path's projections keep it; the final projection drops it).
NOW_COLUMN = "_carried_now_us"


def now_in_task(now_us: int | str | None) -> int | None:
    """`now_us`, or with FROM_JOB the time the task's job carries.

    Raises:
        RuntimeError: FROM_JOB in a task whose job carries no time (the driver did not
            set the property around the job, `engines.plan_once.job_property`: a bug, not
            an input).
    """
    if now_us != FROM_JOB:
        return now_us  # type: ignore[return-value]
    from pyspark import TaskContext

    context = TaskContext.get()
    value = context.getLocalProperty(PROPERTY) if context is not None else None
    if value is None:
        raise RuntimeError(f"the task's job carries no batch time ({PROPERTY})")
    return int(value) if value else None
