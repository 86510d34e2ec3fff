"""The backward half of an engine: what a stopped stream's checkpoint keeps of its past.

Going forward, an engine runs batches; going backward, the tools (`sessionize history`,
`rewind`, `status`, `state ...`) need from it, for one checkpoint: how far back its state is
still kept, the record of a batch, what a rewind to batch N drops and the dropping itself,
and whether the state tools can read it. Each engine answers for its own state (our
store: engines/store_restorable.py; Spark's state store: engines/spark_restorable.py), so
the tools ask without knowing which engine wrote the checkpoint; `engines/locate.py` finds
it from the state the checkpoint recorded (engines/choice.py).
"""

from __future__ import annotations

from abc import ABC, abstractmethod


class RestorableState(ABC):
    """One stopped stream's state as the backward tools see it."""

    checkpoint: str

    @classmethod
    @abstractmethod
    def at(
        cls, checkpoint: str, settings: dict, recorded_uri: str | None, given: str | None
    ) -> RestorableState:
        """The state of `checkpoint` (see engines.locate.restorable_state)."""

    @abstractmethod
    def floors(self) -> dict[str, int]:
        """The oldest batch each kept part of the state still allows, by what keeps it
        (`{}`: nothing is kept yet)."""

    @abstractmethod
    def restorable(self, batches: set[int]) -> set[int]:
        """Those of `batches` (committed in Spark's logs) whose state is still kept whole."""

    @abstractmethod
    def record(self, batch: int) -> dict | None:
        """The engine's record of a committed batch (counters, watermark, input), if kept."""

    @abstractmethod
    def describe_drop(self, to_batch: int) -> str:
        """What a rewind to after `to_batch` drops of the state, for a person."""

    @abstractmethod
    def truncate_after(self, to_batch: int) -> None:
        """The state back to its version after batch `to_batch` (-1: nothing left);
        idempotent, so that an interrupted rewind completes when run again."""

    @abstractmethod
    def check_readable(self, what: str) -> None:
        """Raises ConfigError (one line; `what` names the job) unless the state tools
        (`state inspect/export/migrate/repartition`) can read this state."""

    @abstractmethod
    def check_importable(self, what: str) -> None:
        """Raises ConfigError unless `sessionize state import` can move this state."""
