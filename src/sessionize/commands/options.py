"""What the commands share in their options."""

from __future__ import annotations

from sessionize.api.arguments import progress_path, state_uri
from sessionize.api.recorded import recorded_state
from sessionize.engines.store import EngineSettings

__all__ = ["engine_settings", "progress_path", "recorded_state", "state_uri"]


def engine_settings(opts) -> EngineSettings:
    """What the store engine's tasks need, from a StreamOptions or a BatchOptions."""
    return EngineSettings(
        rules=opts.rules,
        partitions=opts.partitions,
        state_uri=opts.state_uri(),
        job=opts.job,
        output=opts.output,
        output_format=opts.output_format,
        max_future_us=opts.max_future_us,
        mapping=opts.mapping,
    )
