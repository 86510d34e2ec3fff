"""`sessionize status`: is a driver running, what it committed last, how far the input is
ahead. Reads the checkpoint (or a batch job's output) and asks the input's server; changes
nothing, so it is safe while a driver runs."""

from __future__ import annotations

import time
from collections.abc import Mapping

from sessionize.config import counted, format_instant
from sessionize.engines.checkpoint import (
    LEASE_DIR,
    PATHS_FILE,
    last_committed_batch,
    last_offsets,
    output_lease,
    recorded,
    seen_files,
)
from sessionize.engines.mapping_check import RECORD_KEY as CHECK_KEY
from sessionize.engines.mapping_check import warning_lines
from sessionize.engines.progress import read_progress
from sessionize.engines.runner import ENGINE_TOTALS
from sessionize.errors import ConfigError
from sessionize.fs import child, is_dir, location_key
from sessionize.logic.processor import DROPPED, TOTALED
from sessionize.redaction import redact_uri
from sessionize.sinks.registry import open_sink
from sessionize.sources.registry import input_lag
from sessionize.state.lease import LeaseRecords, lease_records


def stream_status(
    checkpoint: str, *, input: str | None = None, source_options: Mapping[str, str] | None = None
) -> dict:
    """The status of the stream whose checkpoint is `checkpoint`, as a JSON-able dict."""
    if not is_dir(checkpoint):
        raise ConfigError(f"--checkpoint {checkpoint} is not a directory")
    settings = recorded(checkpoint)
    if not settings:
        raise ConfigError(f"{checkpoint} is not a sessionize checkpoint (no sessionize.json)")
    paths = recorded(checkpoint, PATHS_FILE)
    source = input or paths.get("input")
    out = {
        "checkpoint": checkpoint,
        "input": redact_uri(source) if source else source,
        "output": paths.get("output"),
        "state": settings.get("state"),
        "driver": _driver(child(checkpoint, LEASE_DIR)),
        "committed_batch": last_committed_batch(checkpoint),
        **_last(child(checkpoint, "progress.jsonl")),
    }
    if source:
        offsets = last_offsets(checkpoint)
        seen = seen_files(checkpoint)
        out["input_ahead"] = input_lag(source, source_options or {}, offsets, seen)
    return out


def batch_status(output: str) -> dict:
    """The status of the hourly batch job writing to `output`."""
    sink = open_sink(output)
    if sink.capabilities.keeps_records:  # its lease is there; a progress log only if given
        return {"output": location_key(output), "driver": _holder(output_lease(output).records)}
    if not is_dir(output):
        raise ConfigError(f"--output {output} is not a directory")
    return {
        "output": output,
        "driver": _driver(child(output, LEASE_DIR)),
        **_last(child(output, "_progress.jsonl")),
    }


def _driver(lease_dir: str) -> dict:
    return _holder(lease_records(lease_dir))


def _holder(records: LeaseRecords) -> dict:
    holder = records.latest()
    if holder is None:
        return {"running": False}
    running = not holder.presumed_dead(time.time())
    return {
        "running": running,
        "host": holder.host,
        "pid": holder.pid,
        "started": holder.started,
        "epoch": holder.epoch,
    }


def _last(progress_log: str) -> dict:
    records = read_progress(progress_log)
    if not records:
        return {"last_batch": None}
    last = records[-1]
    checked = next((r for r in reversed(records) if CHECK_KEY in r), None)
    unmatched = checked[CHECK_KEY]["unmatched"] if checked else []
    batch = last.get("batch", {})
    totals = last.get("totals", {})
    return {
        "last_batch": last["version"],
        "committed_at": last.get("committed_at"),
        "last_duration_s": last.get("duration_s"),
        "watermark": format_instant(last.get("watermark")),
        "open_sessions": batch.get("open_sessions"),
        "totals": {k: totals.get(k) for k in (*ENGINE_TOTALS, *TOTALED)},
        # a processor's own, summed over the job (a gauge: its value now)
        "counters": totals.get("counters", {}),
        # the mapped paths the last run's check found in none of its first events
        **({"unmatched_fields": unmatched} if unmatched else {}),
    }


# The totals in the words of the batch lines: records are the lines read, of which
# `invalid` went to invalid_events and `events_in` are the valid events (late ones included);
# then the session processor's counters, in its words.
_TOTAL_WORDS = {
    "records": "lines read",
    "invalid": "invalid",
    "events_in": "events in",
    "late": "late",
    **TOTALED,
}


def totals_line(totals: dict) -> str:
    """`21 lines read, 4 invalid, 17 events in, ...` (what is not recorded is left out)."""
    return ", ".join(
        f"{v:,} {_TOTAL_WORDS[k]}"
        for k, v in totals.items()
        if v is not None and (v or k != DROPPED)  # only jobs that drop bots show them
    )


def describe(status: dict) -> list[str]:
    """The status as lines for a person."""
    d = status["driver"]
    if d.get("running"):
        driver = f"running on {d['host']}, pid {d['pid']}, since {d['started']}"
    elif "host" in d:
        driver = f"not running (last: {d['host']}, pid {d['pid']}, started {d['started']})"
    else:
        driver = "not running (never started)"
    lines = [f"driver: {driver}"]
    if status.get("last_batch") is None:
        lines.append("last batch: none committed")
    else:
        opened = status.get("open_sessions")  # a session job's
        lines.append(
            f"last batch: {status['last_batch']} committed {status['committed_at']} "
            f"in {status['last_duration_s']:.1f}s; watermark {status['watermark'] or 'none'}"
            + ("" if opened is None else f"; {counted(opened, 'open session')}")
        )
        mine = "".join(f", {v:,} {k}" for k, v in sorted(status.get("counters", {}).items()))
        lines.append("totals: " + totals_line(status["totals"]) + mine)
    lines += warning_lines({CHECK_KEY: {"unmatched": status.get("unmatched_fields", [])}})
    ahead = status.get("input_ahead")
    if ahead and "unread" in ahead:
        u = ahead["unread"]
        lines.append(
            f"input ahead: {counted(u['files'], 'file')} ({counted(u['bytes'], 'byte')}) "
            "not read yet"
        )
    elif ahead:
        lines.append("input ahead: " + ", ".join(f"{k}: {v}" for k, v in ahead["lag"].items()))
    return lines
