"""Warnings printed after a batch's line when its counters show a mistake in the input as a
whole rather than a few bad events: most events late (a backlog read out of order), or every
line invalid (a field mapping that does not fit the input), or a mapped path that matched
nothing (engines/mapping_check.py). Each is one line saying why and what to do; the batch
itself is committed as usual."""

from __future__ import annotations

import warnings
from collections.abc import Callable

from sessionize.config import counted
from sessionize.engines.mapping_check import warning_lines
from sessionize.errors import MappingWarning

# A batch that sends more than this share of its events to late_events gets a warning...
LATE_SHARE = 0.5
# ... unless they are a trickle: fewer than this share of the job's events so far (a file of
# late arrivals read on its own is what late_events is for).
TRICKLE = 0.01
SESSION_INVALID = "invalid_events"  # a session job's output of invalid lines


def late_warning(label: str, record: dict) -> str | None:
    """The warning for a batch whose events are mostly late, or None."""
    b = record["batch"]
    if not b["events_in"] or b["late"] <= LATE_SHARE * b["events_in"]:
        return None
    if b["late"] < TRICKLE * record["totals"]["events_in"]:
        return None
    head = (
        f"warning: {label} sent {b['late']:,} of its {b['events_in']:,} events to "
        "late_events (behind the watermark by more than the allowed lateness)"
    )
    given, cause = record.get("input", {}), record.get("late_cause", {})
    if "path" in given:  # batch mode: an hour's folder
        return f"{head}: {_hour_cause(given, cause)}"
    if "files" in given:
        return f"{head}: {_file_cause(cause)}"
    return (
        f"{head}: the input arrives far out of event-time order; sessionize a backlog with "
        "`sessionize batch`"
    )


def _hour_cause(given: dict, cause: dict) -> str:
    """Batch mode: the folders' zone, or the events' times (engines/late_cause.py)."""
    zone = given.get("input_timezone", "UTC")
    k = cause.get("hours_behind")
    if k:
        return (
            f"its events lie {counted(k, 'hour')} before the hour whose folder holds them, as "
            f"in folders named by the wall hours of a zone {k}h ahead of {zone}; give that "
            "zone as --input-timezone (Europe/Paris is 1h ahead of UTC in winter, 2h in "
            "summer) and reprocess from the first hour with `sessionize batch --from`"
        )
    return (
        "its events' times lie before the hour whose folder holds them (not by one offset: "
        f"the folders' zone, {zone}, is not the cause); file events under the hour of "
        "their times, or check the time field and its offsets, then reprocess from the "
        "first such hour with `sessionize batch --from`"
    )


def _file_cause(cause: dict) -> str:
    """A stream of files: a tie of modification times, or times reset or out of order."""
    tied = cause.get("tied_files")
    if tied:
        return (
            f"{counted(tied, 'file')} of the batch share their modification time with files "
            "of an earlier batch, and files with equal times are read in path order: name "
            "files so that path order is the order they are written (e.g. by hour and "
            "sequence number), or give each its own modification time"
        )
    return (
        "files are read in the order of their modification times, and a copy that resets "
        "them (cp -r) reads a backlog out of order; sessionize a backlog with `sessionize "
        "batch`, or copy it with `cp -a` to keep the times"
    )


def invalid_warning(
    label: str, record: dict, reasons: dict[str, int], invalid_output: str = SESSION_INVALID
) -> str | None:
    """The warning for a batch whose lines are all invalid, naming the most common of their
    `reasons` (reason -> lines), or None. `invalid_output`: where the job puts invalid
    input (a stateful job's is not a session job's `invalid_events`)."""
    b = record["batch"]
    if not b["records"] or b["invalid"] != b["records"]:
        return None
    common = ""
    if reasons:
        reason, count = max(reasons.items(), key=lambda kv: (kv[1], kv[0]))
        common = f"; the most common reason: '{reason}' ({counted(count, 'line')})"
    if invalid_output != SESSION_INVALID:  # a stateful job (engines/keyed.py)
        return (
            f"warning: every row of {label} is invalid ({b['records']:,} in {invalid_output}"
            f"{common}): if the input looks right, check the schema given to stateful.source "
            "(names, types, nullable) against one of its lines"
        )
    return (
        f"warning: every line of {label} is invalid ({b['records']:,} in invalid_events"
        f"{common}): if the input's events look right, check the field mapping (--user-field, "
        "--user-type, --time-field, --time-format, --page-field) against one of its lines"
    )


def mapping_warnings(record: dict, say: Callable[[str], None]) -> None:
    """Say each mapped path the batch's record judged to match nothing, in one line each,
    and warn it in Python too (`MappingWarning`): an API user's `on_batch` may go to a log
    no one reads."""
    for line in warning_lines(record):
        say(line)
        warnings.warn(line, MappingWarning, stacklevel=2)


def batch_warnings(
    label: str, record: dict, reasons: dict[str, int], invalid_output: str = SESSION_INVALID
) -> list[str]:
    """Every warning the batch `record` calls for, in print order (`reasons`: lines per
    reason of its invalid lines, when known; `invalid_output` as for `invalid_warning`)."""
    lines = (late_warning(label, record), invalid_warning(label, record, reasons, invalid_output))
    return [line for line in lines if line]
