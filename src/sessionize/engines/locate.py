"""Which engine's backward half (engines/restorable.py) a checkpoint belongs to, from the
settings it recorded: each engine says whether it owns them, our store owning the rest."""

from __future__ import annotations

from sessionize.engines.restorable import RestorableState
from sessionize.engines.spark_restorable import SparkRestorable
from sessionize.engines.store_restorable import StoreRestorable

# Asked in order; the last owns every checkpoint.
_ENGINES = (SparkRestorable, StoreRestorable)


def restorable_state(
    checkpoint: str, settings: dict, recorded_uri: str | None = None, given: str | None = None
) -> RestorableState:
    """The backward half of the engine that wrote `checkpoint` (with `settings`, its
    `sessionize.json`). `recorded_uri` is the state's URI as the last run recorded it
    (its secret hidden); `given` a `--state` URI giving the secret (it must name the same
    store).

    Raises:
        ConfigError: `given` names another store, or the secret is needed and not given.
    """
    engine = next(e for e in _ENGINES if e.owns(settings))
    return engine.at(checkpoint, settings, recorded_uri, given)
