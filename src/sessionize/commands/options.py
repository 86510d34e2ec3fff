"""What the commands share in their options."""

from __future__ import annotations

from sessionize.api.sessionizer import progress_path, state_uri
from sessionize.config import redact_uri
from sessionize.engines.store import EngineSettings

__all__ = ["engine_settings", "files_state_uri", "progress_path"]


def files_state_uri(state: str, home: str) -> str:
    """`--state files` keeps the store at `home` (under the checkpoint, or the output's
    `_state` in batch mode); `files:PATH` and server URIs are used as given."""
    return state_uri(state, home)


def recorded_state(state: str, home: str) -> str:
    """How a checkpoint records `--state`: `files` as is (the store under the checkpoint,
    wherever it moves), anything else as its URI without secrets."""
    return "files" if state == "files" else redact_uri(files_state_uri(state, home))


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
