"""The valid years of an event time (0002-9998) through a stream at both ends, with a local
time zone, the longest gap and lateness; `status` on a batch recorded with a watermark no
Python datetime holds; the bound on the rules; typed and Parquet times."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from sessionize.api.sessionizer import Sessionizer
from sessionize.cli import main as cli_main
from sessionize.commands.stream import StreamOptions, run_stream
from sessionize.config import SessionRules
from sessionize.errors import ConfigError
from sessionize.mapping import EventMapping
from sessionize.sources.parquet import read_file
from tests.helpers import read_output

DAY_US = 86_400_000_000
OUTSIDE = "event_time: time out of range (years 0002-9998)"


def _us(*args: int) -> int:
    return (datetime(*args, tzinfo=UTC) - datetime(1970, 1, 1, tzinfo=UTC)) // (
        datetime(1970, 1, 1, 0, 0, 0, 1, tzinfo=UTC) - datetime(1970, 1, 1, tzinfo=UTC)
    )


def _line(user: int, time: str) -> str:
    return json.dumps({"user_id": user, "event_time": time, "page": {"current": "p"}})


def test_both_ends_of_the_valid_years_through_a_stream_in_a_zone(spark, tmp_path, capsys):
    lines = [
        _line(1, "0001-01-01T00:00:00Z"),
        _line(2, "0000-01-01T00:00:00Z"),
        _line(3, "0002-01-01T00:00:00Z"),
        _line(4, "9998-12-31T23:59:59.999999Z"),
        _line(5, "9999-12-31T23:59:00Z"),
        _line(6, "0002-01-01T00:00:00+00:01"),
    ]
    hour = tmp_path / "in" / "event_date=2026-11-01" / "event_hour=10"
    hour.mkdir(parents=True)
    (hour / "a.json").write_text("\n".join(lines) + "\n")
    year = 365 * DAY_US
    rules = SessionRules(
        gap_us=year, lateness_us=year, timezone="America/New_York", split_at_midnight=True
    )
    chk, out = tmp_path / "chk", tmp_path / "out"
    opts = StreamOptions(
        input=str(tmp_path / "in"),
        output=str(out),
        checkpoint=str(chk),
        rules=rules,
        partitions=1,
        max_future_us=8000 * year,
    )
    [record] = run_stream(opts, spark, on_batch=lambda _: None)

    invalid = {
        json.loads(r["raw"])["user_id"]: r["reason"]
        for r in read_output(out, "invalid_events").to_pylist()
    }
    assert invalid == {1: OUTSIDE, 2: OUTSIDE, 5: OUTSIDE, 6: OUTSIDE}
    # The latest event's watermark, a year before it; the earliest one's session (local
    # date 0001-12-31 in New York, closed at that zone's next midnight) is written.
    assert record["watermark"] == _us(9998, 12, 31, 23, 59, 59, 999999) - year
    [session] = read_output(out, "sessions").to_pylist()
    assert session["user_id"] == 3 and str(session["session_date"]) == "0001-12-31"
    assert record["batch"]["open_sessions"] == 1  # the latest one, closing in the year 9999

    cli_main(["status", "--checkpoint", str(chk)])
    assert "watermark 9997-12-31T23:59:59Z" in capsys.readouterr().out
    # A batch recorded before times were bounded: its watermark in the year 0.
    log = chk / "progress.jsonl"
    entry = json.loads(log.read_text().splitlines()[0])
    entry["watermark"] = _us(1, 1, 1) - 600_000_000
    log.write_text(json.dumps(entry) + "\n")
    cli_main(["status", "--checkpoint", str(chk)])
    assert "watermark 0000-12-31T23:50:00Z" in capsys.readouterr().out


def test_rules_are_at_most_a_year():
    SessionRules(gap_us=365 * DAY_US, lateness_us=365 * DAY_US, max_duration_us=365 * DAY_US)
    for field in ("gap_us", "lateness_us", "max_duration_us"):
        with pytest.raises(ConfigError, match="at most 365d"):
            SessionRules(**{field: 365 * DAY_US + 1})


def test_typed_times_outside_the_years_are_invalid(spark):
    times = [
        datetime(1, 1, 1, tzinfo=UTC),
        datetime(2, 1, 1, tzinfo=UTC),
        datetime(2020, 12, 31, 23, 59, tzinfo=UTC),
        datetime(9999, 6, 1, tzinfo=UTC),
    ]
    df = spark.createDataFrame(
        [(i, t, "p") for i, t in enumerate(times)],
        "user_id long, event_time timestamp, page string",
    )
    result = Sessionizer(page="page").sessions(df)
    reasons = {json.loads(r["raw"])["user_id"]: r["reason"] for r in result.invalid.collect()}
    assert reasons == {0: OUTSIDE, 3: OUTSIDE}
    assert sorted(r["user_id"] for r in result.sessions.collect()) == [1, 2]


def test_parquet_rows_with_times_python_cannot_hold_become_invalid_rows(tmp_path):
    """A file lacking the user field sends every row to `invalid_events` as JSON: timestamps
    beyond the year 9999 or before the year 1 are written as Arrow prints them."""
    far = [253_402_300_800_000_000 * 3, -62_135_596_800_000_000 * 2]
    path = tmp_path / "f.parquet"
    pq.write_table(
        pa.table(
            {
                "event_time": pa.array(far, pa.timestamp("us")),
                "page": pa.array([{"current": "p"}] * 2),
            }
        ),
        path,
    )
    [batch] = list(read_file(str(path), EventMapping()))
    assert batch.column("error").to_pylist() == ["user_id: not in the Parquet file"] * 2
    assert all(json.loads(raw)["page"] == {"current": "p"} for raw in batch["raw"].to_pylist())
