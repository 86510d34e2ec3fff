"""What a session carries, end to end with every option on: batch equals stream when
sessions span micro-batches, a conversion value that is not a number is an invalid event
naming its field, dropped bots are counted in the batch record, and a checkpoint refuses a
changed option in one line. The columns' values are checked in tests/logic/test_carried.py."""

from __future__ import annotations

import json
import os
import random
from datetime import UTC, datetime, timedelta

import pyarrow.compute as pc
import pytest

from sessionize.commands.batch import BatchOptions, run_batch
from sessionize.commands.stream import StreamOptions, run_stream
from sessionize.content import Conversion, SessionContent
from sessionize.engines.checkpoint import check_or_record
from sessionize.errors import IncompatibleCheckpoint
from sessionize.mapping import EventMapping
from tests.helpers import read_output

H0 = datetime(2026, 11, 1, tzinfo=UTC)
BOT = "Mozilla/5.0 (compatible; Googlebot/2.1; +http://www.google.com/bot.html)"
HUMAN = "Mozilla/5.0 (X11; Linux x86_64; rv:120.0) Gecko/20100101 Firefox/120.0"
MAPPING = EventMapping(
    url="page.url",
    referrer="page.referrer",
    user_agent="technical.ua",
    last=(("cart", "cart.id"),),
    session_columns=2,
    content=SessionContent(
        ping_action="ping",
        conversions=(Conversion("purchase", "buy", "order.total"),),
        bots="drop",
        site_hosts=("shop.example",),
    ),
)
URLS = [
    "https://shop.example/?utm_source=google&utm_medium=cpc",
    "https://shop.example/",
    "https://shop.example/?gclid=x",
    "https://shop.example/?utm_medium=email",
]
REFERRERS = [None, "https://www.bing.com/", "https://t.co/a", "https://shop.example/x"]


def _write_input(root) -> tuple[int, int]:
    """One hour of four files, users whose sessions span files; returns (bot lines,
    invalid lines)."""
    rng = random.Random(7)
    files: dict[tuple[int, int], list[str]] = {}
    bots = invalid = 0
    for user in range(40):
        t = H0 + timedelta(seconds=rng.randrange(0, 2400))
        agent = BOT if user % 10 == 0 else HUMAN
        for _ in range(rng.randrange(3, 12)):
            t += timedelta(seconds=rng.choice([5, 20, 60, 300, 900]))
            if t >= H0 + timedelta(hours=1):
                break
            action = rng.choice(["view", "view", "ping", "click", "buy"])
            event = {
                "user_id": user,
                "event_time": t.strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
                "action": action,
                "page": {
                    "current": rng.choice("abc"),
                    "url": rng.choice(URLS),
                    "referrer": rng.choice(REFERRERS),
                },
                "technical": {"ua": agent},
                "cart": {"id": rng.choice([None, "c1"])},
            }
            if action == "buy":
                event["order"] = {"total": rng.choice([12.5, 3, None, "7.25"])}  # text too
            if action == "click":
                event["order"] = {"total": "not read: not a conversion"}
            bots += agent == BOT
            hour, quarter = (t - H0) // timedelta(hours=1), t.minute // 15
            files.setdefault((hour, quarter), []).append(json.dumps(event))
    bad = {
        "user_id": 999,
        "event_time": "2026-11-01T00:30:00Z",
        "action": "buy",
        "page": {"current": "a"},
        "order": {"total": "twelve"},
    }
    files[(0, 2)].append(json.dumps(bad))
    invalid += 1
    for n, ((hour, quarter), lines) in enumerate(sorted(files.items())):
        d = root / "event_date=2026-11-01" / f"event_hour={hour:02d}"
        d.mkdir(parents=True, exist_ok=True)
        path = d / f"part-{quarter:05d}.json"
        path.write_text("\n".join(lines) + "\n")
        os.utime(path, (1_800_000_000 + n, 1_800_000_000 + n))  # the stream reads in time order
    return bots, invalid


@pytest.fixture(scope="module")
def runs(spark, tmp_path_factory):
    root = tmp_path_factory.mktemp("content")
    bots, invalid = _write_input(root / "in")
    batch = run_batch(
        BatchOptions(
            input=str(root / "in"),
            output=str(root / "batch"),
            start=H0,
            end=H0,
            partitions=2,
            mapping=MAPPING,
        ),
        spark,
        on_hour=lambda _: None,
    )
    stream = run_stream(
        StreamOptions(
            input=str(root / "in"),
            output=str(root / "stream"),
            checkpoint=str(root / "chk"),
            partitions=2,
            max_files_per_trigger=2,
            mapping=MAPPING,
        ),
        spark,
        on_batch=lambda _: None,
    )
    return root, batch, stream, bots, invalid


