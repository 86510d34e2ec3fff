"""Field mapping (docs/design.md, "Events"): flags -> EventMapping, what a mapped line's
fields must be and the reason when they are not, and a checkpoint bound to its mapping."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest
from pyspark.sql import functions as F

from sessionize.engines.checkpoint import check_or_record
from sessionize.errors import ConfigError, IncompatibleCheckpoint
from sessionize.mapping import DEFAULT_RECORD, EventMapping, parse_keep
from sessionize.parsing import parse
from tests.helpers import cli_env, sessionize

MAPPING = EventMapping(
    user="anonymous_id",
    time="ctx.ts",
    page="url",
    action="type",
    time_format="epoch-ms",
    user_type="string",
    keep=(("ref", "ctx.referrer"),),
)


def _line(**fields) -> str:
    event = {"anonymous_id": "u1", "ctx": {"ts": 1_700_000_000_000, "referrer": "r"}, "url": "/"}
    event.update(fields)
    return json.dumps({k: v for k, v in event.items() if v is not _DROP}, ensure_ascii=False)


_DROP = object()
_MS = 1_700_000_000_000


@pytest.fixture(scope="module")
def parsed(spark):
    """(line, what it should give): a `reason`, or the (user_id, event_time µs) of a valid
    event. Parsed in one Spark job."""
    cases = [
        # Keys: any Unicode, up to 256 UTF-8 bytes (128 two-byte characters).
        (_line(anonymous_id="ü-%✓ 用户"), ("ü-%✓ 用户", _MS * 1000)),
        (_line(anonymous_id="é" * 128), ("é" * 128, _MS * 1000)),
        (_line(anonymous_id="é" * 128 + "x"), "anonymous_id: longer than 256 bytes (UTF-8)"),
        (_line(anonymous_id=""), "anonymous_id: empty string"),
        (_line(anonymous_id=42), "anonymous_id: expected a string"),
        (_line(anonymous_id=_DROP), "missing anonymous_id"),
        (_line(anonymous_id=None), "missing anonymous_id"),
        # Epoch ms: JSON numbers; a fraction rounds to the microsecond; before 1970 is a time.
        (_line(ctx={"ts": 1_700_000_000_000.5}), ("u1", _MS * 1000 + 500)),
        (_line(ctx={"ts": -1000}), ("u1", -1_000_000)),
        # A string holding a JSON number is that number; any other string is not one.
        (_line(ctx={"ts": "1700000000000"}), ("u1", _MS * 1000)),
        (_line(ctx={"ts": "1700000000000.5"}), ("u1", _MS * 1000 + 500)),
        (_line(ctx={"ts": "1.7e12"}), ("u1", _MS * 1000)),
        (_line(ctx={"ts": " 1700000000000"}), "ctx.ts: expected a number"),
        (_line(ctx={"ts": "NaN"}), "ctx.ts: expected a number"),
        (_line(ctx={"ts": "1700000000000\n"}), "ctx.ts: expected a number"),
        (_line(ctx={"ts": "soon"}), "ctx.ts: expected a number"),
        (_line(ctx={"ts": True}), "ctx.ts: expected a number"),
        (_line(ctx={"ts": 1e20}), "ctx.ts: epoch time out of range (years 0002-9998)"),
        (_line(ctx={"ts": -1e15}), "ctx.ts: epoch time out of range (years 0002-9998)"),
        (_line(ctx={}), "missing ctx.ts"),
        (_line(ctx="x"), "ctx: expected an object"),
        # Other mapped fields keep the usual rules, named by their paths.
        (_line(url=_DROP), "missing url"),
        (_line(url=5), "url: expected a string"),
        (_line(type=["a"]), "type: expected a string"),
        (_line(ctx={"ts": _MS, "referrer": {"a": 1}}), "ctx.referrer: expected a string"),
        # Too far ahead of the batch's time (a day after _MS here): named by its path too.
        (_line(ctx={"ts": _MS + 2 * 86_400_000}), "ctx.ts too far in the future"),
    ]
    raw = spark.createDataFrame(
        [(line, None, f"f:{i}") for i, (line, _) in enumerate(cases)],
        "value string, error string, source string",
    )
    now = F.lit(datetime.fromtimestamp(_MS / 1000, UTC)).cast("timestamp")
    parsed = parse(raw, mapping=MAPPING, now=now, max_future_us=86_400_000_000)
    rows = {r["source"]: r.asDict() for r in parsed.collect()}
    return [(line, want, rows[f"f:{i}"]) for i, (line, want) in enumerate(cases)]


def test_mapped_fields_give_valid_events_or_reasons_naming_the_path(parsed):
    for line, want, row in parsed:
        if isinstance(want, str):
            assert row["reason"] == want, line
            assert row["raw"] == line
        else:
            assert row["reason"] is None, (line, row["reason"])
            micros = row["event_time"].replace(tzinfo=UTC) - datetime(1970, 1, 1, tzinfo=UTC)
            assert (
                row["user_id"],
                micros.days * 86_400_000_000 + micros.seconds * 1_000_000 + micros.microseconds,
            ) == want, line


def test_kept_fields_are_the_attribute_columns(parsed):
    line, _, row = parsed[0]
    assert row["ref"] == "r" and row["action"] == "view" and row["page"] == "/"
    assert "site" not in row


def test_epoch_seconds(spark):
    m = EventMapping(time="t", time_format="epoch-s", keep=())
    raw = spark.createDataFrame(
        [('{"user_id": 1, "t": 1700000000.25, "page": {"current": "/"}}', None, "f")],
        "value string, error string, source string",
    )
    (row,) = parse(raw, mapping=m).collect()
    assert row["reason"] is None
    assert row["event_time"].replace(tzinfo=UTC) == datetime(2023, 11, 14, 22, 13, 20, 250000, UTC)


def test_bad_mappings_are_refused_with_the_flag():
    with pytest.raises(ConfigError, match="--keep-fields 'page.x' runs through 'page'"):
        EventMapping(page="page", keep=(("x", "page.x"),))
    with pytest.raises(ConfigError, match="--page-field 'a..b'"):
        EventMapping(page="a..b")
    with pytest.raises(ConfigError, match="'user_id' cannot name an output column"):
        EventMapping(keep=(("user_id", "a"),))
    with pytest.raises(ConfigError, match="--time-field 'x' is also read"):
        EventMapping(time="x", keep=(("k", "x"),))
    with pytest.raises(ConfigError, match="is not NAME=PATH"):
        parse_keep("site")
    assert parse_keep("") == ()


def test_a_changed_mapping_is_refused_on_an_existing_checkpoint(tmp_path):
    chk = str(tmp_path / "chk")
    base = {"gap": "10m"}
    check_or_record(chk, {**base, **EventMapping().record()})
    with pytest.raises(IncompatibleCheckpoint, match=r"--user-type long \(this run: string\)"):
        check_or_record(chk, {**base, **EventMapping(user_type="string").record()})


def test_a_checkpoint_from_before_mappings_means_the_default_mapping(tmp_path):
    chk = str(tmp_path / "chk")
    check_or_record(chk, {"gap": "10m"})  # what an older version recorded
    with pytest.raises(IncompatibleCheckpoint, match=r"--time-field event_time \(this run: ts\)"):
        check_or_record(chk, {"gap": "10m", **EventMapping(time="ts").record()})
    check_or_record(chk, {"gap": "10m", **DEFAULT_RECORD})


def test_cli_refuses_a_changed_mapping_in_one_line(tmp_path):
    """The flags reach the checkpoint check (before Spark starts)."""
    inp, chk = tmp_path / "in", tmp_path / "chk"
    inp.mkdir()
    args = [
        "stream",
        "--input",
        str(inp),
        "--output",
        str(tmp_path / "out"),
        "--checkpoint",
        str(chk),
    ]
    from sessionize.commands.stream import StreamOptions

    check_or_record(str(chk), StreamOptions(str(inp), "o", str(chk)).recorded_settings())
    r = sessionize(
        *args,
        "--user-field",
        "anonymous_id",
        "--user-type",
        "string",
        "--keep-fields",
        "",
        env=cli_env(),
    )
    assert r.returncode == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    assert "--user-field user_id (this run: anonymous_id)" in lines[0]
    assert "--user-type long (this run: string)" in lines[0]
    assert "--keep-fields site=source.site," in lines[0] and "(this run: )" in lines[0]


def test_delta_tables_take_the_mapped_columns_from_an_empty_first_batch(tmp_path):
    """A first batch without sessions creates the tables with the mapping's columns, so a
    later batch of string ids and other attributes commits to them."""
    import pyarrow as pa

    from sessionize.schema import layout
    from sessionize.sinks.registry import open_sink

    sink = open_sink(str(tmp_path), "delta", job="j", mapping=MAPPING)
    sch = layout(MAPPING).sessions
    sink.clear_staging(0)
    sink.publish(0)
    row = {
        "session_id": "ü%2Dx-1",
        "user_id": "ü-x",
        "start_time": 1,
        "end_time": 1,
        "closed_at": 2,
        "duration_ms": 0,
        "event_count": 1,
        "pages": ["/"],
        "end_reason": "inactivity",
        "ref": "r",
        "session_date": 0,
    }
    sink.clear_staging(1)
    sink.write_part("sessions", 1, 0, pa.Table.from_pylist([row], sch))
    sink.publish(1)
    got = sink.table("sessions").to_pyarrow_table()
    assert got["user_id"].to_pylist() == ["ü-x"] and got["ref"].to_pylist() == ["r"]
    assert got.schema.field("user_id").type in (pa.string(), pa.large_string())


def test_string_ids_sharing_a_stored_key_keep_their_own_sessions(tmp_path):
    """Two ids whose `user_key` collides (forged here; xxhash64 collisions are ~1 in 10^19)
    share one stored key: a batch that touches one of them keeps the other's open events,
    and both users' sessions come out whole, each under its own id."""
    import pyarrow as pa

    from sessionize.config import SessionRules
    from sessionize.engines.partition import BatchPlan, run_partition
    from sessionize.engines.sessions import SessionSettings
    from sessionize.sinks.registry import open_sink
    from tests.helpers import read_output

    mapping = EventMapping(user_type="string", keep=())
    out = str(tmp_path / "out")
    settings = SessionSettings.of(
        SessionRules(), 1, f"files:{tmp_path / 'state'}", "j", out, mapping=mapping
    )
    minute, t0 = 60_000_000, 1_700_000_000_000_000

    def rows(*events):
        cols = ["user_id", "event_time", "page", "action", "user_key", "reason", "raw", "source"]
        data = [(u, t0 + m * minute, p, "view", 7, None, None, "f") for u, m, p in events]
        table = pa.table(list(zip(*data, strict=True)) if data else [[]] * len(cols), names=cols)
        return table.cast(
            pa.schema(
                [
                    ("user_id", pa.string()),
                    ("event_time", pa.timestamp("us", "UTC")),
                    ("page", pa.string()),
                    ("action", pa.string()),
                    ("user_key", pa.int64()),
                    ("reason", pa.string()),
                    ("raw", pa.string()),
                    ("source", pa.string()),
                ]
            )
        )

    sink = open_sink(out, mapping=mapping)
    batches = [
        (rows(("a", 0, "a1"), ("b", 1, "b1")), None),  # both open, one stored key
        (rows(("a", 5, "a2")), t0 - minute),  # touches a only
        (rows(), t0 + 60 * minute),  # every session closes
    ]
    previous = -1
    for version, (table, watermark) in enumerate(batches):
        plan = BatchPlan(version, previous, None if version == 0 else t0 - minute, watermark)
        sink.clear_staging(version)
        run_partition(settings, plan, 0, table)
        sink.publish(version)
        previous = version
    sessions = read_output(tmp_path / "out", "sessions").to_pylist()
    assert [(s["user_id"], s["pages"]) for s in sessions] == [("a", ["a1", "a2"]), ("b", ["b1"])]


