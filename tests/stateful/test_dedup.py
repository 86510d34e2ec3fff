"""examples/dedup.py against a plain loop over the events: what is kept, what is late, and
that the state holds only the ids of windows the watermark has not passed."""

from __future__ import annotations

from collections import Counter

from hypothesis import given
from hypothesis import strategies as st

from examples.dedup import EVENTS, HOUR_US, SAMPLE, Dedup
from sessionize.stateful import run_local

from .streams import SETTINGS, batches, cuts, times_of

STEP = HOUR_US // 4  # event times are multiples of a quarter hour
TTL = HOUR_US


def stream(in_order: bool):
    times = (
        st.lists(st.integers(0, 3), max_size=40).map(
            lambda d: [sum(d[: i + 1]) for i in range(len(d))]
        )
        if in_order
        else st.lists(st.integers(0, 30), max_size=40)
    )
    return times.flatmap(
        lambda ts: st.lists(st.sampled_from("abcd"), min_size=len(ts), max_size=len(ts)).map(
            lambda ids: [
                {"event_id": i, "event_time": t * STEP, "payload": f"{n}"}
                for n, (i, t) in enumerate(zip(ids, ts, strict=True))
            ]
        )
    )


def reference(split: list[list[dict]], lateness: int):
    """Per batch in arrival order: late if below the watermark; else, in event-time order,
    kept iff at or after the end of its id's window (opened by the last kept one)."""
    end: dict[str, int] = {}
    kept, late = Counter(), Counter()
    latest = watermark = None
    for batch in split:
        for e in sorted(batch, key=lambda e: e["event_time"]):
            t = e["event_time"]
            if watermark is not None and t < watermark:
                late[(e["event_id"], t)] += 1
            elif t >= end.get(e["event_id"], t):
                kept[(e["event_id"], t)] += 1
                end[e["event_id"]] = t + TTL
        if batch:
            top = max(e["event_time"] for e in batch)
            latest = top if latest is None else max(latest, top)
            watermark = max(watermark or latest - lateness, latest - lateness)
    live = {i for i, e in end.items() if watermark is None or e >= watermark}
    return kept, late, live


def pairs(tables) -> Counter:
    return Counter(
        (i, t)
        for table in tables
        for i, t in zip(table.column("event_id").to_pylist(), times_of(table), strict=True)
    )


def check(events: list[dict], at: list[int], lateness: int):
    split = batches(events, at, _as_ts(EVENTS))
    run = run_local(Dedup(hours=1), [b.cast(EVENTS) for b in split], lateness_us=lateness)
    kept, late, live = reference([b.to_pylist() for b in split], lateness)
    assert pairs(run.outputs["events"]) == kept
    assert pairs(run.outputs["late"]) == late
    assert set(run.state.column("event_id").to_pylist()) == live
    assert run.counters.get("duplicates", 0) == len(events) - sum(kept.values()) - sum(
        late.values()
    )
    return kept


def _as_ts(schema):
    import pyarrow as pa

    return pa.schema([f.with_type(pa.int64()) if f.name == "event_time" else f for f in schema])


@SETTINGS
@given(data=st.data(), events=stream(in_order=True))
def test_in_order_streams_keep_the_same_events_however_they_are_cut(data, events):
    kept = check(events, data.draw(cuts(len(events))), lateness=0)
    whole, _, _ = reference([events], 0)
    assert kept == whole


@SETTINGS
@given(data=st.data(), events=stream(in_order=False), lateness=st.integers(0, 8))
def test_out_of_order_streams_with_lateness_equal_the_loop(data, events, lateness):
    check(events, data.draw(cuts(len(events))), lateness=lateness * STEP)


def test_the_sample_keeps_a_again_after_its_window():
    run = run_local(Dedup(hours=2), SAMPLE)
    assert run.output("events").column("payload").to_pylist() == [
        "x",
        "y",
        "again, after 2 hours",
        "z",
    ]
    assert run.counters == {"duplicates": 1}


def test_run_local_takes_lateness_as_a_duration_like_stream():
    """`lateness="1h"` (or a timedelta) is the watermark's distance, as `stream` takes it;
    an event behind it is late, one at it is not."""
    from datetime import timedelta

    import pytest

    from sessionize.errors import ConfigError

    first = [{"event_id": "a", "event_time": 5 * HOUR_US, "payload": "0"}]
    then = [
        {"event_id": "b", "event_time": 4 * HOUR_US - 1, "payload": "1"},
        {"event_id": "c", "event_time": 4 * HOUR_US, "payload": "2"},
    ]
    split = [b.cast(EVENTS) for b in batches(first + then, [1], _as_ts(EVENTS))]
    for lateness in ("1h", timedelta(hours=1), HOUR_US):
        run = run_local(Dedup(hours=1), split, lateness=lateness)
        assert run.watermark == 4 * HOUR_US
        assert pairs(run.outputs["late"]) == Counter({("b", 4 * HOUR_US - 1): 1})
    with pytest.raises(ConfigError, match="lateness: 'an hour' is not a duration"):
        run_local(Dedup(hours=1), split, lateness="an hour")
