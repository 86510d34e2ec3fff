"""Event times as microseconds since the epoch (UTC), vectorized, exactly as Spark reads them.

ISO-8601: the rule's pattern (`rules.ISO_8601`, ASCII digits), then Spark's calendar rules
(proleptic Gregorian; month, day, hour 0-23, minute and second 0-59; an offset of at most
18:00); a fraction is cut to the microsecond; no offset means UTC. Epoch numbers: Spark's
`round(x * unit)` in doubles (half away from zero), kept when the double lies within the
years 0001-9999 (`rules.MIN_US`, `rules.MAX_US`, compared as doubles).
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from sessionize.events.rules import EPOCH_UNIT_US, MAX_US, MIN_US

_US_PER_DAY = 86_400_000_000
_ISO_GROUPS = (
    r"^(?P<y>\d{4})-(?P<mo>\d{2})-(?P<d>\d{2})[T ](?P<h>\d{2}):(?P<mi>\d{2})"
    r"(?::(?P<s>\d{2})(?:\.(?P<f>\d{1,9}))?)?"
    r"(?P<z>Z|(?P<sign>[+-])(?P<oh>\d{2}):?(?P<om>\d{2}))?$"
)
# Characters Java's `$` lets end a line before the end of the text: a time that ends with
# one is not decided here (the caller's exact path decides it).
JAVA_LINE_ENDS = ("\n", "\r", "\u0085", "\u2028", "\u2029")
# The longest text the pattern admits: 10 + 1 + 8 + 10 + 6 characters, and one past it.
_WIDTH = 36


def string_offsets(texts: pa.StringArray) -> np.ndarray:
    """Where each value of a `string` array starts in its data buffer, and the last one
    ends (n + 1 int32s; the array's own offset taken into account)."""
    return np.frombuffer(texts.buffers()[1], np.int32, len(texts) + 1, texts.offset * 4)


def _number(chars: np.ndarray, at: np.ndarray, count: int) -> np.ndarray:
    """The number written by `count` digits from column `at` (one per row) of `chars`."""
    rows = np.arange(len(chars))
    value = np.zeros(len(chars), np.int64)
    for j in range(count):
        value = value * 10 + chars[rows, at + j] - 48
    return value


def _characters(texts: pa.StringArray, ok: np.ndarray) -> np.ndarray:
    """The first _WIDTH bytes of each text where `ok` (0 past its end, all 0 elsewhere), as
    rows of bytes: the pattern admits only ASCII, so a byte is a character."""
    offsets = string_offsets(texts)
    data = texts.buffers()[2]
    raw = np.frombuffer(data, np.uint8) if data is not None else np.zeros(0, np.uint8)
    padded = np.concatenate([raw, np.zeros(_WIDTH, np.uint8)])
    windows = np.lib.stride_tricks.sliding_window_view(padded, _WIDTH)
    lengths = np.where(ok, np.diff(offsets), 0)
    return np.where(np.arange(_WIDTH) < lengths[:, None], windows[offsets[:-1]], 0).astype(np.uint8)


def _pair(chars: np.ndarray, at: int) -> np.ndarray:
    """The two-digit number at column `at` of every row."""
    return chars[:, at].astype(np.int64) * 10 + chars[:, at + 1] - 528  # 528 = 11 * ord("0")


def _days_from_civil(y: np.ndarray, m: np.ndarray, d: np.ndarray) -> np.ndarray:
    """Days since 1970-01-01 of proleptic Gregorian dates (H. Hinnant's algorithm)."""
    y = y - (m <= 2)
    era = np.floor_divide(y, 400)
    yoe = y - era * 400
    mp = (m + 9) % 12
    doy = (153 * mp + 2) // 5 + d - 1
    doe = yoe * 365 + yoe // 4 - yoe // 100 + doy
    return era * 146_097 + doe - 719_468


def _days_in_month(y: np.ndarray, m: np.ndarray) -> np.ndarray:
    leap = ((y % 4 == 0) & (y % 100 != 0)) | (y % 400 == 0)
    days = np.array([0, 31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31])[np.clip(m, 0, 12)]
    return days + ((m == 2) & leap)


def iso_micros(texts: pa.Array) -> pa.Array:
    """ISO-8601 strings -> int64 µs, NULL where a string is not a valid time.

    The pattern (RE2, in Arrow) decides the form; the fields are then read at the
    positions it allows, in numpy."""
    texts = texts.cast(pa.string())
    n = len(texts)
    if n == 0:
        return pa.array([], pa.int64())
    matched = pc.match_substring_regex(texts, _ISO_GROUPS).fill_null(False)
    ok = matched.to_numpy(zero_copy_only=False)
    c = _characters(texts, ok)
    y, mo, d = _pair(c, 0) * 100 + _pair(c, 2), _pair(c, 5), _pair(c, 8)
    h, mi = _pair(c, 11), _pair(c, 14)
    rows = np.arange(n)
    seconds = c[:, 16] == ord(":")  # else a zone or the end follows the minutes
    s = np.where(seconds, _pair(c, 17), 0)
    at = np.where(seconds, 19, 16)
    dot = c[rows, at] == ord(".")
    digits = c[rows[:, None], at[:, None] + 1 + np.arange(9)]
    run = np.logical_and.accumulate((digits >= 48) & (digits <= 57), axis=1) & dot[:, None]
    us = ((digits[:, :6].astype(np.int64) - 48) * run[:, :6]) @ 10 ** np.arange(5, -1, -1)
    at = at + np.where(dot, 1 + run.sum(axis=1), 0)
    zone = c[rows, at]
    sign = np.where(zone == ord("-"), -1, 1) * ((zone == ord("+")) | (zone == ord("-")))
    oh = _number(c, at + 1, 2)
    om = _number(c, np.where(c[rows, at + 3] == ord(":"), at + 4, at + 3), 2) * (sign != 0)
    offset_s = sign * (oh * 3600 + om * 60)
    ok &= (
        (mo >= 1) & (mo <= 12) & (d >= 1) & (d <= _days_in_month(y, mo))
        & (h <= 23) & (mi <= 59) & (s <= 59) & (om <= 59) & (np.abs(offset_s) <= 18 * 3600)
    )  # fmt: skip
    days = _days_from_civil(y, mo, d)
    total = days * 86_400 + h * 3600 + mi * 60 + s - offset_s
    return pa.array(np.where(ok, total * 1_000_000 + us, 0), pa.int64(), mask=~ok)


def exact_times(texts: pa.Array) -> np.ndarray:
    """Whether each string is a time the caller's exact path decides: one starting with the
    year 0 (`0000`) or ending with one of JAVA_LINE_ENDS (in UTF-8: its last bytes)."""
    texts = texts.cast(pa.string())
    n = len(texts)
    if n == 0 or texts.buffers()[2] is None:
        return np.zeros(n, bool)
    offsets = string_offsets(texts)
    starts, ends = offsets[:-1], offsets[1:]
    pad = np.zeros(4, np.uint8)  # so that every place looked at is inside
    raw = np.concatenate([pad, np.frombuffer(texts.buffers()[2], np.uint8), pad])
    size = ends - starts
    year0 = (size >= 4) & np.all(raw[starts[:, None] + 4 + np.arange(4)] == ord("0"), axis=1)
    out = year0
    for end in JAVA_LINE_ENDS:
        tail = np.frombuffer(end.encode(), np.uint8)
        at = ends[:, None] + 4 - len(tail) + np.arange(len(tail))
        out |= (size >= len(tail)) & np.all(raw[at] == tail, axis=1)
    return out & texts.is_valid().to_numpy(zero_copy_only=False)


def half_away_from_zero(x: np.ndarray) -> np.ndarray:
    """Round doubles to whole numbers, halves away from zero (Spark's `round`)."""
    a = np.abs(x)
    whole = np.floor(a)
    return np.copysign(whole + (a - whole >= 0.5), x)


def epoch_micros(numbers: np.ndarray | list[float | int | None], time_format: str) -> pa.Array:
    """JSON numbers of epoch ms or s -> int64 µs, NULL where missing or out of range.

    As Spark computes it: the number as a double, times the unit, rounded, compared with
    the range as doubles, then cast to a long."""
    if isinstance(numbers, np.ndarray):
        x = numbers.astype(np.float64)  # NULL as NaN
    else:
        x = np.array([np.nan if n is None else float(n) for n in numbers], dtype=np.float64)
    with np.errstate(invalid="ignore", over="ignore"):
        us = half_away_from_zero(x * float(EPOCH_UNIT_US[time_format]))
        ok = (us >= float(MIN_US)) & (us <= float(MAX_US))
    return pa.array(np.where(ok, us, 0).astype(np.int64), pa.int64(), mask=~ok)
