"""Which line goes to which file, and when each file arrives.

An hour is cut into `files_per_hour` contiguous time slices; file k of the hour holds the
events of slice k and arrives (its mtime) just after the slice ends, strictly later than any
earlier file. Within a file lines are shuffled. A reader that takes one file per trigger in
arrival order (Spark's file source with maxFilesPerTrigger=1 orders by mtime) then computes,
before file k, a watermark of at most `end of slice k-1 - lateness`. By construction:

- an event stays in its own slice's file, or travels to the next file of the same hour only
  if it lies within `lateness / 2` of its slice's end. Duplicates are placed the same way
  (same file, or the next one under the same condition). So an event in file k is never
  older than `end of slice k-1 - lateness / 2`: with late_rate=0 nothing is ever late, for any
  lateness >= the configured one (and with lateness 0 nothing travels at all);
- files never hold another hour's events, so the Hive layout by event hour stays exact;
- held-back (late) events go to `late-00000.json` of their own hour, arriving two hours after
  that hour's last file. One is kept late only if its time is more than twice the lateness
  below the newest event of the files before it, so the watermark it meets has passed it by
  more than the lateness; the others stay on time in their normal file.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from sessionize.generate.config import HOUR_US, GeneratorConfig

HOUR_MS = HOUR_US // 1000
DISPLACE_SHARE = 0.1  # of the events allowed to travel, the share moved to the next file
DUPLICATE_NEXT_SHARE = 0.5  # of the duplicates allowed to travel, the share in the next file
LATE_AFTER_MS = 2 * HOUR_MS
MAX_DELAY_MS = 30_000


@dataclass
class FilePlan:
    """One file: positions (within the hour's events) of its valid lines, duplicates
    repeated, of its invalid lines, and the shuffled order of the two concatenated."""

    name: str  # part-00000.json or late-00000.json, without compression suffix
    arrival_ms: int
    valid: np.ndarray
    invalid: np.ndarray
    invalid_kind: np.ndarray
    invalid_variant: np.ndarray
    order: np.ndarray


@dataclass
class HourLayout:
    files: list[FilePlan]  # the hour's normal files, in arrival order
    late: FilePlan | None  # the hour's late file, if any event is held back
    duplicates: int
    invalid: int
    displaced: int


def slice_bounds(cfg: GeneratorConfig, hour: int) -> np.ndarray:
    """files_per_hour + 1 epoch-ms boundaries of the hour's slices."""
    start = cfg.start_us // 1000 + hour * HOUR_MS
    return start + (np.arange(cfg.files_per_hour + 1, dtype=np.int64) * HOUR_MS) // (
        cfg.files_per_hour
    )


