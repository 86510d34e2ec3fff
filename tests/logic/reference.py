"""Reference implementation of docs/design.md, "Semantics", for tests: plain Python, one
event at a time.

It follows the prose rules literally and favours being obviously right over being fast.
Rows are dicts; timestamps are int microseconds since the epoch; `session_date` is a
`datetime.date`. It answers the same question as `sessionize.logic.advance`, for the same
handed-in state rows and batch, so the two can be compared output by output.
"""

from __future__ import annotations

from datetime import UTC, datetime

from .reference_rules import Rules, closing, ids_and_releases, local_date, split

EVENT_COLUMNS = (
    "user_id",
    "event_time",
    "page",
    "action",
    "site",
    "api_version",
    "browser",
    "language",
    "device_type",
)
ATTRIBUTES = ("site", "api_version", "browser", "language", "device_type")
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def nulls_last(event: dict) -> tuple:
    """Sort key over all event columns (with the rules' fields when the events carry them);
    None sorts after every value."""
    columns = [*EVENT_COLUMNS, *(c for c in RULE_COLUMNS if c in event)]
    return tuple((event[c] is None, event[c] if event[c] is not None else "") for c in columns)


RULE_COLUMNS = ("change_value", "gap_us")


def event_key(event: dict) -> tuple:
    return (event["user_id"], event["event_time"], event["page"])


def split_into_sessions(events: list[dict], gap_us: int, close_actions) -> list[list[dict]]:
    """Rule 3, for one user's events already sorted by (event_time, page)."""
    return [s.events for s in split(events, Rules(gap_us, tuple(close_actions)))]


def reference_advance(
    state_rows: list[dict],
    events: list[dict],
    *,
    gap_us: int,
    close_actions,
    watermark_before: int | None,
    watermark_after: int | None,
    rules: Rules | None = None,
    schema3: bool = False,
) -> dict:
    """Same contract as `advance`; returns a dict of row lists, removes and stats.
    `rules` (default: `gap_us` and `close_actions` alone) adds the optional rules;
    `schema3` adds schema 3's `events` rows and page views (`views`)."""
    rules = rules or Rules(gap_us, tuple(close_actions))
    columns = [
        *EVENT_COLUMNS,
        *(["change_value"] if rules.change else []),
        *(["gap_us"] if rules.gap_field else []),
    ]
    open_events: dict[int, list[dict]] = {}  # user -> that user's open events
    for row in state_rows:
        event = {c: row[c] for c in columns}
        open_events.setdefault(event["user_id"], []).append(event)
    state_users = set(open_events)

    open_before = 0
    for user_events in open_events.values():
        ordered = sorted(user_events, key=lambda e: (e["event_time"], e["page"]))
        open_before += len(split(ordered, rules))

    late, on_time, duplicates = [], 0, 0
    for event in events:
        event = {c: event.get(c) for c in columns}
        if watermark_before is not None and event["event_time"] < watermark_before:
            late.append({**event, "watermark": watermark_before})
            continue
        on_time += 1
        user_events = open_events.setdefault(event["user_id"], [])
        same = [i for i, e in enumerate(user_events) if event_key(e) == event_key(event)]
        if not same:
            user_events.append(event)
            continue
        duplicates += 1
        # The smallest copy wins, even over the state's copy.
        if nulls_last(event) < nulls_last(user_events[same[0]]):
            user_events[same[0]] = event

    sessions, page_views, state_puts, state_removes = [], [], [], []
    events_out: list[dict] = []
    views_out: list[dict] = []
    open_after = 0
    for user in sorted(open_events):
        ordered = sorted(open_events[user], key=lambda e: (e["event_time"], e["page"]))
        still_open = []
        cut = split(ordered, rules)
        closed_reasons = closing(cut, rules)
        named = ids_and_releases(user, cut, [c for c, _ in closed_reasons])
        for session, (closed, reason), (sid, release) in zip(
            cut, closed_reasons, named, strict=True
        ):
            session = session.events
            if watermark_after is not None and watermark_after > release:
                day = local_date(session[0]["event_time"], rules.timezone)
                sessions.append(session_row(session, closed, reason, sid, day))
                page_views.extend(page_view_rows(session, closed, sid))
                events_out.extend(event_rows(session, sid))
                views_out.extend(view_rows(session, sid))
            else:
                still_open.append((session, release))
        if still_open:
            open_after += len(still_open)
            expires_at = min(release for _, release in still_open)
            for session, _ in still_open:
                state_puts.extend({**e, "expires_at": expires_at} for e in session)
        elif user in state_users:
            state_removes.append(user)

    late.sort(key=nulls_last)
    stats = {
        "events_in": len(events),
        "on_time": on_time,
        "late": len(late),
        "duplicates": duplicates,
        "sessions_out": len(sessions),
        "page_views_out": len(page_views),
        "open_sessions_before": open_before,
        "open_sessions_after": open_after,
        "open_users_after": len({row["user_id"] for row in state_puts}),
        "bot_events": 0,  # the reference knows no user agents
    }
    return {
        "sessions": sessions,
        "page_views": page_views,
        "late": late,
        "state_puts": state_puts,
        "state_removes": state_removes,
        "stats": stats,
        # schema 3's `events` and `page_views` (no pings in the reference's events)
        **({"events": events_out, "views": views_out} if schema3 else {}),
    }


