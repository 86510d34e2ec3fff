"""Hour folders named by the wall hours of a zone (`--input-timezone`): batch mode reads
each folder as the instants it holds (two hours of them on the day a daylight saving change
repeats a wall hour, none on the day one is skipped), and its watermark is their end. Read
as UTC, Paris folders send most events to late_events, and the warning names the cause: the
folders' zone, or else the events' times."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest

from sessionize.commands.batch import BatchOptions, run_batch
from sessionize.errors import ConfigError, IncompatibleCheckpoint
from tests.helpers import read_output

PARIS = ZoneInfo("Europe/Paris")


def _write_local(root, start_utc: datetime, minutes: int, users: int = 5) -> list[dict]:
    """One event per user every 4 minutes from `start_utc`, each filed under the Paris
    wall hour of its time; returns the events (their UTC times)."""
    events = []
    for m in range(0, minutes, 4):
        for u in range(users):
            t = start_utc + timedelta(minutes=m, seconds=u)
            events.append(
                {
                    "user_id": u,
                    "event_time": t.strftime("%Y-%m-%dT%H:%M:%SZ"),
                    "page": {"current": f"p{m % 3}"},
                }
            )
            wall = t.astimezone(PARIS)
            d = root / f"event_date={wall:%Y-%m-%d}" / f"event_hour={wall:%H}"
            d.mkdir(parents=True, exist_ok=True)
            with (d / "part-0.json").open("a") as f:
                f.write(json.dumps(events[-1]) + "\n")
    return events


def _batch(spark, inp, out, first: str, last: str, zone: str = "UTC", lines=None):
    hour = lambda s: datetime.strptime(s, "%Y-%m-%dT%H").replace(tzinfo=UTC)  # noqa: E731
    opts = BatchOptions(
        input=str(inp),
        output=str(out),
        start=hour(first),
        end=hour(last),
        partitions=2,
        input_timezone=zone,
    )
    return run_batch(opts, spark, on_hour=(lines.append if lines is not None else print))


def test_paris_folders_read_as_paris_hours_lose_nothing_and_read_as_utc_say_why(spark, tmp_path):
    """Winter (UTC+1): folder 09 holds 08:00-09:00 UTC. With the zone every event is on
    time and the sessions are those of the events; read as UTC, the warning names the
    folders' zone (1 hour ahead) and --input-timezone."""
    events = _write_local(tmp_path / "in", datetime(2026, 11, 2, 7, tzinfo=UTC), 180)
    records = _batch(
        spark,
        tmp_path / "in",
        tmp_path / "paris",
        "2026-11-02T08",
        "2026-11-02T11",
        zone="Europe/Paris",
    )
    assert [r["version"] for r in records] == [2026110208, 2026110209, 2026110210, 2026110211]
    assert sum(r["batch"]["late"] for r in records) == 0
    assert sum(r["batch"]["events_in"] for r in records) == len(events)
    assert records[0]["watermark"] == int(datetime(2026, 11, 2, 8, tzinfo=UTC).timestamp()) * 10**6
    sessions = read_output(tmp_path / "paris", "sessions")
    assert sum(sessions.column("event_count").to_pylist()) == len(events)
    lines: list[str] = []
    utc = _batch(
        spark, tmp_path / "in", tmp_path / "utc", "2026-11-02T08", "2026-11-02T11", lines=lines
    )
    assert sum(r["batch"]["late"] for r in utc) > len(events) / 2
    late = [line for line in lines if line.startswith("warning: hour ") and "late_events" in line]
    assert late and all(
        "before the hour whose folder holds them" in line
        and "1 hour before" in line
        and "--input-timezone" in line
        for line in late
    ), late


def test_a_day_that_repeats_a_wall_hour_reads_its_folder_as_two_hours(spark, tmp_path):
    """Paris leaves summer time on 2026-10-25: wall hour 02 happens twice (00:00-02:00
    UTC), and its one folder holds both: no event late, none lost."""
    events = _write_local(tmp_path / "in", datetime(2026, 10, 24, 23, tzinfo=UTC), 240)
    records = _batch(
        spark,
        tmp_path / "in",
        tmp_path / "out",
        "2026-10-25T01",
        "2026-10-25T03",
        zone="Europe/Paris",
    )
    assert [r["version"] for r in records] == [2026102501, 2026102502, 2026102503]
    assert [r["batch"]["events_in"] for r in records] == [75, 150, 75]
    assert sum(r["batch"]["late"] for r in records) == 0
    assert sum(r["batch"]["events_in"] for r in records) == len(events)
    assert records[1]["watermark"] == int(datetime(2026, 10, 25, 2, tzinfo=UTC).timestamp()) * 10**6


def test_a_day_that_skips_a_wall_hour_says_so_and_runs_the_others(spark, tmp_path):
    """Paris enters summer time on 2026-03-29: wall hour 02 does not exist."""
    _write_local(tmp_path / "in", datetime(2026, 3, 29, 0, tzinfo=UTC), 120)
    lines: list[str] = []
    records = _batch(
        spark,
        tmp_path / "in",
        tmp_path / "out",
        "2026-03-29T01",
        "2026-03-29T03",
        zone="Europe/Paris",
        lines=lines,
    )
    assert [r["version"] for r in records] == [2026032901, 2026032903]
    assert (
        "hour 2026-03-29T02 does not exist in Europe/Paris (clocks go forward): no folder, "
        "skipped" in lines
    )
    assert sum(r["batch"]["late"] for r in records) == 0


def test_events_filed_under_the_wrong_hours_are_named_as_the_cause(spark, tmp_path):
    """Events spread over several earlier hours, in UTC folders: not one zone's offset."""
    inp = tmp_path / "in"
    for h in (0, 1):
        d = inp / "event_date=2026-11-01" / f"event_hour={h:02d}"
        d.mkdir(parents=True)
        lines = []
        for u in range(40):  # hour 1's folder holds events of 3 to 9 hours before
            back = timedelta(hours=3 + u % 7) if h == 1 else timedelta()
            t = datetime(2026, 11, 1, h, tzinfo=UTC) + timedelta(minutes=u) - back
            lines.append(
                json.dumps({"user_id": u, "event_time": t.isoformat(), "page": {"current": "a"}})
            )
        (d / "part-0.json").write_text("\n".join(lines) + "\n")
    said: list[str] = []
    _batch(spark, inp, tmp_path / "out", "2026-11-01T00", "2026-11-01T01", lines=said)
    (late,) = [line for line in said if "late_events" in line and line.startswith("warning")]
    assert "not by one offset: the folders' zone, UTC, is not the cause" in late


def test_the_output_keeps_its_zone_and_a_bad_zone_is_one_line(spark, tmp_path):
    _write_local(tmp_path / "in", datetime(2026, 11, 2, 8, tzinfo=UTC), 20)
    _batch(
        spark,
        tmp_path / "in",
        tmp_path / "out",
        "2026-11-02T09",
        "2026-11-02T09",
        zone="Europe/Paris",
    )
    with pytest.raises(
        IncompatibleCheckpoint, match=r"--input-timezone Europe/Paris \(this run: UTC\)"
    ):
        _batch(spark, tmp_path / "in", tmp_path / "out", "2026-11-02T10", "2026-11-02T10")
    with pytest.raises(ConfigError, match="--input-timezone 'Paris' is not an IANA time zone"):
        _batch(
            spark, tmp_path / "in", tmp_path / "x", "2026-11-02T10", "2026-11-02T10", zone="Paris"
        )
