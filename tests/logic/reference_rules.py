"""Reference of the session rules of docs/design.md, "Semantics", for tests: one user's
events at a time, one event at a time, written from the prose and nothing else.

Events are dicts (times in int µs). A rule's per-event field is the key `change_value`
(`--split-on-change`) or `gap_us` (`--gap-field`, None meaning the fixed gap).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from zoneinfo import ZoneInfo

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
ORDER = ("explicit", "field_change", "max_duration", "midnight", "inactivity")


@dataclass(frozen=True)
class Rules:
    gap_us: int
    close_actions: tuple[str, ...]
    max_duration_us: int | None = None
    timezone: str = "UTC"
    split_at_midnight: bool = False
    change: bool = False  # events carry `change_value`
    gap_field: bool = False  # events carry `gap_us`


def to_us(moment: datetime) -> int:
    return (moment - EPOCH) // timedelta(microseconds=1)


def local_date(us: int, timezone: str) -> date:
    return (EPOCH + timedelta(microseconds=us)).astimezone(ZoneInfo(timezone)).date()


def next_midnight(us: int, timezone: str) -> int:
    """The first instant after `us` whose date in `timezone` differs: local midnight of the
    next day (zoneinfo reads a midnight that a DST gap skips with the offset before the
    gap, which is the gap's start, the first instant of the next day)."""
    day = local_date(us, timezone) + timedelta(days=1)
    midnight = datetime(day.year, day.month, day.day, tzinfo=ZoneInfo(timezone))
    return to_us(midnight)


def own_gap(event: dict, rules: Rules) -> int:
    if rules.gap_field and event.get("gap_us") is not None:
        return int(event["gap_us"])
    return rules.gap_us


@dataclass
class Session:
    events: list
    started_by_change: bool = False


def split(events: list[dict], rules: Rules) -> list[Session]:
    """One user's events, sorted by (event_time, page), cut greedily from the first."""
    sessions: list[Session] = []
    for event in events:
        if not sessions:
            sessions.append(Session([event]))
            continue
        current = sessions[-1].events
        start, t = current[0]["event_time"], event["event_time"]
        inactivity_end = max(e["event_time"] + own_gap(e, rules) for e in current)
        joins = t <= inactivity_end and current[-1]["action"] not in rules.close_actions
        if rules.max_duration_us is not None and not t - start < rules.max_duration_us:
            joins = False
        if rules.split_at_midnight and not t < next_midnight(start, rules.timezone):
            joins = False
        by_change = False
        if joins and rules.change and event.get("change_value") is not None:
            values = [e["change_value"] for e in current if e.get("change_value") is not None]
            if values and values[-1].encode() != event["change_value"].encode():
                joins, by_change = False, True
        if joins:
            current.append(event)
        else:
            sessions.append(Session([event], started_by_change=by_change))
    return sessions


def closing(sessions: list[Session], rules: Rules) -> list[tuple[int, str]]:
    """(closed_at, end_reason) of each session: the earliest moment that applies, the
    first rule in ORDER on a tie."""
    out = []
    for i, session in enumerate(sessions):
        events = session.events
        start, last = events[0]["event_time"], events[-1]
        moments = {}
        if last["action"] in rules.close_actions:
            moments["explicit"] = last["event_time"]
        if i + 1 < len(sessions) and sessions[i + 1].started_by_change:
            moments["field_change"] = sessions[i + 1].events[0]["event_time"]
        if rules.max_duration_us is not None:
            moments["max_duration"] = start + rules.max_duration_us
        if rules.split_at_midnight:
            moments["midnight"] = next_midnight(start, rules.timezone)
        moments["inactivity"] = max(e["event_time"] + own_gap(e, rules) for e in events)
        best = min(moments.values())
        out.append((best, next(r for r in ORDER if moments.get(r) == best)))
    return out


def ids_and_releases(user, sessions: list[Session], closed: list[int]) -> list[tuple[str, int]]:
    """Each session's id (`USER-STARTMILLIS`, `-2`, `-3`... for later sessions in the same
    millisecond) and release: it is emitted once the watermark is past both the
    `closed_at` of the last session sharing its millisecond and that millisecond."""
    out = []
    for i, session in enumerate(sessions):
        ms = session.events[0]["event_time"] // 1000
        same = [j for j, s in enumerate(sessions) if s.events[0]["event_time"] // 1000 == ms]
        rank = same.index(i) + 1
        text = str(user)
        if isinstance(user, str):
            text = user.replace("%", "%25").replace("-", "%2D")
        sid = f"{text}-{ms}" + (f"-{rank}" if rank > 1 else "")
        out.append((sid, max(closed[same[-1]], (ms + 1) * 1000 - 1)))
    return out