def session_row(session: list[dict], closed: int, reason: str, sid: str, day) -> dict:
    first, last = session[0], session[-1]
    start = first["event_time"]
    return {
        "session_id": sid,
        "user_id": first["user_id"],
        "start_time": start,
        "end_time": last["event_time"],
        "closed_at": closed,
        "duration_ms": (last["event_time"] - start) // 1000,
        "event_count": len(session),
        "pages": [e["page"] for e in session],
        "end_reason": reason,
        **{a: first[a] for a in ATTRIBUTES},
        "session_date": day,
    }


def page_view_rows(session: list[dict], closed: int, sid: str) -> list[dict]:
    rows = []
    for i, event in enumerate(session):
        until = session[i + 1]["event_time"] if i + 1 < len(session) else closed
        rows.append(
            {
                "session_id": sid,
                "user_id": event["user_id"],
                "event_time": event["event_time"],
                "page": event["page"],
                "position": i + 1,
                "time_on_page_ms": (until - event["event_time"]) // 1000,
            }
        )
    return rows


# Schema 3 (docs/concepts/sessions.md, "Page views and events"), with the default options:
# page views are the `view` events; without a ping action a page view's engaged time is the
# sum over its events of min(next event - this, 30 min), the last event's time not counted.
MAX_PAGE_TIME_US = 30 * 60_000_000


def event_rows(session: list[dict], sid: str) -> list[dict]:
    rows, views = [], 0
    for i, event in enumerate(session):
        views += event["action"] == "view"
        rows.append(
            {
                "session_id": sid,
                "user_id": event["user_id"],
                "event_time": event["event_time"],
                "page": event["page"],
                "action": event["action"],
                "position": i + 1,
                "page_view_id": f"{sid}:{views}" if views else None,
            }
        )
    return rows


def view_rows(session: list[dict], sid: str) -> list[dict]:
    at = [i for i, e in enumerate(session) if e["action"] == "view"]
    rows = []
    for n, i in enumerate(at):
        end = at[n + 1] if n + 1 < len(at) else len(session)
        engaged = sum(
            min(session[j + 1]["event_time"] - session[j]["event_time"], MAX_PAGE_TIME_US)
            for j in range(i, end)
            if j + 1 < len(session)
        )
        on_page = (
            (session[at[n + 1]]["event_time"] - session[i]["event_time"]) // 1000
            if n + 1 < len(at)
            else None
        )
        rows.append(
            {
                "session_id": sid,
                "user_id": session[i]["user_id"],
                "page_view_id": f"{sid}:{n + 1}",
                "event_time": session[i]["event_time"],
                "page": session[i]["page"],
                "position": n + 1,
                "time_on_page_ms": on_page,
                "engaged_time_ms": engaged // 1000,
            }
        )
    return rows
