"""What the session engines (engines/sessions.py, engines/spark_state.py) report of a batch:
the engine's counts and the session processor's counters (logic/processor.py), summed over
the job and shown in the one line per batch."""

from __future__ import annotations

from sessionize.config import counted, format_instant
from sessionize.logic.processor import DROPPED, TOTALED

# The session processor's counters a session job sums (the engine's own come first).
SUMMED = tuple(TOTALED)


def session_line(label: str, record: dict) -> str:
    """The one line printed per batch: the lines read (records of the input), of which
    invalid (to invalid_events) and events in (valid events, late ones included), then the
    sessions out, the late events, the bot events dropped (a job with `--bots drop` that
    dropped some), the sessions left open and the watermark after."""
    b = record["batch"]
    bots = b.get(DROPPED) or 0
    dropped = f"{counted(bots, 'bot event')} dropped, " if bots else ""
    return (
        f"{label}: {counted(b['records'], 'line')} read, {b['invalid']:,} invalid, "
        f"{counted(b['events_in'], 'event')} in, {counted(b['sessions_out'], 'session')} out, "
        f"{b['late']:,} late, {dropped}{counted(b['open_sessions'], 'open session')}, "
        f"watermark {format_instant(record['watermark']) or 'none'}, "
        f"{record['duration_s']:.1f}s"
    )
