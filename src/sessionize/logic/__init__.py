"""Pure, vectorized session logic (docs/design.md, "Semantics"): pyarrow + numpy, never pyspark."""

from sessionize.logic.result import StepResult, StepStats
from sessionize.logic.sessions import advance

__all__ = ["StepResult", "StepStats", "advance"]
