"""The keyed core: a `Processor` declares its key, event time, state and outputs, and turns
the state and rows of a partition's keys into an `Update`, once per partition and
micro-batch, vectorized (docs/design.md, "The keyed core").

This package is below everything but the store and the base modules: it knows keys, state
rows, timers, outputs and batches, never Spark, a sink or sessions. Users import its API
through `sessionize.stateful`, which adds the ways to run a processor on Spark; `run_local`
runs one over micro-batches in memory, without Spark.
"""

from __future__ import annotations

from sessionize.core.context import Context
from sessionize.core.local import LocalRun, run_local
from sessionize.core.processor import FollowOn, Output, Processor
from sessionize.core.update import Update
from sessionize.errors import ProcessorError

__all__ = [
    "Context",
    "FollowOn",
    "LocalRun",
    "Output",
    "Processor",
    "ProcessorError",
    "Update",
    "run_local",
]
