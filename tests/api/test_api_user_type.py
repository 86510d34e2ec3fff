"""The Python API reads string ids without being told: the user column's type decides.

- `sessions()` of events with string ids and no `user_type` gives the sessions of the same
  events with integer ids (one id for the other); its page views are every distinct event;
  its invalid rows are there with their reason, not dropped.
- An explicit `user_type` wins over the column's type.
- `stream()` of string ids without `user_type` sends none to `invalid_events` and records
  string keys; on a checkpoint recorded with long keys it is refused in one line.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyspark.sql.pandas.types import from_arrow_schema

from sessionize import Sessionizer
from sessionize.engines.checkpoint import check_or_record
from sessionize.errors import ConfigError
from tests.helpers import read_output

FIELDS = dict(
    user="anonymous_id",
    time="ts",
    page="url",
    action="type",
    time_format="epoch-ms",
    keep={},
    partitions=2,
)
T0_MS = 1_793_491_200_000  # 2026-11-01T00:00Z


def _events(seed: int, users: int = 12, n: int = 300) -> list[dict]:
    """Integer ids over two hours, pauses on both sides of the 10 minute gap, closes, and
    a few repeated events."""
    rng = random.Random(seed)
    events: list[dict] = []
    for _ in range(n):
        if events and rng.random() < 0.05:
            events.append(dict(rng.choice(events)))
            continue
        events.append(
            {
                "anonymous_id": rng.randrange(1, users + 1),
                "ts": T0_MS + rng.randrange(0, 2 * 3_600_000),
                "url": rng.choice("abcd"),
                "type": rng.choices(["view", "click", "browser_close"], [8, 3, 1])[0],
            }
        )
    return events


def _string_ids(events: list[dict]) -> list[dict]:
    return [{**e, "anonymous_id": f"u-{e['anonymous_id']}"} for e in events]


def _table(events: list[dict], id_type: pa.DataType) -> pa.Table:
    schema = pa.schema(
        [("anonymous_id", id_type), ("ts", pa.int64()), ("url", pa.string()), ("type", pa.string())]
    )
    return pa.Table.from_pylist(events, schema)


def _shape(rows: list[dict], as_id) -> list[tuple]:
    return sorted(
        (as_id(r["user_id"]), r["start_time"], r["end_time"], r["event_count"], r["end_reason"])
        for r in rows
    )


def test_sessions_of_string_ids_need_no_user_type(spark):
    events = _events(seed=3)
    bad = {"anonymous_id": None, "ts": T0_MS, "url": "a", "type": "view"}
    by_int = Sessionizer(**FIELDS).sessions(
        spark.createDataFrame(_table([*events, bad], pa.int64()))
    )
    by_str = Sessionizer(**FIELDS).sessions(
        spark.createDataFrame(_table([*_string_ids(events), bad], pa.string()))
    )
    int_sessions = by_int.sessions.toArrow().to_pylist()
    str_sessions = by_str.sessions.toArrow().to_pylist()
    assert len(int_sessions) > 20
    assert _shape(str_sessions, lambda u: int(u.removeprefix("u-"))) == _shape(int_sessions, int)
    # Every distinct event (user, time, page) is an event of a closed session.
    distinct = {(f"u-{e['anonymous_id']}", e["ts"], e["url"]) for e in events}
    rows = by_str.events.toArrow().to_pylist()
    assert len(rows) == len(distinct)
    assert {(v["user_id"], v["event_time"].timestamp() * 1000 // 1, v["page"]) for v in rows} == {
        (u, float(t), p) for u, t, p in distinct
    }
    for result in (by_int, by_str):
        invalid = result.invalid.toArrow().to_pylist()
        assert [r["reason"] for r in invalid] == ["missing anonymous_id"]
        assert json.loads(invalid[0]["raw"])["ts"] == T0_MS


def test_an_explicit_user_type_wins_over_the_column(spark):
    df = spark.createDataFrame(_table(_string_ids(_events(seed=4, n=20)), pa.string()))
    result = Sessionizer(**FIELDS, user_type="long").sessions(df)
    assert result.sessions.count() == 0
    reasons = {r["reason"] for r in result.invalid.toArrow().to_pylist()}
    assert reasons == {"anonymous_id: expected an integer"}


def test_the_old_return_value_points_to_sessions(spark):
    df = spark.createDataFrame(_table(_events(seed=4, n=5), pa.int64()))
    with pytest.raises(AttributeError, match="the sessions DataFrame is its .sessions"):
        Sessionizer(**FIELDS).sessions(df).toArrow()


def test_stream_of_string_ids_needs_no_user_type_and_keeps_a_checkpoints_keys(
    spark, tmp_path: Path
):
    events = _string_ids(_events(seed=5, n=120))
    src = tmp_path / "src"
    src.mkdir()
    table = _table(events, pa.string())
    pq.write_table(table, src / "a.parquet")
    stream = spark.readStream.schema(from_arrow_schema(table.schema)).parquet(str(src))
    s = Sessionizer(**FIELDS)
    out, chk = tmp_path / "out", tmp_path / "chk"
    s.stream(stream, output=str(out), checkpoint=str(chk)).awaitTermination()
    assert read_output(out, "invalid_events").num_rows == 0
    views = read_output(out, "page_views").to_pylist()
    assert views and all(v["user_id"].startswith("u-") for v in views)
    assert json.loads((chk / "sessionize.json").read_text())["user_type"] == "string"
    # A checkpoint whose users have long keys (a string column holding digits, before).
    old = tmp_path / "old-chk"
    check_or_record(str(old), Sessionizer(**FIELDS, user_type="long").recorded_settings("parquet"))
    with pytest.raises(ConfigError) as err:
        s.stream(stream, output=str(tmp_path / "old-out"), checkpoint=str(old))
    assert "\n" not in str(err.value)
    assert "pass user_type='long' to keep the checkpoint's keys" in str(err.value)
    assert not (tmp_path / "old-out").exists()
