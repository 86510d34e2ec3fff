"""`--gap-field` agrees with Spark's own dynamic session window,
`session_window(event_time, gap_column)`, where nothing else cuts: the same events (one copy
each, none late, no close action) give the same sessions, a missing gap being `--gap`."""

from __future__ import annotations

import random
from datetime import UTC, datetime

import pyarrow as pa
from pyspark.sql import functions as F

from sessionize import schema
from sessionize.config import SessionRules
from sessionize.logic import advance
from sessionize.mapping import EventMapping

T0 = int(datetime(2026, 11, 1, tzinfo=UTC).timestamp() * 1_000_000)
GAP_US = 600_000_000


def test_gap_field_sessions_are_spark_session_windows(spark):
    rng = random.Random(5)
    rows = []
    for user in range(12):
        t = T0 + rng.randrange(0, 3_600_000_000)
        for _ in range(rng.randrange(1, 30)):
            t += rng.choice([rng.randrange(1, 60_000_000), rng.randrange(1, 1_800_000_000)])
            gap = rng.choice([None, 30_000_000, 120_500_000, 900_000_000, 1_500_000_000])
            rows.append({"user_id": user, "event_time": t, "page": f"p{len(rows)}", "gap_us": gap})

    lay = schema.layout(EventMapping(gap="gap_s"))
    events = pa.Table.from_pylist(
        [
            {**r, "action": "view", "gap_us": None if r["gap_us"] is None else str(r["gap_us"])}
            for r in rows
        ],
        lay.event,
    )
    ours = advance(
        lay.state.empty_table(),
        events,
        rules=SessionRules(gap_us=GAP_US),
        watermark_before=None,
        watermark_after=2**62,
        layout=lay,
    ).sessions
    got = sorted(
        (r["user_id"], r["start_time"], r["closed_at"], r["event_count"])
        for r in ours.select(["user_id", "start_time", "closed_at", "event_count"])
        .cast(
            pa.schema(
                [
                    ("user_id", pa.int64()),
                    ("start_time", pa.int64()),
                    ("closed_at", pa.int64()),
                    ("event_count", pa.int64()),
                ]
            )
        )
        .to_pylist()
    )

    df = spark.createDataFrame(
        [(r["user_id"], r["event_time"], r["gap_us"]) for r in rows],
        "user_id long, t long, gap_us long",
    ).select("user_id", F.timestamp_micros("t").alias("event_time"), "gap_us")
    gap = F.concat(
        F.coalesce(F.col("gap_us"), F.lit(GAP_US)).cast("string"), F.lit(" microseconds")
    )
    windows = df.groupBy("user_id", F.session_window("event_time", gap).alias("w")).count()
    spark_rows = windows.select(
        "user_id",
        F.unix_micros("w.start").alias("start"),
        F.unix_micros("w.end").alias("end"),
        "count",
    ).collect()
    want = sorted((r.user_id, r.start, r.end, r["count"]) for r in spark_rows)
    assert len(want) > 12  # several sessions per user: the gaps both join and split
    assert got == want
