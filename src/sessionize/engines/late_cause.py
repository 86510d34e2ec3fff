"""Why most of a batch's events are late, so that its warning says which cause applies
and the fix for it (engines/warnings.py). Looked into only for such a batch, before it is
published (its late events are still staged).

- Batch mode: an hour's folder is read after the previous hour's watermark (its end). If
  its late events lie a whole number of hours before the hour it names, nearly all the
  same number, the folders are named by the wall hours of a zone that many hours ahead of
  `--input-timezone` (Paris folders read as UTC: one hour in winter); otherwise the events'
  times do not match the folder they were filed under.
- A stream of files: files are read in the order of their modification times, and on a
  tie in path order (sources/files.py). If the batch's files share a modification time
  with files of an earlier batch, the tie is the cause (files written within one
  millisecond, named in another order than they were written); otherwise the times were
  reset (`cp -r`) or the files came out of order.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

from sessionize.engines.spark_logs import file_source_entries

HOUR_US = 3_600_000_000
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
# The share of late events a whole number of hours behind that names a zone's offset.
SAME_OFFSET = 0.9


def hours_behind(times: Mapping[Any, int], watermark_us: int | None) -> dict:
    """From the late events' times (time -> events) and the watermark they missed:
    `{"hours_behind": k}` when nearly all lie within the k-th hour before it, else
    `{"hours_behind": None, "most_hours_behind": n}`."""
    if watermark_us is None or not times:
        return {}
    behind: dict[int, int] = {}
    for t, n in times.items():
        us = _us(t)
        hours = -(-(watermark_us - us) // HOUR_US)  # ceil: 1 for the hour just before
        behind[hours] = behind.get(hours, 0) + n
    k, most = max(behind.items(), key=lambda kv: kv[1])
    if k >= 1 and most >= SAME_OFFSET * sum(behind.values()):
        return {"hours_behind": k}
    return {"hours_behind": None, "most_hours_behind": max(behind)}


def tied_files(checkpoint: str, version: int) -> dict:
    """`{"tied_files": n}`: the batch's files whose modification time equals that of a
    file an earlier batch read."""
    entries = file_source_entries(checkpoint)
    earlier = {e["timestamp"] for e in entries if e["batchId"] < version}
    return {
        "tied_files": sum(e["batchId"] == version and e["timestamp"] in earlier for e in entries)
    }


def _us(t: object) -> int:
    """A time as staged outputs give it back (a datetime, UTC when naive) -> µs."""
    if isinstance(t, datetime):
        aware = t if t.tzinfo is not None else t.replace(tzinfo=UTC)
        return (aware - _EPOCH) // timedelta(microseconds=1)
    return int(t)  # type: ignore[call-overload]
