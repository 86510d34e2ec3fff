"""All optional session rules at once (max duration, midnight in New York, a campaign that
changes mid-visit, a per-event gap) give the reference's sessions through stream (our store,
two micro-batches, and Spark-managed state) and batch; so batch equals stream.

The events are generated across midnight in New York (04:00 UTC on 2026-11-01) and
rewritten with a campaign (`utm.campaign`) that changes every 20 minutes of a user's visit
and, for half of the users, a gap of their own (`gap_s`, seconds).
"""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest

from sessionize.commands.batch import BatchOptions, run_batch
from sessionize.commands.stream import StreamOptions, run_stream
from sessionize.config import SessionRules
from sessionize.mapping import EventMapping
from tests.helpers import generate, read_output
from tests.layouts import LATENESS_US, actual, read_events
from tests.logic.reference import reference_advance
from tests.logic.reference_rules import Rules

START = datetime(2026, 11, 1, 3, tzinfo=UTC)
HOURS = 3
MIN = 60_000_000
RULES = SessionRules(max_duration_us=40 * MIN, timezone="America/New_York", split_at_midnight=True)
MAPPING = EventMapping(change="utm.campaign", gap="gap_s")
CAMPAIGNS = ["spring", "fall", None]


def _campaign(user: int, us: int) -> str | None:
    return CAMPAIGNS[(user + us // (20 * MIN)) % 3]


def _gap_s(user: int) -> float | None:
    return {0: 120, 1: 1800.5}.get(user % 4)


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    """(the tree, its events as the reference's rows with the rules' fields)."""
    root = generate(
        tmp_path_factory.mktemp("rules") / "in",
        start=START,
        hours=HOURS,
        users=16,
        events_per_hour=200,
        invalid_rate=0.0,
        late_rate=0.0,
    )
    events = read_events(root)
    by_line = iter(events)
    for path in sorted(root.rglob("*.json")):
        lines = []
        for line in path.read_text().splitlines():
            e, row = json.loads(line), next(by_line)
            campaign, gap = _campaign(e["user_id"], row["event_time"]), _gap_s(e["user_id"])
            if campaign is not None:
                e["utm"] = {"campaign": campaign}
            if gap is not None:
                e["gap_s"] = gap
            row["change_value"] = campaign
            row["gap_us"] = None if gap is None else str(round(gap * 1e6))
            lines.append(json.dumps(e))
        path.write_text("".join(f"{x}\n" for x in lines))
    return root, events


def _expected(events, watermark):
    rules = Rules(
        gap_us=RULES.gap_us,
        close_actions=RULES.close_actions,
        max_duration_us=RULES.max_duration_us,
        timezone=RULES.timezone,
        split_at_midnight=True,
        change=True,
        gap_field=True,
    )
    ref = reference_advance(
        [],
        events,
        gap_us=rules.gap_us,
        close_actions=rules.close_actions,
        watermark_before=None,
        watermark_after=watermark,
        rules=rules,
    )
    reasons = {s["end_reason"] for s in ref["sessions"]}
    assert {"field_change", "max_duration", "midnight", "inactivity"} <= reasons, reasons
    return sorted(ref["sessions"], key=lambda r: (r["user_id"], r["start_time"]))


def _sessions(out):
    return actual(read_output(out, "sessions", with_batch=False))


@pytest.mark.parametrize("state", ["files", "spark-rocksdb"])
def test_stream_and_batch_give_the_reference_sessions_under_every_rule(
    spark, tmp_path, inputs, state
):
    root, events = inputs
    opts = StreamOptions(
        input=str(root),
        output=str(tmp_path / "out"),
        checkpoint=str(tmp_path / "chk"),
        state=state,
        partitions=2,
        rules=RULES,
        mapping=MAPPING,
        max_files_per_trigger=3,
    )
    run_stream(opts, spark, on_batch=lambda _: None)
    final = max(e["event_time"] for e in events) - LATENESS_US
    assert _sessions(tmp_path / "out") == _expected(events, final)
    assert read_output(tmp_path / "out", "invalid_events").num_rows == 0
    if state != "files":
        return
    batch = BatchOptions(
        input=str(root),
        output=str(tmp_path / "batch"),
        start=START,
        end=START.replace(hour=START.hour + HOURS - 1),
        partitions=2,
        rules=RULES,
        mapping=MAPPING,
    )
    run_batch(batch, spark, on_hour=lambda _: None)
    end = int(START.timestamp() * 1_000_000) + HOURS * 60 * MIN
    assert _sessions(tmp_path / "batch") == _expected(events, end)
