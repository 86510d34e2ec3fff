"""The Python API (`sessionize.Sessionizer`) and Parquet input.

- `stream` on a streaming DataFrame the test builds (Spark's own Parquet file source, fields
  under other names, epoch-ms times), stopped and restarted on its checkpoint, writes
  exactly the outputs of the CLI's JSON run on the same events, batch for batch.
- `sessions` of a bounded DataFrame (typed columns, or JSON lines in `value`) equals the
  reference implementation (tests/logic/reference.py) with every session closed.
- `--input-format parquet`, stream and batch, equals the JSON run on the same events; a
  Parquet file without the user field sends its rows to `invalid_events`.
- A missing column is one line naming it.
"""

from __future__ import annotations

import json
import os
import random
from datetime import UTC, datetime
from pathlib import Path

import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest
from pyspark.sql.pandas.types import from_arrow_schema

from sessionize import Sessionizer
from sessionize.api.query import _RUNS
from sessionize.commands.batch import BatchOptions, run_batch
from sessionize.commands.stream import StreamOptions, run_stream
from sessionize.errors import ConfigError
from sessionize.mapping import NEWEST_COLUMNS, EventMapping
from sessionize.spark_arrow import arrow_of, frame_of
from sessionize.state.lease import DirectoryLeaseRecords
from tests.api_data import (
    MAPPED,
    MAPPED_KEEP,
    MAPPED_SCHEMA,
    json_files,
    parquet_tree,
    write_parquet,
)
from tests.helpers import OUTPUTS, generate, read_output
from tests.logic.helpers import rows_of
from tests.logic.reference import reference_advance

PARTITIONS = 2
HOURS = (datetime(2026, 11, 1, 0, tzinfo=UTC), datetime(2026, 11, 1, 1, tzinfo=UTC))


@pytest.fixture(scope="module")
def json_run(spark, tmp_path_factory) -> tuple[Path, Path]:
    """Two hourly JSON files (no invalid or late lines) and the CLI's stream over them, one
    file per micro-batch: what every other input of the same events must give."""
    root = tmp_path_factory.mktemp("api")
    inp = generate(
        root / "in", hours=2, users=60, events_per_hour=400, files_per_hour=1, invalid_rate=0.0
    )
    opts = StreamOptions(
        input=str(inp),
        output=str(root / "ref" / "out"),
        checkpoint=str(root / "ref" / "chk"),
        partitions=PARTITIONS,
        max_files_per_trigger=1,
    )
    run_stream(opts, spark, on_batch=lambda _: None)
    assert read_output(root / "ref" / "out", "sessions").num_rows > 0
    return inp, root / "ref" / "out"


def _same(out: Path, ref: Path, names=OUTPUTS, with_batch: bool = True) -> None:
    for name in names:
        got = read_output(out, name, with_batch=with_batch)
        want = read_output(ref, name, with_batch=with_batch)
        # A reference with today's `sessions` columns: each keeps its values when a
        # session carries more (the carried columns: tests/logic/test_carried.py).
        assert got.select(want.column_names).equals(want), name


def test_stream_on_own_dataframe_restarts_exactly_once(spark, json_run, tmp_path):
    inp, ref = json_run
    first, second = json_files(inp)
    src, out, chk = tmp_path / "src", tmp_path / "out", tmp_path / "chk"
    s = Sessionizer(partitions=PARTITIONS, keep=MAPPED_KEEP, **MAPPED)

    def run() -> None:
        events = (
            spark.readStream.schema(from_arrow_schema(MAPPED_SCHEMA))
            .option("maxFilesPerTrigger", 1)
            .parquet(str(src))
        )
        query = s.stream(events, output=str(out), checkpoint=str(chk))
        assert query.__class__.__name__ == "StreamingQuery"
        query.awaitTermination()

    write_parquet(first, src / "a.parquet", "mapped")
    run()
    # The second file arrives with a row that has no user: invalid, its reason names `uid`.
    b = write_parquet(second, src / "b.parquet", "mapped")
    table = pq.read_table(b)
    bad = pa.Table.from_pylist([{"ts": 1_793_491_200_000, "url": "x"}], MAPPED_SCHEMA)
    pq.write_table(pa.concat_tables([table, bad]), b)
    os.utime(b, (second.stat().st_mtime,) * 2)
    run()
    run()  # nothing new: no batch, nothing written twice
    # Nobody but Spark's listener released the last run's lease when its query ended.
    spark.sparkContext._jsc.sc().listenerBus().waitUntilEmpty()
    _RUNS[str(chk)].ended.wait()
    assert DirectoryLeaseRecords(str(chk / "_lease")).latest().released
    _same(out, ref, ("sessions", "page_views", "late_events"))
    invalid = read_output(out, "invalid_events").to_pylist()
    assert [(r["batch_id"], r["reason"]) for r in invalid] == [(1, "missing uid")]
    assert json.loads(invalid[0]["raw"])["url"] == "x"


