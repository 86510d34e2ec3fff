"""Event times as microseconds since the epoch (UTC), vectorized, exactly as Spark reads them.

ISO-8601: the rule's pattern (`rules.ISO_8601`, ASCII digits; matched in numpy), then
Spark's calendar rules (proleptic Gregorian; month, day, hour 0-23, minute and second 0-59;
an offset of at most 18:00); a fraction is cut to the microsecond; no offset means UTC.
Epoch numbers: Spark's `round(x * unit)` in doubles (half away from zero), kept when the
double lies within the valid years 0002-9998 (`rules.MIN_US`, `rules.MAX_US`, compared as
doubles).
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from sessionize.events.rules import EPOCH_UNIT_US, MAX_US, MIN_US

# Characters Java's `$` lets end a line before the end of the text: a time that ends with
# one is not decided here (the caller's exact path decides it).
JAVA_LINE_ENDS = ("\n", "\r", "\u0085", "\u2028", "\u2029")
# The longest text the pattern admits: 10 + 1 + 8 + 10 + 6 characters, and one past it.
_WIDTH = 36
# Where the pattern has a digit up to the minutes: yyyy-mm-ddThh:mm.
_DATE_DIGITS = (0, 1, 2, 3, 5, 6, 8, 9, 11, 12, 14, 15)
_MINUS, _PLUS, _COLON, _DOT = ord("-"), ord("+"), ord(":"), ord(".")


def string_offsets(texts: pa.StringArray) -> np.ndarray:
    """Where each value of a `string` array starts in its data buffer, and the last one
    ends (n + 1 int32s; the array's own offset taken into account)."""
    return np.frombuffer(texts.buffers()[1], np.int32, len(texts) + 1, texts.offset * 4)


class _Bytes:
    """The byte of each text at a place (one place per text, or the same for all), 0 past
    its end and in the texts not looked at: the pattern admits only ASCII, so a byte is a
    character."""

    def __init__(self, texts: pa.StringArray, looked_at: np.ndarray) -> None:
        offsets = string_offsets(texts)
        data = texts.buffers()[2]
        raw = np.frombuffer(data, np.uint8) if data is not None else np.zeros(0, np.uint8)
        self._padded = np.concatenate([raw, np.zeros(_WIDTH + 6, np.uint8)])
        self._starts = offsets[:-1].astype(np.int64)
        self._size = np.where(looked_at, np.diff(offsets), 0)

    def at(self, place: int | np.ndarray) -> np.ndarray:
        return np.where(place < self._size, self._padded[self._starts + place], 0)


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

    The pattern (`rules.ISO_8601`, `$` the end of the text) is matched in numpy, one place
    of every text at a time: fixed places up to the minutes, then the seconds, the
    fraction's digits and the zone where they begin; the fields are read at the same
    places (small integers in 32 bits, the µs in 64)."""
    texts = texts.cast(pa.string())
    n = len(texts)
    if n == 0:
        return pa.array([], pa.int64())
    size = np.diff(string_offsets(texts))
    ok = texts.is_valid().to_numpy(zero_copy_only=False) & (size >= 16) & (size < _WIDTH)
    text = _Bytes(texts, ok)
    c = [text.at(j) for j in range(30)]  # up to the fraction's 9th digit, and one more
    d = [column - np.uint8(48) for column in c]  # 0-9 a digit, any other byte (0 too) above
    for j in _DATE_DIGITS:
        ok &= d[j] < 10
    ok &= (c[4] == _MINUS) & (c[7] == _MINUS) & (c[13] == _COLON)
    ok &= (c[10] == ord("T")) | (c[10] == ord(" "))
    seconds = c[16] == _COLON  # else a zone or the end follows the minutes
    ok &= ~seconds | ((d[17] < 10) & (d[18] < 10))
    dot = seconds & (c[19] == _DOT)
    run = dot.copy()  # still in the fraction's digits
    count = np.zeros(n, np.int32)  # the fraction's digits, 10 when too many
    us = np.zeros(n, np.int32)
    for i in range(10):
        run &= d[20 + i] < 10
        count += run
        if i < 6:
            us += np.where(run, d[20 + i].astype(np.int32) * 10 ** (5 - i), 0)
    ok &= ~dot | ((count >= 1) & (count <= 9))
    at = np.where(seconds, 19, 16).astype(np.int32) + np.where(dot, 1 + count, 0)
    zone = [text.at(at + k) for k in range(6)]  # where the zone begins, and on
    zd = [z - np.uint8(48) for z in zone]
    signed = (zone[0] == _PLUS) | (zone[0] == _MINUS)
    colon = zone[3] == _COLON  # +hh:mm, else +hhmm
    m1, m2 = np.where(colon, zd[4], zd[3]), np.where(colon, zd[5], zd[4])
    digits = (zd[1] < 10) & (zd[2] < 10) & (m1 < 10) & (m2 < 10)
    ok &= (
        (at == size)  # no zone
        | ((zone[0] == ord("Z")) & (at + 1 == size))
        | (signed & digits & (at + np.where(colon, 6, 5) == size))
    )
    zoned = signed & ok
    oh = np.where(zoned, zd[1].astype(np.int32) * 10 + zd[2], 0)
    om = np.where(zoned, m1.astype(np.int32) * 10 + m2, 0)
    offset_s = np.where(zone[0] == _MINUS, -1, 1) * (oh * 3600 + om * 60)

    def number(*places: int) -> np.ndarray:
        value = d[places[0]].astype(np.int32)
        for j in places[1:]:
            value = value * 10 + d[j]
        return value

    y, mo, day = number(0, 1, 2, 3), number(5, 6), number(8, 9)
    h, mi = number(11, 12), number(14, 15)
    s = np.where(seconds, number(17, 18), 0)
    ok &= (
        (mo >= 1)
        & (mo <= 12)
        & (day >= 1)
        & (day <= _days_in_month(y, mo))
        & (h <= 23)
        & (mi <= 59)
        & (s <= 59)
        & (om <= 59)
        & (np.abs(offset_s) <= 18 * 3600)
    )
    days = _days_from_civil(y, mo, day).astype(np.int64)
    total = days * 86_400 + (h * 3600 + mi * 60 + s - offset_s)
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
    out = size >= 4
    for i in range(4):
        out &= raw[starts + 4 + i] == ord("0")
    last = [raw[ends + 4 - i] for i in (1, 2, 3)]  # the last byte, the one before, ...
    for end in JAVA_LINE_ENDS:
        tail = end.encode()[::-1]
        match = size >= len(tail)
        for i, byte in enumerate(tail):
            match &= last[i] == byte
        out |= match
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
