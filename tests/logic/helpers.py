"""Builders and runners shared by the logic tests.

Both implementations — the vectorized `advance` and the plain-Python reference — are run
through the same small interface and return rows as dicts (timestamps as int µs), so that
every hand-written expectation checks both.
"""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa

from sessionize import schema
from sessionize.config import SessionRules
from sessionize.logic import StepResult, advance

from .reference import EVENT_COLUMNS, reference_advance

MIN = 60_000_000  # one minute in microseconds
T0 = 1_570_719_600_000_000  # 2019-10-10T15:00:00Z
RULES = SessionRules(gap_us=10 * MIN, lateness_us=10 * MIN, close_actions=("browser_close",))


def ev(user: int, t: int, page: str, action: str = "view", **attrs) -> dict:
    """One event; `attrs` sets site, api_version, browser, language, device_type."""
    unknown = set(attrs) - set(EVENT_COLUMNS)
    assert not unknown, unknown
    row = {c: None for c in EVENT_COLUMNS}
    row.update(user_id=user, event_time=t, page=page, action=action, **attrs)
    return row


def st(event: dict, expires_at: int = 0) -> dict:
    """A state row; `advance` recomputes `expires_at`, so its input value does not matter."""
    return {**event, "expires_at": expires_at}


def events_table(rows: list[dict]) -> pa.Table:
    return pa.Table.from_pylist([{c: r.get(c) for c in EVENT_COLUMNS} for r in rows], schema.EVENT)


def state_table(rows: list[dict]) -> pa.Table:
    return pa.Table.from_pylist(rows, schema.STATE)


def rows_of(table: pa.Table) -> list[dict]:
    """Rows as dicts, with timestamp columns as int microseconds."""
    columns = {}
    for name, column in zip(table.column_names, table.columns, strict=True):
        if pa.types.is_timestamp(column.type):
            column = column.cast(pa.int64())
        columns[name] = column
    return pa.table(columns).to_pylist()


@dataclass
class Outcome:
    sessions: list[dict]
    page_views: list[dict]
    late: list[dict]
    state_puts: list[dict]
    state_removes: list[int]
    stats: dict


def outcome_of(result: StepResult) -> Outcome:
    return Outcome(
        sessions=rows_of(result.sessions),
        page_views=rows_of(result.page_views),
        late=rows_of(result.late),
        state_puts=rows_of(result.state_puts),
        state_removes=result.state_removes.to_pylist(),
        stats=result.stats.as_dict(),
    )


def run_vectorized(state_rows, events, wb, wa, rules: SessionRules = RULES) -> Outcome:
    result = advance(
        state_table(state_rows),
        events_table(events),
        rules=rules,
        watermark_before=wb,
        watermark_after=wa,
    )
    return outcome_of(result)


def run_reference(state_rows, events, wb, wa, rules: SessionRules = RULES) -> Outcome:
    out = reference_advance(
        state_rows,
        events,
        gap_us=rules.gap_us,
        close_actions=rules.close_actions,
        watermark_before=wb,
        watermark_after=wa,
    )
    return Outcome(**out)
