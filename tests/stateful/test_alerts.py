"""examples/alerts.py against a plain loop over the logins, for any micro-batch split, and
its state bounded by the watermark."""

from __future__ import annotations

from collections import Counter

import pyarrow as pa
from hypothesis import given
from hypothesis import strategies as st

from examples.alerts import LOGINS, MINUTE_US, SAMPLE, FailedLoginAlerts
from sessionize.stateful import run_local

from .streams import SETTINGS, batches, cuts

WINDOW = 10 * MINUTE_US
INPUT = pa.schema([f.with_type(pa.int64()) if f.name == "event_time" else f for f in LOGINS])

logins_st = st.lists(
    st.tuples(
        st.integers(0, 4),
        st.sampled_from(["ann", "bob", "cy"]),
        st.sampled_from(["failure", "failure", "success"]),
    ),
    max_size=50,
).map(
    lambda steps: [
        {"user": u, "event_time": sum(s for s, _, _ in steps[: i + 1]) * MINUTE_US, "outcome": o}
        for i, (_, u, o) in enumerate(steps)
    ]
)


def reference(logins: list[dict], n: int) -> Counter:
    """Logins in time order: a failure alerts when the user's failures less than the window
    before it, itself included, number exactly n."""
    seen: dict[str, list[int]] = {}
    alerts = Counter()
    for login in sorted(logins, key=lambda e: e["event_time"]):
        if login["outcome"] != "failure":
            continue
        t = login["event_time"]
        failures = seen.setdefault(login["user"], [])
        failures.append(t)
        inside = [f for f in failures if t - f < WINDOW]
        if len(inside) == n:
            alerts[(login["user"], t, min(inside))] += 1
    return alerts


@SETTINGS
@given(data=st.data(), logins=logins_st, n=st.integers(1, 4))
def test_alerts_equal_the_loop_for_any_split(data, logins, n):
    split = [b.cast(LOGINS) for b in batches(logins, data.draw(cuts(len(logins))), INPUT)]
    run = run_local(FailedLoginAlerts(failures=n), split)
    alerts = run.output("alerts")
    got = Counter(
        zip(
            alerts.column("user").to_pylist(),
            alerts.column("alert_time").cast(pa.int64()).to_pylist(),
            alerts.column("first_failure").cast(pa.int64()).to_pylist(),
            strict=True,
        )
    )
    assert got == reference(logins, n)
    assert run.output("late").num_rows == 0
    # the state holds every failure that can still count for an on-time login, and a user
    # stays only while its newest failure can (its timer has not passed)
    stored = list(
        zip(
            run.state.column("user").to_pylist(),
            run.state.column("failed_at").cast(pa.int64()).to_pylist(),
            strict=True,
        )
    )
    horizon = (run.watermark or 0) - WINDOW
    needed = {
        (e["user"], e["event_time"])
        for e in logins
        if e["outcome"] == "failure" and e["event_time"] > horizon
    }
    assert needed <= set(stored)
    assert all(max(t for v, t in stored if v == u) >= horizon for u, _ in stored)


def test_the_sample_alerts_once():
    run = run_local(FailedLoginAlerts(failures=3), SAMPLE)
    assert run.output("alerts").column("user").to_pylist() == ["ann"]
    assert run.counters == {"failures": 4, "alerts": 1}
