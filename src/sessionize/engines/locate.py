"""Which engine's backward half (engines/restorable.py) a checkpoint belongs to, from the
state it recorded: the engine that keeps that state (engines/choice.py) says."""

from __future__ import annotations

from sessionize.engines.choice import engine_for
from sessionize.engines.restorable import RestorableState


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
    engine = engine_for(str(settings.get("state", "")))
    return engine.restorable.at(checkpoint, settings, recorded_uri, given)