def test_cli_flags_left_out_take_the_checkpoint_s_values_and_a_given_default_is_named(
    spark, tmp_path
):
    """A restart needs only --input, --output and --checkpoint; `--gap 10m` (the default,
    given) against a checkpoint of 5m is refused naming --gap alone."""
    from sessionize.commands.stream import StreamOptions, run_stream
    from sessionize.config import SessionRules
    from tests.helpers import read_output

    hour = tmp_path / "in" / "event_date=2026-11-01" / "event_hour=00"
    hour.mkdir(parents=True)
    t0 = int(datetime(2026, 11, 1, tzinfo=UTC).timestamp() * 1000)

    def line(user: str, minute: int) -> str:
        return json.dumps({"uid": user, "ts": t0 + minute * 60_000, "url": "/p"}) + "\n"

    (hour / "a.json").write_text(line("u-1", 0))
    mapping = EventMapping(
        user="uid", time="ts", page="url", time_format="epoch-ms", user_type="string", keep=()
    )
    out, chk = tmp_path / "out", tmp_path / "chk"
    first = StreamOptions(
        str(tmp_path / "in"),
        str(out),
        str(chk),
        mapping=mapping,
        rules=SessionRules(gap_us=5 * 60_000_000),
    )
    run_stream(first, spark, on_batch=lambda _: None)
    args = [
        "stream",
        "--input",
        str(tmp_path / "in"),
        "--output",
        str(out),
        "--checkpoint",
        str(chk),
    ]
    refused = sessionize(*args, "--gap", "10m", env=cli_env())
    assert refused.returncode == 2
    lines = refused.stderr.strip().splitlines()
    assert len(lines) == 1 and "--gap 5m (this run: 10m)" in lines[0], refused.stderr
    assert "--user-field" not in lines[0] and "--time-format" not in lines[0], lines[0]

    (hour / "b.json").write_text(line("u-1", 7) + line("u-2", 40))
    done = sessionize(*args, env=cli_env())  # every recorded flag left out
    assert done.returncode == 0, done.stderr
    starts = sorted(
        r["start_time"] for r in read_output(out, "sessions").to_pylist() if r["user_id"] == "u-1"
    )
    # 00:00 and 00:07 are two sessions by the recorded 5m gap (the default 10m joins them).
    assert [(s - starts[0]).total_seconds() for s in starts] == [0, 7 * 60]
