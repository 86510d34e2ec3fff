"""An independent reading of one JSON line by the rules of docs/design.md ("Events").

`json.loads` plus explicit type checks, a plain loop per field. It answers OPEN for the
lines that Spark's JSON reader reads differently from strict JSON (NaN and Infinity, lone
surrogates, a key twice, text that is not strict JSON, a fraction in an integer field, a
time ending in a line break): a fast reader must leave those to the exact path.
"""

from __future__ import annotations

import json
import re
from datetime import date
from decimal import ROUND_HALF_UP, Decimal

from sessionize.mapping import EventMapping

OPEN = "open"
_ISO = re.compile(
    r"(\d{4})-(\d{2})-(\d{2})[T ](\d{2}):(\d{2})(?::(\d{2})(?:\.(\d{1,9}))?)?"
    r"(Z|([+-])(\d{2}):?(\d{2}))?",
    re.ASCII,
)
_EPOCH_DAY = date(1970, 1, 1).toordinal()
# Valid event times: the years 0002-9998, inclusive.
MIN_US = (date(2, 1, 1).toordinal() - _EPOCH_DAY) * 86_400_000_000
MAX_US = (date(9999, 1, 1).toordinal() - _EPOCH_DAY) * 86_400_000_000 - 1


class _Open(Exception):
    pass


def _no_constants(name: str) -> float:
    raise _Open(name)


def _has_surrogate(value: object) -> bool:
    if isinstance(value, str):
        return any(0xD800 <= ord(c) <= 0xDFFF for c in value)
    if isinstance(value, dict):
        return any(_has_surrogate(k) or _has_surrogate(v) for k, v in value.items())
    if isinstance(value, list):
        return any(_has_surrogate(v) for v in value)
    return False


def iso_us(text: str) -> int | None | str:
    """µs of an ISO-8601 time, None when it is not one, OPEN when Java's `$` decides."""
    if text.endswith(("\n", "\r", "\u0085", "\u2028", "\u2029")):
        return OPEN
    match = _ISO.fullmatch(text)
    if match is None:
        return None
    y, mo, d, h, mi, s, frac, zone, sign, oh, om = match.groups()
    y, mo, d, h, mi = int(y), int(mo), int(d), int(h), int(mi)
    s = int(s or 0)
    if y == 0:
        return OPEN
    try:
        days = date(y, mo, d).toordinal() - _EPOCH_DAY
    except ValueError:
        return None
    if h > 23 or mi > 59 or s > 59:
        return None
    offset = 0
    if zone and zone != "Z":
        if int(om) > 59 or int(oh) * 60 + int(om) > 18 * 60:
            return None
        offset = (1 if sign == "+" else -1) * (int(oh) * 3600 + int(om) * 60)
    us = int((frac or "0").ljust(6, "0")[:6])
    return (days * 86_400 + h * 3600 + mi * 60 + s - offset) * 1_000_000 + us


def epoch_us(number: float | int, unit_us: int, limits: bool = True) -> int | None | str:
    try:
        product = float(number) * float(unit_us)
    except OverflowError:  # an integer beyond doubles: not strict JSON for orjson
        return OPEN
    if product != product or product in (float("inf"), float("-inf")):
        return None
    rounded = float(Decimal(product).to_integral_value(ROUND_HALF_UP))
    if not limits:
        return int(rounded) if abs(rounded) < 2.0**63 else OPEN
    if not float(MIN_US) <= rounded <= float(MAX_US):
        return None
    return int(rounded)


# A string holding a JSON number is that number wherever a number is read (written here
# from JSON's grammar, not taken from the code under test).
_NUMBER_STRING = re.compile(r"-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?", re.ASCII)


def _number(value: object) -> object:
    """A numeric string as the float it writes; any other value as it is."""
    if isinstance(value, str) and _NUMBER_STRING.fullmatch(value):
        return float(value)
    return value


def _get(doc: dict, path: str) -> object:
    node: object = doc
    for part in path.split("."):
        node = node.get(part) if isinstance(node, dict) else None
    return node


