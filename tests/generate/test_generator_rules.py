"""`sessionize generate --rule-data`: data that exercises each session rule, and nothing
changes without it.

Every check is a plain loop over the written events read back from the files.
"""

from __future__ import annotations

import hashlib
import os
from collections import defaultdict
from datetime import UTC, datetime
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest

from sessionize.generate.writer import GeneratorConfig, write_files
from tests.generate.test_generator import GAP_US, Tree, instant, small, us, visits_of

# The default data's digest (paths, mtimes, bytes of small()). --rule-data is opt-in: without
# it, a seed must keep giving exactly these files; this fails when the default data changes.
DEFAULT_DIGEST = "e7fa141267b1433cc0833028e303c6be93440ccbe09fa63e0a38e45a145883d6"


def digest(root: Path) -> str:
    h = hashlib.sha256()
    for p in sorted(root.rglob("*")):
        if p.is_file():
            h.update(p.relative_to(root).as_posix().encode() + b"\0")
            h.update(str(os.stat(p).st_mtime_ns).encode() + b"\0")
            h.update(p.read_bytes())
    return h.hexdigest()


def test_without_rule_data_the_default_data_is_unchanged(tmp_path):
    write_files(small(), str(tmp_path / "a"))
    assert digest(tmp_path / "a") == DEFAULT_DIGEST
    write_files(small(rule_data=True), str(tmp_path / "b"))
    assert digest(tmp_path / "b") != DEFAULT_DIGEST


# 37 hours over the end of daylight saving time in New York (2026-11-01, 02:00 EDT): the
# local midnights of each zone inside the window, as UTC instants, written out by hand.
RULE_START = datetime(2026, 10, 31, 17, tzinfo=UTC)
MIDNIGHTS = {
    "UTC": ("2026-11-01T00:00", "2026-11-02T00:00"),
    "Europe/Paris": ("2026-10-31T23:00", "2026-11-01T23:00"),
    "America/New_York": ("2026-11-01T04:00", "2026-11-02T05:00"),  # EDT, then EST
    "Asia/Kolkata": ("2026-10-31T18:30", "2026-11-01T18:30"),
}


@pytest.fixture(scope="module")
def rule_tree(tmp_path_factory):
    root = tmp_path_factory.mktemp("rules") / "input"
    cfg = GeneratorConfig(
        start=RULE_START, hours=37, users=40, events_per_hour=30, seed=3, rule_data=True
    )
    write_files(cfg, str(root))
    t = Tree(root)
    assert not t.invalid
    per_user = defaultdict(dict)  # user -> time -> event (duplicates collapse)
    for _, o, _ in t.events:
        per_user[o["user_id"]][us(instant(o["event_time"]))] = o
    return t, {u: sorted(ev.items()) for u, ev in per_user.items()}


def test_rule_data_has_sessions_longer_than_two_hours(rule_tree):
    _, users = rule_tree
    longest = 0
    for events in users.values():
        first = events[0][0]
        for (a, _), (b, _) in zip(events, events[1:], strict=False):
            if b - a > GAP_US:
                first = b
            longest = max(longest, b - first)
    assert longest > 2 * 3600 * 1_000_000


def test_rule_data_has_visits_across_local_midnight_in_each_zone(rule_tree):
    _, users = rule_tree
    for zone, instants in MIDNIGHTS.items():
        tz = ZoneInfo(zone)
        for text in instants:
            m = us(datetime.fromisoformat(text).replace(tzinfo=UTC))
            local = datetime.fromtimestamp(m / 1e6, tz)
            assert (local.hour, local.minute) == (0, 0)  # the reference is right
            straddles = [
                (a, b)
                for events in users.values()
                for (a, _), (b, _) in zip(events, events[1:], strict=False)
                if a < m <= b and b - a <= GAP_US
            ]
            assert straddles, (zone, text)
            a, b = straddles[0]
            assert datetime.fromtimestamp(a / 1e6, tz).date() < local.date()
            assert datetime.fromtimestamp(b / 1e6, tz).date() == local.date()


def test_rule_data_changes_campaigns_within_visits(rule_tree):
    t, _ = rule_tree
    changes = with_campaign = without = 0
    for events in visits_of(t).values():
        for (a, x), (b, y) in zip(events, events[1:], strict=False):
            cx, cy = x.get("utm", {}).get("campaign"), y.get("utm", {}).get("campaign")
            changes += cx is not None and cy is not None and cx != cy and b - a <= GAP_US
        for _, o in events:
            campaign = o.get("utm", {}).get("campaign")
            assert campaign is None or isinstance(campaign, str)
            with_campaign += campaign is not None
            without += campaign is None
    assert changes > 0 and with_campaign > 0 and without > 0


def test_rule_data_has_a_numeric_gap_field_on_some_events(rule_tree):
    t, _ = rule_tree
    values, missing_in_visits_with_it = [], 0
    for events in visits_of(t).values():
        gaps = [o.get("gap_s") for _, o in events]
        for g in gaps:
            assert g is None or (isinstance(g, int | float) and not isinstance(g, bool))
        values += [g for g in gaps if g is not None]
        if any(g is not None for g in gaps):
            missing_in_visits_with_it += sum(g is None for g in gaps)
    events = len(t.events)
    assert 0 < len(values) < events and missing_in_visits_with_it > 0
    assert all(g > 0 for g in values) and any(g * 1e6 > GAP_US for g in values)
    assert any(isinstance(g, float) for g in values)
