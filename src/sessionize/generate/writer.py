"""`sessionize generate`: realistic synthetic website visits as hourly JSON files.

Users alternate visits and idle periods; think times straddle the session gap, so sessions
split where nobody planned them as well as after long idle periods and explicit closes
(see generate/visits.py). Files follow the input contract (docs/design.md, "Events"), laid out
`OUTPUT/event_date=YYYY-MM-DD/event_hour=HH/part-NNNNN.json[.gz]`, with duplicates, invalid
lines, events out of order within and across files, and, on request, late events held back
into `late-NNNNN.json` files that arrive two hours after their hour (see generate/layout.py).

Every file's mtime is its arrival time, strictly increasing in the order files are yielded
and written, so a file stream (which orders new files by mtime) reads them as they arrived.
The same config gives byte-identical files and mtimes. `rule_data` adds events and fields for
the session rules (see generate/rules.py), and `web_data` page URLs, referrers, user agents,
page pings and purchases (see generate/web.py), each from a random stream of its own: without
them, no draw of the other streams changes, and a seed gives the same files.
"""

from __future__ import annotations

import gzip as gzip_module
import os
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field, fields
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import pyarrow as pa

from sessionize.errors import ConfigError
from sessionize.generate import catalog
from sessionize.generate.config import GeneratorConfig, parse_hour
from sessionize.generate.identity import add_identity_data
from sessionize.generate.layout import (
    HOUR_MS,
    FilePlan,
    late_hour_of_yield,
    layout_hour,
    select_late,
)
from sessionize.generate.lines import INVALID_KINDS, HourLines
from sessionize.generate.rules import add_rule_data
from sessionize.generate.visits import make_plan, make_users, simulate
from sessionize.generate.web import add_web_data

__all__ = [
    "INVALID_KINDS",
    "GenerateSummary",
    "GeneratedFile",
    "GeneratedHour",
    "GeneratorConfig",
    "generate_events",
    "hour_dir",
    "parse_hour",
    "write_files",
]

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
# Independent random streams, so that changing one aspect never shifts another.
_USERS, _VISITS, _LATE, _LAYOUT, _ARRIVALS, _RULES, _WEB, _IDENTITY = range(8)


@dataclass(frozen=True)
class GenerateSummary:
    """What was written. Exact counts, not estimates.

    - events: distinct valid events (on-time and late), each counted once;
    - duplicates: extra identical copies of on-time events (in the same or the next file);
    - late: distinct events held back into late files (part of `events`);
    - invalid: invalid lines (each an invalid twin of an on-time event, in its file);
    - closes: on-time `browser_close` events, i.e. sessions a correct engine ends explicitly
      when nothing is late;
    - displaced: on-time events written into the file after their time slice's file;
    - visits: distinct visit_id values (planned sessions; the gap splits some of them);
    - files and lines written (lines = events + duplicates + invalid).
    """

    files: int = 0
    lines: int = 0
    events: int = 0
    duplicates: int = 0
    late: int = 0
    invalid: int = 0
    closes: int = 0
    displaced: int = 0
    visits: int = 0

    def __add__(self, other: GenerateSummary) -> GenerateSummary:
        return GenerateSummary(
            **{f.name: getattr(self, f.name) + getattr(other, f.name) for f in fields(self)}
        )

    def as_dict(self) -> dict[str, int]:
        return asdict(self)

    def __str__(self) -> str:
        """What was written, each count with what it counts."""
        return (
            f"{self.files:,} files, {self.lines:,} lines: {self.events:,} events "
            f"({self.late:,} of them held back into late files), {self.duplicates:,} "
            f"duplicate copies, {self.invalid:,} invalid lines; {self.visits:,} visits "
            f"planned (the gap splits some), {self.closes:,} ended by a close event, "
            f"{self.displaced:,} events written one file after their time (out of order)"
        )


@dataclass(frozen=True)
class GeneratedFile:
    """One file to write. Its lines live in an Arrow array (each with its newline), so that
    writing a file is one buffer copy; `lines` gives them as Python strings."""

    path: str  # relative to the output: event_date=.../event_hour=HH/part-00000.json[.gz]
    arrival: datetime  # UTC, millisecond precision: the file's mtime
    late: bool  # a late-NNNNN file of held-back events
    text: pa.Array = field(repr=False)  # large_string, one line per element, in file order

    @property
    def lines(self) -> list[str]:
        """The JSON lines, without newlines, in file order."""
        return [line[:-1] for line in self.text.to_pylist()]

    def content(self) -> bytes:
        """The file's uncompressed bytes."""
        return self.buffer().to_pybytes()

    def buffer(self) -> pa.Buffer:
        """The file's uncompressed bytes, without a copy."""
        if len(self.text) == 0:
            return pa.py_buffer(b"")
        offsets = np.frombuffer(self.text.buffers()[1], dtype=np.int64)
        first, last = offsets[self.text.offset], offsets[self.text.offset + len(self.text)]
        return self.text.buffers()[2][first:last]


@dataclass(frozen=True)
class GeneratedHour:
    """The files to write after generating event hour `hour`, in arrival order: the hour's
    own files, then any late files of earlier hours that arrive before the next hour's."""

    hour: datetime
    files: list[GeneratedFile]
    summary: GenerateSummary  # counts of these files; visits: those first seen in `hour`


def hour_dir(hour: datetime) -> str:
    """`event_date=YYYY-MM-DD/event_hour=HH` of a UTC hour."""
    return f"event_date={hour:%Y-%m-%d}/event_hour={hour:%H}"


