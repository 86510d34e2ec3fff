"""The synthetic visit generator: contract-shaped lines, layout, arrival order, rates.

Expected values come from reading the written files back with an independent validator of
the event contract (docs/design.md, "Events"), never from the generator's internals; the
summary must agree with the files.
"""

from __future__ import annotations

import gzip
import json
import os
import re
from collections import Counter, defaultdict
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from sessionize.errors import ConfigError
from sessionize.generate.writer import (
    GeneratorConfig,
    generate_events,
    parse_hour,
    write_files,
)

START = datetime(2026, 11, 1, 22, tzinfo=UTC)  # crosses midnight: two event_date values
GAP_US = 10 * 60_000_000
ISO_MS = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}([+-]\d{2}:\d{2})?$")
PATH = re.compile(
    r"^event_date=(\d{4}-\d{2}-\d{2})/event_hour=(\d{2})/(part|late)-(\d{5})\.json(\.gz)?$"
)

BASE = GeneratorConfig(
    start=START,
    hours=3,
    users=400,
    events_per_hour=8000,
    seed=5,
    duplicate_rate=0.04,
    late_rate=0.02,
    invalid_rate=0.02,
    close_rate=0.2,
    files_per_hour=4,
)


def reason(line: str) -> str | None:
    """Why a line breaks the event contract, or None for a valid event."""
    try:
        obj = json.loads(line)
    except ValueError:
        return "not JSON"
    if not isinstance(obj, dict):
        return "not an object"
    if obj.get("user_id") is None:
        return "missing user_id"
    if isinstance(obj["user_id"], bool) or not isinstance(obj["user_id"], int):
        return "user_id not an integer"
    if obj.get("event_time") is None:
        return "missing event_time"
    try:
        datetime.fromisoformat(obj["event_time"])
    except (TypeError, ValueError):
        return "bad timestamp"
    page = obj.get("page")
    if not isinstance(page, dict) or not isinstance(page.get("current"), str):
        return "missing page.current"
    return None


def instant(event_time: str) -> datetime:
    t = datetime.fromisoformat(event_time)
    return t.replace(tzinfo=UTC) if t.tzinfo is None else t.astimezone(UTC)


def us(t: datetime) -> int:
    return round(t.timestamp() * 1_000_000)


class Tree:
    """A written tree read back: files in arrival (mtime) order with their lines."""

    def __init__(self, root: Path):
        self.root = root
        self.files = []
        for p in sorted(root.rglob("*")):
            if p.is_file():
                rel = p.relative_to(root).as_posix()
                raw = p.read_bytes()
                text = (gzip.decompress(raw) if rel.endswith(".gz") else raw).decode()
                lines = text.splitlines()
                assert text == "".join(f"{x}\n" for x in lines)  # newline-terminated
                self.files.append((os.stat(p).st_mtime_ns, rel, lines))
        self.files.sort()
        self.events = []  # (file index, parsed object, line) of valid lines
        self.invalid = []  # (reason, line)
        self.times = []  # per file, the event times (us) of its valid lines
        for i, (_, _, lines) in enumerate(self.files):
            self.times.append([])
            for line in lines:
                why = reason(line)
                if why is None:
                    obj = json.loads(line)
                    self.events.append((i, obj, line))
                    self.times[i].append(us(instant(obj["event_time"])))
                else:
                    self.invalid.append((why, line))

    def is_late_file(self, i: int) -> bool:
        return "/late-" in self.files[i][1]


@pytest.fixture(scope="module")
def tree(tmp_path_factory):
    root = tmp_path_factory.mktemp("gen") / "input"
    summary = write_files(BASE, str(root))
    return summary, Tree(root)


def snapshot(root: Path) -> dict[str, tuple[bytes, int]]:
    return {
        p.relative_to(root).as_posix(): (p.read_bytes(), os.stat(p).st_mtime_ns)
        for p in root.rglob("*")
        if p.is_file()
    }


def small(**changes) -> GeneratorConfig:
    return replace(BASE, **{"hours": 2, "users": 100, "events_per_hour": 1500, **changes})


