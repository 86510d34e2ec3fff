"""Events in another layout (other field names, string user keys, epoch-ms times) give the
sessions of the same events in the sample contract, through stream and batch, every state
backend and both Spark-managed states; expected rows come from the reference
implementation (tests/layouts.py)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from sessionize.commands.batch import BatchOptions, run_batch
from sessionize.commands.stream import StreamOptions, run_stream
from sessionize.mapping import EventMapping
from tests.helpers import generate, read_output
from tests.layouts import (
    LATENESS_US,
    MAPPING_B,
    actual,
    expected,
    key_of,
    read_events,
    write_layout_b,
)

START = datetime(2026, 11, 1, tzinfo=UTC)
HOURS = 1


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    """(layout A tree, layout B tree, A's events): a small generated day, no invalid or late
    lines, so every event is on time in any batching."""
    root = tmp_path_factory.mktemp("layouts")
    a = generate(
        root / "a",
        hours=HOURS,
        users=30,
        events_per_hour=300,
        invalid_rate=0.0,
        late_rate=0.0,
        files_per_hour=2,
    )
    b = write_layout_b(a, root / "b")
    return a, b, read_events(a)


def _stream(spark, root, inp, mapping, state="files", **kw):
    opts = StreamOptions(
        input=str(inp),
        output=str(root / "out"),
        checkpoint=str(root / "chk"),
        state=state,
        partitions=2,
        mapping=mapping,
        **kw,
    )
    run_stream(opts, spark, on_batch=lambda _: None)
    return root / "out"


def _check(out, events, watermark, *, string_keys):
    want = expected(events, watermark, string_keys=string_keys)
    assert want["sessions"], "the data must emit sessions"
    for name in ("sessions", "page_views"):
        assert actual(read_output(out, name, with_batch=False)) == want[name], name
    for name in ("late_events", "invalid_events"):
        assert read_output(out, name).num_rows == 0, name


def test_layout_b_gives_the_sessions_of_the_same_events_in_the_sample_contract(
    spark, tmp_path, inputs
):
    """The expected rows are the reference's over layout A's events with B's keys: stream
    in two micro-batches (open sessions through the `files` state) and batch mode; and
    layout A's stream gives the reference's rows with A's keys."""
    a, b, events = inputs
    final = max(e["event_time"] for e in events) - LATENESS_US
    out = _stream(spark, tmp_path / "stream", b, MAPPING_B, max_files_per_trigger=1)
    _check(out, events, final, string_keys=True)
    # The same events in the sample contract, through the same stream, give those sessions.
    out_a = _stream(spark, tmp_path / "stream-a", a, EventMapping())
    _check(out_a, events, final, string_keys=False)
    opts = BatchOptions(
        input=str(b),
        output=str(tmp_path / "batch" / "out"),
        start=START,
        end=START.replace(hour=HOURS - 1),
        partitions=2,
        mapping=MAPPING_B,
    )
    run_batch(opts, spark, on_hour=lambda _: None)
    end_of_last_hour = int(START.timestamp() * 1_000_000) + HOURS * 3_600_000_000
    _check(tmp_path / "batch" / "out", events, end_of_last_hour, string_keys=True)


def test_the_reference_rows_of_both_layouts_differ_only_in_keys(inputs):
    """What the test above expects of layout B is layout A's result with the keys replaced."""
    _, _, events = inputs
    wm = max(e["event_time"] for e in events) - LATENESS_US
    a, b = expected(events, wm, string_keys=False), expected(events, wm, string_keys=True)
    assert len(a["sessions"]) == len(b["sessions"]) > 0
    for ra, rb in zip(a["sessions"], b["sessions"], strict=True):
        assert rb["user_id"] == key_of(ra["user_id"])
        assert {**ra, "user_id": None, "session_id": None} == {
            **rb,
            "user_id": None,
            "session_id": None,
        }


# `files` runs in the test above; the other backends here.
@pytest.mark.parametrize("state", ["postgres", "redis", "dynamodb"], indirect=True)
def test_string_keys_carry_across_batches_in_every_state_backend(spark, tmp_path, inputs, state):
    _, b, events = inputs
    out = _stream(spark, tmp_path, b, MAPPING_B, state=state("b"), max_files_per_trigger=1)
    final = max(e["event_time"] for e in events) - LATENESS_US
    _check(out, events, final, string_keys=True)


@pytest.mark.parametrize("state", ["spark-rocksdb", "spark-hdfs"])
def test_string_keys_in_spark_managed_state(spark, tmp_path, inputs, state):
    _, b, events = inputs
    out = _stream(spark, tmp_path, b, MAPPING_B, state=state)
    final = max(e["event_time"] for e in events) - LATENESS_US
    _check(out, events, final, string_keys=True)
