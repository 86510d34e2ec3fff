"""`--max-future`: an event too far ahead of the batch's time is invalid and never moves the
watermark, in both engines; the stream judges by the time in Spark's offset log, so a
re-executed batch gives the same answer however late it runs."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pyarrow.compute as pc

from sessionize.commands.batch import BatchOptions, run_batch
from sessionize.commands.stream import StreamOptions, run_stream
from tests.helpers import read_output

MINUTE = 60_000_000
# The reason names the time field; the default mapping's is `event_time`.
FUTURE_REASON = "event_time too far in the future"


def _line(user: int, when: str) -> str:
    return json.dumps({"user_id": user, "event_time": when, "page": {"current": "p"}})


def _input(root: Path) -> Path:
    """Hour 00: a visit at 00:00-00:05 and one event dated 2099; hour 01: the visit goes on."""
    for hour, lines in {
        "00": [
            _line(1, "2026-11-01T00:00:00Z"),
            _line(1, "2026-11-01T00:05:00Z"),
            _line(2, "2099-01-01T00:00:00Z"),
        ],
        "01": [_line(1, "2026-11-01T00:08:00Z"), _line(3, "2026-11-01T01:00:00Z")],
    }.items():
        d = root / "event_date=2026-11-01" / f"event_hour={hour}"
        d.mkdir(parents=True)
        (d / "a.json").write_text("\n".join(lines) + "\n")
    return root


def _stream(spark, tmp_path: Path, name: str, **kw) -> tuple[StreamOptions, list[dict]]:
    opts = StreamOptions(
        input=str(tmp_path / "in"),
        output=str(tmp_path / name / "out"),
        checkpoint=str(tmp_path / name / "chk"),
        partitions=2,
        max_files_per_trigger=1,
        **kw,
    )
    return opts, run_stream(opts, spark, on_batch=lambda _: None)


def _ts(text: str) -> int:
    return int(datetime.fromisoformat(text).replace(tzinfo=UTC).timestamp() * 1_000_000)


def _check_outputs(out: Path) -> None:
    invalid = read_output(out, "invalid_events")
    assert invalid["reason"].to_pylist() == [FUTURE_REASON]
    assert "2099" in invalid["raw"][0].as_py()
    assert read_output(out, "late_events").num_rows == 0  # 00:08 is on time: no 2098 watermark
    views = read_output(out, "page_views")
    assert pc.sum(pc.equal(views["user_id"], 1)).as_py() == 3  # the visit was emitted


def test_store_engine_keeps_the_watermark_and_judges_by_the_offset_log(spark, tmp_path):
    _input(tmp_path / "in")
    opts, records = _stream(spark, tmp_path, "store")
    assert [r["watermark"] for r in records] == [
        _ts("2026-11-01T00:05:00") - 10 * MINUTE,
        _ts("2026-11-01T01:00:00") - 10 * MINUTE,
    ]
    _check_outputs(tmp_path / "store" / "out")

    # Re-execute batch 1 as after a crash, with its logged time set back to 2026-11-01 00:00:
    # the 01:00 event is then more than 30 minutes ahead, whatever the clock says now.
    _uncommit_batch_1(Path(opts.checkpoint), _ts("2026-11-01T00:00:00"))
    again = StreamOptions(**{**opts.__dict__, "max_future_us": 30 * MINUTE})
    records = run_stream(again, spark, on_batch=lambda _: None)
    assert [r["version"] for r in records] == [1]
    invalid = read_output(tmp_path / "store" / "out", "invalid_events")
    assert sorted(invalid["raw"].to_pylist()) == sorted(
        [_line(2, "2099-01-01T00:00:00Z"), _line(3, "2026-11-01T01:00:00Z")]
    )
    # Only the valid 00:08 event of batch 1 moved the watermark, not the 01:00 one.
    assert records[0]["watermark"] == _ts("2026-11-01T00:08:00") - 10 * MINUTE


def _uncommit_batch_1(chk: Path, logged_us: int) -> None:
    """Batch 1 as after a crash before its commit, its time in the offset log `logged_us`."""
    offsets = chk / "offsets" / "1"
    head, meta, *rest = offsets.read_text().split("\n")
    meta = json.loads(meta)
    meta["batchTimestampMs"] = logged_us // 1000
    offsets.write_text("\n".join([head, json.dumps(meta), *rest]))
    for name in ("1", ".1.crc"):  # Spark's commit of batch 1 and its checksum
        (chk / "commits" / name).unlink(missing_ok=True)


def _logged_us(chk: Path, batch: int) -> int:
    return (
        json.loads((chk / "offsets" / str(batch)).read_text().split("\n")[1])["batchTimestampMs"]
        * 1000
    )


def _deep(user: int, when: str) -> str:
    """A line nested deeper than the block reader reads: Spark's exact path judges it."""
    deep = "[" * 70 + "1" + "]" * 70
    return (
        json.dumps({"user_id": user, "event_time": when, "page": {"current": "p"}})[:-2]
        + f', "x": {deep}}}}}'
    )