def read_line(line: str, m: EventMapping, now_us: int | None, max_future_us: int | None):
    """(reason, event dict) of one line, or OPEN."""
    if line.strip(" ") == "":
        return "empty line", None
    seen_twice: list[str] = []

    def pairs_hook(pairs: list) -> dict:
        keys = [k for k, _ in pairs]
        if len(set(keys)) < len(keys):
            seen_twice.append("x")
        return dict(pairs)

    try:
        doc = json.loads(line, object_pairs_hook=pairs_hook, parse_constant=_no_constants)
    except (ValueError, RecursionError, _Open):
        return OPEN
    if not isinstance(doc, dict):
        return "not a JSON object", None
    if _has_surrogate(doc):  # json.loads joins the pairs: what is left has no partner
        return "a string holds a lone surrogate (an unpaired \\uD800-\\uDFFF escape)", None
    if seen_twice:
        return OPEN
    user_kind = "string" if m.string_keys else "integer"
    time_kind = "string" if m.time_format == "iso8601" else "number"
    wanted = [(m.user, user_kind), (m.time, time_kind), (m.action, "string"), (m.page, "string")]
    wanted += [(path, "string") for _, path in m.keep]
    wanted += [(m.change, "string")] if m.change else []
    wanted += [(m.gap, "number")] if m.gap else []
    wanted += [(path, "string") for _, path in (*m.last, *m.mapped_pairs)]
    checked = []
    for path, kind in wanted:  # enclosing objects first
        parts = path.split(".")
        for i in range(1, len(parts)):
            checked.append((".".join(parts[:i]), "object"))
        checked.append((path, kind))
    done = set()
    for path, kind in checked:
        if path in done:
            continue
        done.add(path)
        value = _get(doc, path)
        if value is None:
            continue
        if kind == "object" and not isinstance(value, dict):
            return f"{path}: expected an object", None
        if kind == "string" and not isinstance(value, str):
            return f"{path}: expected a string", None
        value = _number(value) if kind == "number" else value
        if kind == "number" and (isinstance(value, bool) or not isinstance(value, int | float)):
            return f"{path}: expected a number", None
        if kind == "integer":
            if isinstance(value, float):
                return OPEN
            if isinstance(value, bool) or not isinstance(value, int):
                return f"{path}: expected an integer", None
            if not -(2**63) <= value < 2**63:
                return f"{path}: integer out of range (64-bit)", None
    user, time, page = _get(doc, m.user), _get(doc, m.time), _get(doc, m.page)
    if user is None:
        return f"missing {m.user}", None
    if time is None:
        return f"missing {m.time}", None
    if m.time_format == "iso8601":
        us = iso_us(time)
        if us == OPEN:
            return OPEN
        if us is None:
            return f"{m.time} is not an ISO-8601 timestamp", None
        if not MIN_US <= us <= MAX_US:
            return f"{m.time}: time out of range (years 0002-9998)", None
    else:
        us = epoch_us(_number(time), 1_000 if m.time_format == "epoch-ms" else 1_000_000)
        if us == OPEN:
            return OPEN
        if us is None:
            return f"{m.time}: epoch time out of range (years 0002-9998)", None
    if page is None:
        return f"missing {m.page}", None
    gap = _number(_get(doc, m.gap)) if m.gap else None
    gap_us = None
    if gap is not None:
        gap_us = epoch_us(gap, 1_000_000, limits=False)
        if gap_us == OPEN:
            return OPEN
        if gap_us is None or not 0 < gap_us <= 30 * 86_400_000_000:
            return f"{m.gap}: expected a number of seconds above 0 and at most 30 days", None
    if m.string_keys and user == "":
        return f"{m.user}: empty string", None
    if m.string_keys and len(user.encode()) > 256:
        return f"{m.user}: longer than 256 bytes (UTF-8)", None
    if now_us is not None and max_future_us is not None and us > now_us + max_future_us:
        return f"{m.time} too far in the future", None
    action = _get(doc, m.action)
    event = {
        "user_id": user,
        "event_time": us,
        "page": page,
        "action": "view" if action is None else action,
        **{name: _get(doc, path) for name, path in m.keep},
        **({"change_value": _get(doc, m.change)} if m.change else {}),
        **({"gap_us": None if gap_us is None else str(gap_us)} if m.gap else {}),
        **{name: _get(doc, path) for name, path in (*m.last, *m.mapped_pairs)},
    }
    return None, event