def test_batch_equals_stream_with_every_option_on(runs):
    root, _, stream, _, _ = runs
    assert len(stream) >= 2  # sessions span micro-batches
    assert stream[-1]["totals"]["late"] == 0
    s = read_output(root / "stream", "sessions", with_batch=False)
    b = read_output(root / "batch", "sessions", with_batch=False)
    closed = pc.less(pc.cast(b["closed_at"], "int64"), stream[-1]["watermark"])
    assert s.num_rows > 10
    assert b.filter(closed).equals(s)
    for column in ("channel", "purchase_value", "engaged_time_ms", "cart", "event_counts"):
        assert s[column].null_count < s.num_rows, column
    assert set(s["channel"].to_pylist()) >= {"Paid Search", "Email"}
    assert not any(s["is_bot"].to_pylist())


@pytest.mark.parametrize("provider", ["spark-rocksdb", "spark-hdfs"])
def test_spark_managed_state_carries_the_same(spark, runs, tmp_path, provider):
    """transformWithState (RocksDB) and applyInPandasWithState (HDFS) both carry every
    column, the `event_counts` map included."""
    root = runs[0]
    records = run_stream(
        StreamOptions(
            input=str(root / "in"),
            output=str(tmp_path / "out"),
            checkpoint=str(tmp_path / "chk"),
            state=provider,
            partitions=2,
            max_files_per_trigger=2,
            mapping=MAPPING,
        ),
        spark,
        on_batch=lambda _: None,
    )
    s = read_output(tmp_path / "out", "sessions", with_batch=False)
    b = read_output(root / "batch", "sessions", with_batch=False)
    closed = pc.less(pc.cast(b["closed_at"], "int64"), records[-1]["watermark"])
    assert s.num_rows > 10
    assert b.filter(closed).equals(s)
    assert records[-1]["totals"]["bot_events"] == runs[3]


@pytest.mark.parametrize("state", ["postgres", "redis", "dynamodb"], indirect=True)
def test_server_state_backends_carry_the_same(spark, runs, tmp_path, state):
    """Open sessions' url, referrer, user agent, last: fields and conversion values travel
    in the state rows of every backend: the stream equals the batch on each."""
    root = runs[0]
    records = run_stream(
        StreamOptions(
            input=str(root / "in"),
            output=str(tmp_path / "out"),
            checkpoint=str(tmp_path / "chk"),
            state=state(),
            partitions=2,
            max_files_per_trigger=2,
            mapping=MAPPING,
        ),
        spark,
        on_batch=lambda _: None,
    )
    assert len(records) >= 2
    s = read_output(tmp_path / "out", "sessions", with_batch=False)
    b = read_output(root / "batch", "sessions", with_batch=False)
    closed = pc.less(pc.cast(b["closed_at"], "int64"), records[-1]["watermark"])
    assert s.num_rows > 10
    assert b.filter(closed).equals(s)


def test_a_conversion_value_that_is_not_a_number_is_an_invalid_event(runs):
    root, _, _, _, invalid = runs
    for out in ("stream", "batch"):
        rows = read_output(root / out, "invalid_events").to_pylist()
        assert [r["reason"] for r in rows] == ["order.total: expected a number"] * invalid, out


def test_dropped_bot_events_are_counted_in_the_batch_record(runs):
    _, batch, stream, bots, _ = runs
    assert bots > 0
    assert stream[-1]["totals"]["bot_events"] == bots
    assert sum(r["batch"]["bot_events"] for r in stream) == bots
    assert batch[-1]["totals"]["bot_events"] == bots


def test_the_batch_line_shows_dropped_bot_events_only_when_there_are_some():
    from sessionize.engines.session_report import session_line

    batch = {
        "records": 10,
        "invalid": 1,
        "events_in": 9,
        "sessions_out": 2,
        "late": 0,
        "open_sessions": 3,
    }
    record = {"watermark": None, "duration_s": 1.0}
    line = session_line("batch 4", {**record, "batch": {**batch, "bot_events": 3}})
    assert ", 0 late, 3 bot events dropped, 3 open sessions," in line, line
    for bots in ({}, {"bot_events": 0}):
        assert "bot" not in session_line("batch 4", {**record, "batch": {**batch, **bots}})