def test_each_micro_batch_of_a_query_is_judged_by_its_own_time(spark, tmp_path):
    """The parse is built once per query and run for every micro-batch of it: each batch is
    judged by its own time, in the reading task and in Spark's exact path alike. The same
    query re-executes batch 1 at a logged time of 2026-11-01 00:00, then runs batch 2 now."""
    _input(tmp_path / "in")
    opts, _ = _stream(spark, tmp_path, "store")
    chk = Path(opts.checkpoint)
    _uncommit_batch_1(chk, _ts("2026-11-01T00:00:00"))
    later = [
        _line(4, "2026-11-01T01:30:00Z"),
        _deep(5, "2026-11-01T01:30:00Z"),
        _deep(6, "2099-01-01T00:00:00Z"),
        _line(7, "2099-01-01T00:00:00Z"),
    ]
    d = tmp_path / "in" / "event_date=2026-11-01" / "event_hour=02"
    d.mkdir()
    (d / "a.json").write_text("\n".join(later) + "\n")
    again = StreamOptions(**{**opts.__dict__, "max_future_us": 30 * MINUTE})
    records = run_stream(again, spark, on_batch=lambda _: None)
    assert [r["version"] for r in records] == [1, 2]

    # The reference: each line against its own batch's logged time (a plain loop).
    batches = {1: [_line(1, "2026-11-01T00:08:00Z"), _line(3, "2026-11-01T01:00:00Z")], 2: later}
    expected = [_line(2, "2099-01-01T00:00:00Z")]  # batch 0's, judged in the first run
    for batch, lines in batches.items():
        limit = _logged_us(chk, batch) + 30 * MINUTE
        expected += [x for x in lines if _ts(json.loads(x)["event_time"][:-1]) > limit]
    assert _ts("2026-11-01T01:30:00") < _logged_us(chk, 2)  # 01:30 is valid in batch 2 only
    invalid = read_output(tmp_path / "store" / "out", "invalid_events")
    assert sorted(invalid["raw"].to_pylist()) == sorted(expected)
    assert set(invalid["reason"].to_pylist()) == {FUTURE_REASON}
    assert (records[1]["batch"]["records"], records[1]["batch"]["invalid"]) == (4, 2)


def test_spark_engine_never_moves_its_watermark_for_an_invalid_event(spark, tmp_path):
    _input(tmp_path / "in")
    _, records = _stream(spark, tmp_path, "hdfs", state="spark-hdfs")
    assert all(
        r["watermark"] is None or r["watermark"] < _ts("2027-01-01T00:00:00") for r in records
    )
    _check_outputs(tmp_path / "hdfs" / "out")


def test_batch_mode_judges_by_the_start_of_the_run(spark, tmp_path):
    _input(tmp_path / "in")
    opts = BatchOptions(
        input=str(tmp_path / "in"),
        output=str(tmp_path / "b"),
        start=datetime(2026, 11, 1, 0, tzinfo=UTC),
        end=datetime(2026, 11, 1, 1, tzinfo=UTC),
        partitions=2,
    )
    run_batch(opts, spark, on_hour=lambda _: None)
    invalid = read_output(tmp_path / "b", "invalid_events")
    assert invalid["reason"].to_pylist() == [FUTURE_REASON]


def _parse_at(spark, now_us: int, lines: list[str]):
    from pyspark.sql import functions as F

    from sessionize.parsing import parse

    raw = spark.createDataFrame(
        [(line, None, f"f.json:{i}") for i, line in enumerate(lines)],
        "value string, error string, source string",
    )
    return parse(raw, now=F.timestamp_micros(F.lit(now_us)), max_future_us=24 * 60 * MINUTE)


def test_the_limit_is_exact_to_the_microsecond(spark):
    lines = [
        _line(1, "2026-11-02T00:00:00Z"),  # exactly now + 1 day: still valid
        _line(2, "2026-11-02T00:00:00.000001Z"),
        _line(3, "2020-01-01T00:00:00Z"),
    ]
    rows = _parse_at(spark, _ts("2026-11-01T00:00:00"), lines).orderBy("user_id").collect()
    assert [r["reason"] for r in rows] == [None, FUTURE_REASON, None]


def test_the_batch_time_is_not_compiled_into_the_parse(spark):
    """Every micro-batch has its own time; were it a constant of Spark's generated code, the
    code would be compiled anew for every batch."""

    def code(now_us: int) -> list[str]:
        plans = _parse_at(spark, now_us, [_line(1, "2026-11-01T00:00:00Z")])
        stages = plans._jdf.queryExecution().debug().codegenToSeq()
        return [stages.apply(i)._2() for i in range(stages.size())]

    first, second = code(_ts("2026-11-01T00:00:00")), code(_ts("2026-11-01T00:00:07"))
    assert first and first == second