def test_same_seed_gives_identical_bytes_and_mtimes(tmp_path):
    write_files(small(), str(tmp_path / "a"))
    write_files(small(), str(tmp_path / "b"))
    a, b = snapshot(tmp_path / "a"), snapshot(tmp_path / "b")
    assert a == b and len(a) >= 8


def test_another_seed_gives_other_data(tmp_path):
    write_files(small(), str(tmp_path / "a"))
    write_files(small(seed=6), str(tmp_path / "b"))
    a, b = snapshot(tmp_path / "a"), snapshot(tmp_path / "b")
    shared = set(a) & set(b)
    assert shared and all(a[p][0] != b[p][0] for p in shared)


def test_gzip_files_hold_the_same_lines_and_are_deterministic(tmp_path):
    write_files(small(), str(tmp_path / "plain"))
    write_files(small(gzip=True), str(tmp_path / "gz1"))
    write_files(small(gzip=True), str(tmp_path / "gz2"))
    plain, gz = snapshot(tmp_path / "plain"), snapshot(tmp_path / "gz1")
    assert snapshot(tmp_path / "gz2") == gz
    assert sorted(gz) == sorted(p + ".gz" for p in plain)
    for path, (data, mtime) in plain.items():
        assert gzip.decompress(gz[path + ".gz"][0]) == data
        assert gz[path + ".gz"][1] == mtime


def test_hive_layout_one_file_per_slice_and_late_files(tree):
    summary, t = tree
    paths = [rel for _, rel, _ in t.files]
    assert len(paths) == summary.files
    hours = [START + timedelta(hours=h) for h in range(BASE.hours)]
    dirs = {f"event_date={h:%Y-%m-%d}/event_hour={h:%H}" for h in hours}
    assert {p.rsplit("/", 1)[0] for p in paths} == dirs
    assert len({h.date() for h in hours}) == 2
    parts = [p for p in paths if "/part-" in p]
    expected = {f"{d}/part-{k:05d}.json" for d in dirs for k in range(BASE.files_per_hour)}
    assert set(parts) == expected
    assert {p for p in paths if "/late-" in p} == {f"{d}/late-00000.json" for d in dirs}
    # Every valid event lies in the hour of its directory, in UTC.
    for i, obj, _ in t.events:
        m = PATH.match(t.files[i][1])
        hour = datetime.fromisoformat(f"{m.group(1)}T{m.group(2)}:00+00:00")
        assert hour <= instant(obj["event_time"]) < hour + timedelta(hours=1)


def test_every_line_is_either_a_valid_event_or_invalid_per_contract(tree):
    summary, t = tree
    assert summary.lines == sum(len(lines) for _, _, lines in t.files)
    assert summary.lines == summary.events + summary.duplicates + summary.invalid
    assert len(t.invalid) == summary.invalid
    assert len(t.events) == summary.events + summary.duplicates
    keys = Counter(
        (o["user_id"], instant(o["event_time"]), o["page"]["current"]) for _, o, _ in t.events
    )
    assert len(keys) == summary.events
    # A duplicate is the very same line; distinct events never share a key by accident.
    lines_per_key = defaultdict(set)
    for _, o, line in t.events:
        lines_per_key[(o["user_id"], instant(o["event_time"]), o["page"]["current"])].add(line)
    assert all(len(v) == 1 for v in lines_per_key.values())
    assert sum(n - 1 for n in keys.values()) == summary.duplicates
    assert Counter(why for why, _ in t.invalid).keys() == {
        "not JSON",
        "missing user_id",
        "user_id not an integer",
        "missing event_time",
        "bad timestamp",
        "missing page.current",
    }
    truncated = [line for why, line in t.invalid if why == "not JSON" and line.startswith("{")]
    assert truncated  # truncated JSON is among the "not JSON" lines