def _rng(cfg: GeneratorConfig, stream: int, *more: int) -> np.random.Generator:
    return np.random.default_rng([cfg.seed, stream, *more])


def generate_events(cfg: GeneratorConfig) -> Iterator[GeneratedHour]:
    """The files of the window, hour by hour, in arrival order (see module docstring).

    Raises ConfigError when events_per_hour is too many for the users at this gap.
    Memory: about 40 bytes per event of the whole window (more while simulating), plus
    two copies of one hour's lines (~450 bytes each).
    """
    plan = make_plan(cfg)
    users = make_users(cfg, _rng(cfg, _USERS))
    visits, events = simulate(cfg, plan, _rng(cfg, _VISITS))
    if cfg.rule_data:
        users, visits, events = add_rule_data(cfg, users, visits, events, _rng(cfg, _RULES))
    if cfg.web_data:
        events = add_web_data(cfg, users, visits, events, _rng(cfg, _WEB))
    if cfg.identity_data:
        events = add_identity_data(users, visits, events, _rng(cfg, _IDENTITY))
    late = select_late(cfg, events.t_ms, _rng(cfg, _LATE))
    start_ms = cfg.start_us // 1000
    hour_of = (events.t_ms - start_ms) // HOUR_MS
    bounds = np.searchsorted(hour_of, np.arange(cfg.hours + 1))
    seen = np.zeros(visits.user.size, dtype=bool)  # visits counted in earlier hours
    is_close = events.action == catalog.CLOSE

    pending: list[tuple[int, GeneratedFile, GenerateSummary]] = []
    for h in range(cfg.hours):
        hour = cfg.start + timedelta(hours=h)
        rows = np.arange(bounds[h], bounds[h + 1])
        text = HourLines(users, visits, events, rows)
        layout = layout_hour(
            cfg,
            h,
            events.t_ms[rows],
            late[rows],
            _rng(cfg, _LAYOUT, h),
            _rng(cfg, _ARRIVALS, h),
        )
        files = [_materialize(cfg, hour, fp, text, late=False) for fp in layout.files]
        on_time = ~late[rows]
        summary = GenerateSummary(
            files=len(files),
            lines=sum(len(f.text) for f in files),
            events=int(on_time.sum()),
            duplicates=layout.duplicates,
            invalid=layout.invalid,
            closes=int((is_close[rows] & on_time).sum()),
            displaced=layout.displaced,
            visits=int((~seen[text.visit_rows]).sum()),
        )
        seen[text.visit_rows] = True
        if layout.late is not None:
            late_file = _materialize(cfg, hour, layout.late, text, late=True)
            n = len(late_file.text)
            late_summary = GenerateSummary(files=1, lines=n, events=n, late=n)
            pending.append((late_hour_of_yield(cfg, h), late_file, late_summary))
        for _, late_file, late_summary in [p for p in pending if p[0] == h]:
            files.append(late_file)
            summary = summary + late_summary
        pending = [p for p in pending if p[0] != h]
        yield GeneratedHour(hour=hour, files=files, summary=summary)


def _materialize(
    cfg: GeneratorConfig, hour: datetime, fp: FilePlan, text: HourLines, *, late: bool
) -> GeneratedFile:
    if fp.invalid.size:
        valid = text.lines.take(pa.array(fp.valid, pa.int64()))
        invalid = text.invalid(fp.invalid, fp.invalid_kind, fp.invalid_variant)
        lines = pa.concat_arrays([valid, invalid]).take(pa.array(fp.order))
    else:  # the same order, one copy less
        lines = text.lines.take(pa.array(fp.valid[fp.order], pa.int64()))
    name = fp.name + (".gz" if cfg.gzip else "")
    return GeneratedFile(
        path=f"{hour_dir(hour)}/{name}",
        arrival=_EPOCH + timedelta(milliseconds=fp.arrival_ms),
        late=late,
        text=lines,
    )


def write_files(cfg: GeneratorConfig, output: str) -> GenerateSummary:
    """Write the tree under `output` (a local directory) and return what was written.

    Each file is written under a hidden temporary name (ignored by Spark), given its arrival
    time as mtime, then renamed into place, so a stream running meanwhile never sees a half
    written file. Refuses (ConfigError) to write into hour directories that already hold
    files: a file stream would never re-read an overwritten file.
    """
    root = Path(output)
    for h in range(cfg.hours):
        d = root / hour_dir(cfg.start + timedelta(hours=h))
        if d.is_dir() and any(not p.name.startswith((".", "_")) for p in d.iterdir()):
            raise ConfigError(f"{d} already holds files; choose an empty --output")
    total = GenerateSummary()
    for generated in generate_events(cfg):
        for f in generated.files:
            _write(root / f.path, f.buffer(), f.arrival, compress=cfg.gzip)
        total = total + generated.summary
    return total


def _write(path: Path, data: pa.Buffer, arrival: datetime, *, compress: bool) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    with open(tmp, "wb") as fh:
        if compress:
            # No name and a fixed timestamp in the header: identical bytes per config. Level 1:
            # test data, where level 9 would cost ten times the time of generating it.
            with gzip_module.GzipFile(
                filename="", mode="wb", fileobj=fh, mtime=0, compresslevel=1
            ) as gz:
                gz.write(data)
        else:
            fh.write(data)
    ns = (arrival - _EPOCH) // timedelta(milliseconds=1) * 1_000_000
    os.utime(tmp, ns=(ns, ns))
    os.replace(tmp, path)