def _random_events(seed: int, users: int = 30, n: int = 600) -> list[dict]:
    """Events over 3 hours with pauses on both sides of the gap, closes and duplicates."""
    rng = random.Random(seed)
    t0 = 1_793_491_200_000_000  # 2026-11-01T00:00Z, µs
    events: list[dict] = []
    for _ in range(n):
        if events and rng.random() < 0.05:
            events.append(dict(rng.choice(events)))
            continue
        events.append(
            {
                "user_id": rng.randrange(1, users + 1),
                "event_time": t0 + rng.randrange(0, 3 * 3_600_000) * 1000,
                "page": rng.choice("abcdef"),
                "action": rng.choices(["view", "click", "browser_close"], [8, 3, 1])[0],
                "site": rng.choice(["s1", "s2", None]),
                "api_version": "v1",
                "browser": rng.choice(["b1", "b2"]),
                "language": "en",
                "device_type": None,
            }
        )
    return events


def _nested(e: dict) -> dict:
    """The sample layout: page.current, source.*, technical.* (device.type)."""
    return {
        "user_id": e["user_id"],
        "event_time": datetime.fromtimestamp(e["event_time"] / 1e6, UTC),
        "page": {"current": e["page"]},
        "action": e["action"],
        "source": {"site": e["site"], "api_version": e["api_version"]},
        "technical": {
            "browser": e["browser"],
            "lang": e["language"],
            "device": {"type": e["device_type"]},
        },
    }


def test_sessions_of_a_bounded_dataframe_equal_the_reference(spark):
    events = _random_events(seed=5)
    expected = reference_advance(
        [],
        events,
        gap_us=600_000_000,
        close_actions=("browser_close",),
        watermark_before=None,
        watermark_after=2**62,
    )["sessions"]
    key = lambda r: (r["user_id"], r["start_time"])  # noqa: E731
    expected.sort(key=key)
    assert {r["end_reason"] for r in expected} == {"inactivity", "explicit"}
    s = Sessionizer(partitions=PARTITIONS)
    typed = frame_of(spark, pa.Table.from_pylist([_nested(e) for e in events]))
    as_json = [json.dumps(_nested(e), default=lambda t: t.isoformat()) for e in events]
    lines = spark.createDataFrame([(line,) for line in as_json], "value string")
    for df in (typed, lines):
        got = sorted(rows_of(arrow_of(s.sessions(df).sessions)), key=key)
        assert [{k: r[k] for k in expected[0]} for r in got] == expected  # today's columns


def test_missing_column_is_one_line(spark):
    df = spark.createDataFrame([(1, "a")], "uid long, url string")
    s = Sessionizer(user="uid", page="url")
    with pytest.raises(ConfigError) as err:
        s.sessions(df)
    message = str(err.value)
    assert "\n" not in message
    assert message.startswith("the input has no column event_time (the time field)")


def _bad_file(tree: Path, last: Path) -> Path:
    """A Parquet file without the user field, arriving after `last`, in the last hour."""
    path = tree / last.parent.relative_to(tree) / "zz-no-user.parquet"
    pq.write_table(pa.table({"event_time": ["2026-11-01T01:30:00Z"] * 2, "x": [1, 2]}), path)
    os.utime(path, (last.stat().st_mtime + 1,) * 2)
    return path