def test_valid_lines_have_the_full_contract_shape(tree):
    _, t = tree
    objs = [o for _, o, _ in t.events]
    assert all(ISO_MS.match(o["event_time"]) for o in objs)
    offsets = Counter(o["event_time"][23:] for o in objs)
    assert offsets.most_common(1)[0][0] == "+00:00"
    assert offsets[""] > 0  # offset-less: UTC by contract
    assert len(set(offsets) - {"", "+00:00"}) >= 3  # local times with their offsets
    assert all(isinstance(o["user_id"], int) and o["user_id"] > 0 for o in objs)
    actions = Counter(o.get("action") for o in objs)
    assert {"view", "click", "scroll", "browser_close", None} <= set(actions)
    pages = {o["page"]["current"] for o in objs}
    assert "home" in pages
    assert any(re.fullmatch(r"category \d+", p) for p in pages)
    assert any(re.fullmatch(r"article category \d+-\d+", p) for p in pages)
    assert sum("previous" in o["page"] for o in objs) > len(objs) / 2
    full = [o for o in objs if {"source", "user", "technical"} <= o.keys()]
    assert len(full) > 0.9 * len(objs)
    assert len(full) < len(objs)  # some optional sections are left out
    for o in full[:500]:
        assert set(o["source"]) == {"site", "api_version"}
        assert set(o["user"]) == {"ip", "latitude", "longitude"}
        assert re.fullmatch(r"\d+\.\d+\.\d+\.\d+", o["user"]["ip"])
        assert -90 <= o["user"]["latitude"] <= 90 and -180 <= o["user"]["longitude"] <= 180
        assert set(o["technical"]) == {"browser", "os", "lang", "network", "device"}
        assert set(o["technical"]["device"]) == {"type", "version"}
        assert re.fullmatch(r"[0-9a-f]{32}", o["visit_id"])


def test_rates_are_roughly_as_configured(tree):
    summary, t = tree
    per_hour = Counter(t.files[i][1].split("/")[1] for i, _, _ in t.events)
    for n in per_hour.values():  # events + duplicates per hour directory
        assert 0.85 * BASE.events_per_hour < n < 1.2 * BASE.events_per_hour
    assert summary.duplicates / summary.events == pytest.approx(BASE.duplicate_rate, rel=0.25)
    assert summary.invalid / summary.events == pytest.approx(BASE.invalid_rate, rel=0.25)
    # Late events are only drawn where they can really be late (not in the last minutes).
    assert 0.6 * BASE.late_rate < summary.late / summary.events <= 1.2 * BASE.late_rate
    late_lines = sum(len(lines) for i, (_, _, lines) in enumerate(t.files) if t.is_late_file(i))
    assert late_lines == summary.late


def visits_of(t: Tree) -> dict[str, list[tuple[int, dict]]]:
    """Distinct events per visit_id, in time order."""
    seen, visits = set(), defaultdict(list)
    for _, o, line in t.events:
        if line not in seen and "visit_id" in o:
            seen.add(line)
            visits[o["visit_id"]].append((us(instant(o["event_time"])), o))
    for events in visits.values():
        events.sort(key=lambda e: e[0])
    return visits


def test_think_times_straddle_the_gap(tree):
    _, t = tree
    think = [
        b[0] - a[0]
        for events in visits_of(t).values()
        for a, b in zip(events, events[1:], strict=False)
    ]
    above = sum(d > GAP_US for d in think) / len(think)
    assert 0.01 < above < 0.1  # most below the gap, some above: unplanned splits
    assert sum(0.75 * GAP_US < d <= GAP_US for d in think) > 0  # just under the gap
    assert GAP_US in think and GAP_US + 1000 in think  # on the inclusive bound, 1 ms past it
    assert min(think) > 0  # strictly increasing times within a visit
    # Per user, both kinds of gaps occur between consecutive distinct events.
    times = defaultdict(set)
    for _, o, _ in t.events:
        times[o["user_id"]].add(us(instant(o["event_time"])))
    mixed = 0
    for ts in times.values():
        ts = sorted(ts)
        gaps = [b - a for a, b in zip(ts, ts[1:], strict=False)]
        mixed += any(g > GAP_US for g in gaps) and any(g <= GAP_US for g in gaps)
    assert mixed > 0.5 * len(times)
    assert sum(len(v) > 3 for v in times.values()) > 0.5 * len(times)  # several visits each