def _max_delay_ms(cfg: GeneratorConfig) -> int:
    """Upper bound of a file's delay past its slice end: a tenth of the shortest slice."""
    return min(MAX_DELAY_MS, (HOUR_MS // cfg.files_per_hour) // 10)


def arrivals(cfg: GeneratorConfig, hour: int, rng: np.random.Generator) -> np.ndarray:
    """Arrival (mtime, epoch ms) of the hour's normal files: slice end + a small delay,
    at most a tenth of a slice, so arrivals strictly increase across files and hours."""
    cap = _max_delay_ms(cfg)
    delay = np.rint(cap * (0.2 + 0.8 * rng.random(cfg.files_per_hour))).astype(np.int64)
    return slice_bounds(cfg, hour)[1:] + delay


def late_arrival(cfg: GeneratorConfig, hour: int) -> int:
    """Arrival of the hour's late file: after the last file of hour+2 (whose delay is at most
    the cap), before the first file of hour+3 (whose slice is at least ten caps long)."""
    end = cfg.start_us // 1000 + (hour + 1) * HOUR_MS
    return end + LATE_AFTER_MS + math.ceil(1.5 * _max_delay_ms(cfg))


def late_hour_of_yield(cfg: GeneratorConfig, hour: int) -> int:
    """The hour after whose normal files the late file of `hour` arrives."""
    return min(hour + 2, cfg.hours - 1)


def select_late(cfg: GeneratorConfig, t_ms: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Mask of the events held back into late files (t_ms sorted, all in the window).

    Candidates are drawn at late_rate. The late file of hour h arrives after the normal files
    of hours <= min(h+2, last), whose newest event is at least M_h, the newest non-candidate
    of those hours. A candidate is kept late iff `t < M_h - 2 * lateness`; the others are
    written on time. Keeping fewer candidates only adds events to normal files, which can
    only raise those maxima, so the kept ones stay late.
    """
    n = t_ms.size
    candidate = rng.random(n) < cfg.late_rate
    if not candidate.any():
        return candidate
    hour = (t_ms - cfg.start_us // 1000) // HOUR_MS
    floor = np.iinfo(np.int64).min // 4
    newest = np.full(cfg.hours, floor, dtype=np.int64)
    np.maximum.at(newest, hour[~candidate], t_ms[~candidate])
    reach = np.maximum.accumulate(newest)[np.minimum(hour + 2, cfg.hours - 1)]
    return candidate & (t_ms * 1000 < reach * 1000 - 2 * cfg.lateness_us)


def _groups(keys: np.ndarray, values: np.ndarray, n_groups: int) -> list[np.ndarray]:
    order = np.argsort(keys, kind="stable")
    return np.split(values[order], np.cumsum(np.bincount(keys, minlength=n_groups))[:-1])


def layout_hour(
    cfg: GeneratorConfig,
    hour: int,
    t_ms: np.ndarray,
    late: np.ndarray,
    rng: np.random.Generator,
    arrival_rng: np.random.Generator,
) -> HourLayout:
    """Files of one hour; `t_ms` and `late` describe the hour's distinct events in time order."""
    n, nfiles = t_ms.size, cfg.files_per_hour
    bounds = slice_bounds(cfg, hour)
    k = np.searchsorted(bounds, t_ms, side="right") - 1
    on_time = ~late
    half_ms = cfg.lateness_us // 2000  # whole ms, so t >= end - half_ms is within lateness/2
    may_travel = on_time & (k < nfiles - 1) & (t_ms >= bounds[np.minimum(k + 1, nfiles)] - half_ms)
    u_move, u_dup, u_next, u_inv = (rng.random(n) for _ in range(4))
    kinds, variants = rng.integers(0, 7, n), rng.random(n)

    moved = may_travel & (u_move < DISPLACE_SHARE)
    placed = k + moved
    dup = on_time & (u_dup < cfg.duplicate_rate)
    dup_placed = placed + (dup & may_travel & ~moved & (u_next < DUPLICATE_NEXT_SHARE))
    inv = on_time & (u_inv < cfg.invalid_rate)

    positions = np.arange(n)
    valid_keys = np.concatenate([placed[on_time], dup_placed[dup]])
    valid_pos = np.concatenate([positions[on_time], positions[dup]])
    valid_by_file = _groups(valid_keys, valid_pos, nfiles)
    invalid_by_file = _groups(placed[inv], positions[inv], nfiles)
    arrive = arrivals(cfg, hour, arrival_rng)
    files = []
    for f in range(nfiles):
        at = invalid_by_file[f]
        files.append(
            FilePlan(
                name=f"part-{f:05d}.json",
                arrival_ms=int(arrive[f]),
                valid=valid_by_file[f],
                invalid=at,
                invalid_kind=kinds[at],
                invalid_variant=variants[at],
                order=rng.permutation(valid_by_file[f].size + at.size),
            )
        )
    late_plan = None
    if late.any():
        held = positions[late]
        late_plan = FilePlan(
            name="late-00000.json",
            arrival_ms=late_arrival(cfg, hour),
            valid=held,
            invalid=np.zeros(0, np.int64),
            invalid_kind=np.zeros(0, np.int64),
            invalid_variant=np.zeros(0),
            order=rng.permutation(held.size),
        )
    return HourLayout(
        files=files,
        late=late_plan,
        duplicates=int(dup.sum()),
        invalid=int(inv.sum()),
        displaced=int(moved.sum()),
    )