def _check_bad_rows(out: Path, bad: Path) -> None:
    rows = read_output(out, "invalid_events", with_batch=False).to_pylist()
    assert [r["reason"] for r in rows] == ["user_id: not in the Parquet file"] * 2
    assert {r["source"].removeprefix("file:") for r in rows} == {str(bad)}
    assert sorted(json.loads(r["raw"])["x"] for r in rows) == [1, 2]


def test_parquet_stream_equals_json(spark, json_run, tmp_path):
    """`sessionize stream --input-format parquet` as the command runs it (run_stream; the
    flag's way there is in test_cli_failures.py), in this process to save a JVM start."""
    inp, ref = json_run
    tree = parquet_tree(inp, tmp_path / "pq")
    bad = _bad_file(tree, sorted(tree.rglob("*.parquet"))[-1])
    opts = StreamOptions(
        input=str(tree),
        output=str(tmp_path / "out"),
        checkpoint=str(tmp_path / "chk"),
        partitions=PARTITIONS,
        max_files_per_trigger=1,
        mapping=EventMapping(input_format="parquet", session_columns=NEWEST_COLUMNS),
    )
    records = run_stream(opts, spark, on_batch=lambda _: None)
    assert [r["batch"]["invalid"] for r in records] == [0, 0, 2]
    _same(tmp_path / "out", ref, ("sessions", "page_views", "late_events"))
    _check_bad_rows(tmp_path / "out", bad)


def test_parquet_batch_equals_json(spark, json_run, tmp_path):
    inp, _ = json_run
    tree = parquet_tree(inp, tmp_path / "pq")
    bad = _bad_file(tree, sorted(tree.rglob("*.parquet"))[-1])
    for name, root, fmt in (("json", inp, "json"), ("parquet", tree, "parquet")):
        opts = BatchOptions(
            input=str(root),
            output=str(tmp_path / name),
            start=HOURS[0],
            end=HOURS[1],
            partitions=PARTITIONS,
            mapping=EventMapping(input_format=fmt),
        )
        run_batch(opts, spark, on_hour=lambda _: None)
    _same(tmp_path / "parquet", tmp_path / "json", ("sessions", "page_views", "late_events"))
    assert read_output(tmp_path / "json", "sessions").num_rows > 0
    _check_bad_rows(tmp_path / "parquet", bad)


def test_stream_compacting_every_batch_equals_the_run_without(spark, json_run, tmp_path):
    """`--compact-every 1` (run_stream, as the command runs it): every batch's rows move into
    compacted files between batches, and the documented reader reads exactly the rows of
    the run without compaction, batch ids included."""
    from sessionize.sinks.registry import committed_rows

    inp, ref = json_run
    out = tmp_path / "out"
    opts = StreamOptions(
        input=str(inp),
        output=str(out),
        checkpoint=str(tmp_path / "chk"),
        partitions=PARTITIONS,
        max_files_per_trigger=1,
        compact_every=1,
    )
    lines: list[str] = []
    records = run_stream(opts, spark, on_batch=lines.append)
    assert len(records) == 2 and sum("compacted" in line for line in lines) == 2, lines
    assert not list(out.glob("*/batch_id=*")), "batch directories left after compacting"
    for name in ("sessions", "page_views"):
        want = read_output(ref, name)
        got = committed_rows(str(out), name).to_table().select(want.column_names)
        keys = [(f.name, "ascending") for f in want.schema if not pa.types.is_nested(f.type)]
        got = got.cast(want.schema)  # the plain read infers session_date as a string
        assert got.sort_by(keys).to_pylist() == want.sort_by(keys).to_pylist(), name
        plain = ds.dataset(str(out / name), format="parquet", partitioning="hive").to_table()
        plain = plain.select(want.column_names).cast(want.schema)  # OUT/NAME: the view
        assert plain.sort_by(keys).to_pylist() == want.sort_by(keys).to_pylist(), name