def test_visits_end_with_browser_close_at_the_close_rate(tree):
    summary, t = tree
    visits = visits_of(t)
    closed = 0
    for events in visits.values():
        actions = [o.get("action") for _, o in events]
        if "browser_close" in actions:
            assert actions.index("browser_close") == len(actions) - 1  # always the last event
            closed += 1
    assert closed / len(visits) == pytest.approx(BASE.close_rate, rel=0.2)
    # Some users come back within the gap after closing: only the close splits those.
    by_user = defaultdict(list)
    for events in visits.values():
        for ts, o in events:
            by_user[o["user_id"]].append((ts, o.get("action")))
    quick_returns = 0
    for events in by_user.values():
        events.sort()
        for (t1, a1), (t2, _) in zip(events, events[1:], strict=False):
            quick_returns += a1 == "browser_close" and t2 - t1 <= GAP_US
    assert quick_returns > 0
    assert summary.visits == len(visits)
    on_time_closes = {
        line
        for i, o, line in t.events
        if o.get("action") == "browser_close" and not t.is_late_file(i)
    }
    assert len(on_time_closes) == summary.closes


def stream_watermarks(t: Tree, lateness_us: int):
    """(file index, watermark) for a stream reading one file per trigger in mtime order."""
    newest = None
    for i, times in enumerate(t.times):
        yield i, (newest - lateness_us if newest is not None else None)
        if times:
            newest = max(times) if newest is None else max(newest, *times)


def test_files_arrive_in_strictly_increasing_mtime(tree):
    _, t = tree
    mtimes = [m for m, _, _ in t.files]
    assert mtimes == sorted(set(mtimes))
    assert all(b - a >= 1_000_000 for a, b in zip(mtimes, mtimes[1:], strict=False))  # >= 1ms
    # Normal files arrive after their slice, in slice order.
    for m, rel, _ in t.files:
        if "/part-" in rel:
            d, h, _, k, _ = PATH.match(rel).groups()
            slice_end = datetime.fromisoformat(f"{d}T{h}:00+00:00") + timedelta(
                minutes=60 // BASE.files_per_hour * (int(k) + 1)
            )
            assert us(slice_end) * 1000 < m < (us(slice_end) + 31_000_000) * 1000


def test_late_files_arrive_two_hours_later_and_really_are_late(tree):
    _, t = tree
    order = [rel for _, rel, _ in t.files]
    mtime = {rel: m for m, rel, _ in t.files}
    for rel in order:
        if "/late-" in rel:
            last_part = rel.replace("late-00000", f"part-{BASE.files_per_hour - 1:05d}")
            assert mtime[rel] - mtime[last_part] > 2 * 3600 * 10**9 - 31 * 10**9
    late_seen = 0
    for i, wm in stream_watermarks(t, BASE.lateness_us):
        for ts in t.times[i]:
            if t.is_late_file(i):  # the watermark has passed it by more than the lateness
                assert wm is not None and ts < wm - BASE.lateness_us
                late_seen += 1
            else:
                assert wm is None or ts >= wm
    assert late_seen > 0


@pytest.mark.parametrize("lateness_min", [0, 1, 10])
def test_without_late_rate_no_event_is_ever_late(tmp_path, lateness_min):
    cfg = small(late_rate=0.0, duplicate_rate=0.1, files_per_hour=6)
    cfg = replace(cfg, lateness_us=lateness_min * 60_000_000)
    summary = write_files(cfg, str(tmp_path))
    t = Tree(tmp_path)
    assert summary.late == 0 and not any(t.is_late_file(i) for i in range(len(t.files)))
    for stream_lateness in (cfg.lateness_us, cfg.lateness_us + 60_000_000):
        for i, wm in stream_watermarks(t, stream_lateness):
            assert wm is None or all(ts >= wm for ts in t.times[i])
    if lateness_min == 0:
        assert summary.displaced == 0
    else:
        assert summary.displaced > 0