def test_a_changed_option_is_refused_in_one_line(tmp_path):
    chk = str(tmp_path / "chk")

    def settings(mapping):
        return StreamOptions("in", "out", chk, mapping=mapping).recorded_settings()

    check_or_record(chk, settings(MAPPING))
    changed = EventMapping(
        url="page.url",
        referrer="page.referrer",
        user_agent="technical.ua",
        last=(("cart", "cart.id"),),
        session_columns=2,
        content=SessionContent(
            ping_action="ping",
            conversions=(Conversion("purchase", "buy", "order.total"),),
            bots="flag",
            site_hosts=("shop.example",),
        ),
    )
    with pytest.raises(IncompatibleCheckpoint) as refused:
        check_or_record(chk, settings(changed))
    message = str(refused.value)
    assert "--bots drop (this run: flag)" in message and "\n" not in message


def test_typed_columns_conversion_values(spark):
    from sessionize.columns import parse_columns

    rows = [(1, "2026-11-01T00:00:00Z", "a", "buy", "12"), (2, "2026-11-01T00:00:00Z", "a",
            "view", "n/a"), (3, "2026-11-01T00:00:00Z", "a", "buy", None),
            (4, "2026-11-01T00:00:00Z", "a", "buy", "n/a")]  # fmt: skip
    df = spark.createDataFrame(
        rows,
        "user_id long, event_time string, `page.current` string, "
        "action string, `order.total` string",
    )
    out = {r["user_id"]: r for r in parse_columns(df, MAPPING).collect()}
    assert out[1]["reason"] is None and out[1]["purchase_value_json"] == "12"  # numeric string
    assert out[4]["reason"] == "order.total: expected a number"
    assert out[2]["reason"] is None and out[3]["reason"] is None
    df = spark.createDataFrame(
        [(1, "2026-11-01T00:00:00Z", "a", "buy", 2.5)],
        "user_id long, event_time string, `page.current` string, "
        "action string, `order.total` double",
    )
    (row,) = parse_columns(df, MAPPING).collect()
    assert row["reason"] is None and float(row["purchase_value_json"]) == 2.5


def test_cli_refuses_a_new_option_on_a_checkpoint_from_before_in_one_line(tmp_path):
    from tests.helpers import cli_env, sessionize

    inp, chk = tmp_path / "in", tmp_path / "chk"
    inp.mkdir()
    old = StreamOptions(str(inp), "o", str(chk)).recorded_settings()
    for key in ("url_field", "conversion", "bots", "session_columns"):
        old.pop(key)  # what a checkpoint from before recorded
    check_or_record(str(chk), old)
    r = sessionize(
        "stream",
        "--input",
        str(inp),
        "--output",
        str(tmp_path / "out"),
        "--checkpoint",
        str(chk),
        "--conversion",
        "purchase=buy",
        env=cli_env(),
    )
    assert r.returncode == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    assert "--conversion  (this run: purchase=buy)" in lines[0]


def test_the_recompute_command_spells_every_option_as_its_flag(tmp_path):
    import shlex
    from dataclasses import replace

    from sessionize.cli import cli
    from sessionize.commands.batch import _rest_note

    rules = tmp_path / "rules.txt"
    rules.write_text("All =\n")
    content = replace(
        MAPPING.content,
        channel_rules="All =\n",
        channel_rules_path=str(rules),
        conversions=(Conversion("purchase", "buy", "order.total"), Conversion("signup", "join")),
    )
    opts = BatchOptions(
        input="in", output="out", start=H0, end=H0, mapping=replace(MAPPING, content=content)
    )
    note = _rest_note(opts, opts.engine_settings(), H0, H0)
    args = shlex.split(note.split("sessionize batch ", 1)[1])
    params = cli.commands["batch"].make_context("batch", args).params
    assert params["conversion"] == ("purchase=buy,value=order.total", "signup=join")
    assert params["channel_rules"] == str(rules)
    assert (params["bots"], params["url_field"], params["ping_action"]) == (
        "drop",
        "page.url",
        "ping",
    )
    assert "--session-columns" not in args


def test_status_shows_dropped_bot_events_only_for_a_job_that_drops_them():
    from sessionize.commands.status import totals_line

    assert totals_line({"records": 5, "invalid": 0, "bot_events": 2}).endswith(
        "2 bot events dropped"
    )
    assert "bot" not in totals_line({"records": 5, "invalid": 0, "bot_events": 0})
    assert "bot" not in totals_line({"records": 5, "invalid": 0, "bot_events": None})
