"""The hour folders of a file tree, `INPUT/event_date=YYYY-MM-DD/event_hour=HH/`, named by
the wall hours of one zone (`--input-timezone`, default UTC).

A folder holds the events of the instants whose wall time in that zone falls in its hour:
one hour of instants, two on the day a daylight saving change repeats a wall hour (Paris,
last Sunday of October: `event_hour=02` holds 00:00-02:00 UTC), none on the day one is
skipped (last Sunday of March: there is no `event_hour=02`). Batch mode runs one folder at a
time: its version is the folder's name (YYYYMMDDHH) and its watermark the end of its
instants.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from sessionize.fs import child
from sessionize.timezones import zone

HOUR = timedelta(hours=1)


@dataclass(frozen=True)
class FolderHour:
    """One hour folder: its name (a wall time of the zone, without one) and the instants
    it holds, [start, end), in µs since the epoch."""

    name: datetime
    start_us: int
    end_us: int

    @property
    def version(self) -> int:
        return int(self.name.strftime("%Y%m%d%H"))


def folder_hour(name: datetime, tz: str) -> FolderHour | None:
    """The folder of wall hour `name` in zone `tz`; None for a wall hour the zone skips."""
    z = zone(tz)
    wall = name.replace(minute=0, second=0, microsecond=0, tzinfo=None)
    start = wall.replace(tzinfo=z, fold=0).astimezone(UTC)  # the first such instant
    end = (wall + HOUR).replace(tzinfo=z, fold=0).astimezone(UTC)
    if end <= start:
        return None
    return FolderHour(wall, _us(start), _us(end))


def folder_hours(
    first: datetime, last: datetime, tz: str
) -> tuple[list[FolderHour], list[datetime]]:
    """(the folders from wall hour `first` to `last`, inclusive, in order; the wall hours
    between them that the zone skips)."""
    hours: list[FolderHour] = []
    skipped: list[datetime] = []
    name = first.replace(tzinfo=None)
    while name <= last.replace(tzinfo=None):
        found = folder_hour(name, tz)
        if found:
            hours.append(found)
        else:
            skipped.append(name)
        name += HOUR
    return hours, skipped


def previous_folder(name: datetime, tz: str) -> FolderHour:
    """The folder before wall hour `name` (a skipped hour has none: the one before it)."""
    before = name.replace(tzinfo=None) - HOUR
    found = folder_hour(before, tz)
    return found if found is not None else previous_folder(before, tz)


def folder_path(root: str, name: datetime) -> str:
    """Where the folder of wall hour `name` is."""
    return child(root, f"event_date={name:%Y-%m-%d}", f"event_hour={name:%H}")


def _us(t: datetime) -> int:
    return int(t.timestamp()) * 1_000_000
