"""How the API reads its arguments: durations, triggers and the state's home."""

from __future__ import annotations

from datetime import timedelta

from sessionize.config import parse_duration
from sessionize.errors import ConfigError

Duration = str | int | timedelta  # "10m", microseconds, or a timedelta


def duration_us(value: Duration, name: str) -> int:
    """`"10m"`, a timedelta, or microseconds -> microseconds."""
    if isinstance(value, timedelta):
        return int(value / timedelta(microseconds=1))
    if isinstance(value, int):
        return value
    try:
        return parse_duration(value)
    except ConfigError as e:
        raise ConfigError(f"{name}: {e}") from None


def parse_trigger(text: str) -> dict[str, object]:
    """`available-now` or `processing-time=30s` -> DataStreamWriter.trigger kwargs."""
    if text == "available-now":
        return {"availableNow": True}
    if text.startswith("processing-time="):
        seconds = duration_us(text.removeprefix("processing-time="), "--trigger") / 1e6
        return {"processingTime": f"{seconds:g} seconds"}
    raise ConfigError(f"--trigger '{text}': use available-now or processing-time=DURATION")


def state_uri(state: str, home: str) -> str:
    """`files` keeps the store at `home` (under the checkpoint, or the batch output's
    `_state`); `files:PATH` and server URIs are used as given."""
    return f"files:{home}" if state == "files" else state


def progress_path(explicit: str | None, root: str, name: str) -> str | None:
    """Where the progress log goes: `explicit`, else `root/name` when `root` is a local
    path (the log is appended to, which object stores cannot do)."""
    if explicit:
        return explicit
    if "://" in root and not root.startswith("file://"):
        return None
    return f"{root.removeprefix('file://').rstrip('/')}/{name}"