def test_out_of_order_within_and_across_files(tree):
    summary, t = tree
    assert summary.displaced > 0
    crossed = dup_same = dup_next = 0
    where = defaultdict(list)  # line -> files holding it
    for i, _, line in t.events:
        where[line].append(i)
    for i, (_, rel, _) in enumerate(t.files):
        if "/late-" in rel:
            continue
        d, h, _, k, _ = PATH.match(rel).groups()
        start = datetime.fromisoformat(f"{d}T{h}:00+00:00") + timedelta(
            minutes=60 // BASE.files_per_hour * int(k)
        )
        for ts in t.times[i]:
            if ts < us(start):  # from the previous slice, within lateness/2 of its end
                assert us(start) - ts <= BASE.lateness_us // 2
                crossed += 1
        assert t.times[i] != sorted(t.times[i])  # shuffled within the file
    for files in where.values():
        if len(files) == 2:
            dup_same += files[0] == files[1]
            dup_next += files[1] == files[0] + 1
    assert crossed >= summary.displaced  # displaced events, plus duplicates placed next
    assert dup_same > 0 and dup_next > 0


def test_summary_matches_the_generated_files():
    hours = list(generate_events(small(gzip=True)))
    assert [h.hour for h in hours] == [START, START + timedelta(hours=1)]
    arrivals = [f.arrival for h in hours for f in h.files]
    assert arrivals == sorted(set(arrivals))
    for h in hours:
        assert h.summary.files == len(h.files)
        assert h.summary.lines == sum(len(f.lines) for f in h.files)
        for f in h.files:
            assert f.path.endswith(".json.gz")
            assert f.content() == "".join(f"{x}\n" for x in f.lines).encode()


def test_busy_users_get_longer_visits_and_impossible_density_is_refused():
    cfg = small(users=20, events_per_hour=600, late_rate=0.0)  # 30 events per user and hour
    n = sum(h.summary.events for h in generate_events(cfg))
    assert 0.8 * 2 * 600 < n < 1.2 * 2 * 600
    with pytest.raises(ConfigError, match="--users"):
        next(generate_events(small(users=10, events_per_hour=100_000)))


def test_zero_events_writes_empty_files(tmp_path):
    summary = write_files(small(events_per_hour=0), str(tmp_path))
    assert summary.events == 0 and summary.files == 2 * BASE.files_per_hour
    assert all(p.stat().st_size == 0 for p in tmp_path.rglob("*.json"))


def test_refuses_to_write_over_existing_files(tmp_path):
    write_files(small(), str(tmp_path))
    with pytest.raises(ConfigError, match="already holds files"):
        write_files(small(seed=9), str(tmp_path))


@pytest.mark.parametrize(
    "changes",
    [
        {"start": datetime(2026, 11, 1, 0, 30, tzinfo=UTC)},
        {"hours": 0},
        {"users": 0},
        {"duplicate_rate": 1.5},
        {"late_rate": -0.1},
        {"files_per_hour": 0},
        {"gap_us": 0},
        {"seed": -1},
    ],
)
def test_bad_settings_are_refused(changes):
    with pytest.raises(ConfigError):
        replace(BASE, **changes)


def test_start_hour_parsing():
    assert parse_hour("2019-10-10T15") == datetime(2019, 10, 10, 15, tzinfo=UTC)
    assert parse_hour("2019-10-10 15:00") == datetime(2019, 10, 10, 15, tzinfo=UTC)
    assert parse_hour("2019-10-10T17:00+02:00") == datetime(2019, 10, 10, 15, tzinfo=UTC)
    assert GeneratorConfig(start=datetime(2019, 10, 10, 15)).start.tzinfo == UTC
    for bad in ("2019-10-10T15:30", "yesterday"):
        with pytest.raises(ConfigError):
            parse_hour(bad)
