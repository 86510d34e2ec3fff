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


def _ints(groups: pa.StructArray, name: str, default: int = 0) -> np.ndarray:
    text = groups.field(name)
    empty = pc.equal(pc.utf8_length(text), 0)
    return pc.if_else(empty, pa.scalar(str(default)), text).cast(pa.int64()).to_numpy()


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
    """ISO-8601 strings -> int64 µs, NULL where a string is not a valid time."""
    texts = texts.cast(pa.string())
    if len(texts) == 0:
        return pa.array([], pa.int64())
    matched = pc.match_substring_regex(texts, _ISO_GROUPS)
    filled = pc.if_else(matched, texts, pa.scalar("1970-01-01T00:00"))
    groups = pc.extract_regex(filled, _ISO_GROUPS)
    y, mo, d = _ints(groups, "y"), _ints(groups, "mo"), _ints(groups, "d")
    h, mi, s = _ints(groups, "h"), _ints(groups, "mi"), _ints(groups, "s")
    frac = pc.utf8_rpad(groups.field("f"), 6, "0")
    us = pc.utf8_slice_codeunits(frac, 0, 6).cast(pa.int64()).to_numpy()
    sign = np.where(pc.equal(groups.field("sign"), "-").to_numpy(zero_copy_only=False), -1, 1)
    oh, om = _ints(groups, "oh"), _ints(groups, "om")
    offset_s = sign * (oh * 3600 + om * 60)
    ok = (
        matched.fill_null(False).to_numpy(zero_copy_only=False)
        & (mo >= 1) & (mo <= 12) & (d >= 1) & (d <= _days_in_month(y, mo))
        & (h <= 23) & (mi <= 59) & (s <= 59) & (om <= 59) & (np.abs(offset_s) <= 18 * 3600)
    )  # fmt: skip
    days = _days_from_civil(y, mo, d)
    seconds = days * 86_400 + h * 3600 + mi * 60 + s - offset_s
    return pa.array(seconds * 1_000_000 + us, pa.int64(), mask=~ok)


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
