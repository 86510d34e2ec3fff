"""The keyed core's public API: a `Processor` declares its key, event time, state and
outputs, and turns the state and rows of a partition's keys into an `Update`, once per
partition and micro-batch, vectorized (docs/design.md, "The keyed core").

`run_local` runs a processor over micro-batches in memory, without Spark: for trying a
processor and for its tests. The Spark engine's `stream` and `run` are not part of this
package yet.
"""

from sessionize.errors import ProcessorError
from sessionize.stateful.context import Context
from sessionize.stateful.local import LocalRun, run_local
from sessionize.stateful.processor import Output, Processor
from sessionize.stateful.update import Update

__all__ = [
    "Context", "LocalRun", "Output", "Processor", "ProcessorError", "Update", "run_local",
]  # fmt: skip
