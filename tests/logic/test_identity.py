"""Identity stitching (`logic/identity.py`) against a plain loop over events in time order,
on visitors who log in mid-visit, use two devices, log out and share a device."""

from __future__ import annotations

import datetime as dt
import random

import numpy as np
import pyarrow as pa
import pytest

from sessionize.base_schema import TS
from sessionize.logic.identity import changed, identity_schema, merge, session_users

T0 = dt.datetime(2024, 3, 1, tzinfo=dt.UTC)
GAP = 1800  # seconds between a test session's events, at most


def visits(seed: int) -> list[dict]:
    """Events of people on one or two devices (anonymous ids): anonymous until they log in
    mid-visit, logged out for some later visits, some devices shared by two people. Times
    are whole seconds, so events of one device often share one (ties)."""
    rnd = random.Random(seed)
    events = []
    devices = [f"anon-{seed}-{d}" for d in range(8)]
    for person in range(6):
        user = f"user-{person}"
        mine = rnd.sample(devices, rnd.choice([1, 2]))  # a device may be another's too
        at = rnd.randrange(0, 3 * 3600)
        for _ in range(rnd.randrange(1, 5)):
            device = rnd.choice(mine)
            logged_in = False
            for _ in range(rnd.randrange(1, 8)):
                at += rnd.choice([0, 0, 1, 60, 600, 3 * GAP])
                if not logged_in and rnd.random() < 0.3:
                    logged_in = True  # login mid-visit
                elif logged_in and rnd.random() < 0.1:
                    logged_in = False  # logout
                events.append(
                    {"anonymous_id": device, "t": at, "user_id": user if logged_in else None}
                )
    return events


def table_of(events: list[dict]) -> pa.Table:
    return pa.table(
        {
            "anonymous_id": pa.array([e["anonymous_id"] for e in events], pa.string()),
            "event_time": pa.array([T0 + dt.timedelta(seconds=e["t"]) for e in events], TS),
            "user_id": pa.array([e["user_id"] for e in events], pa.string()),
        }
    )


def reference(events: list[dict], ttl: int | None = None) -> dict[str, dict]:
    """The identities, one event at a time in (time, user id) order; with a `ttl`
    (seconds) an event longer than that after its anonymous id's previous one starts it
    afresh (the identity expired in between)."""
    out: dict[str, dict] = {}
    for e in sorted(events, key=lambda e: (e["t"], e["user_id"] or "")):
        old = out.get(e["anonymous_id"])
        if old is not None and ttl is not None and e["t"] - old["last"] > ttl:
            del out[e["anonymous_id"]]
        row = out.setdefault(e["anonymous_id"], {"user_id": None, "first": e["t"], "last": e["t"]})
        row["first"], row["last"] = min(row["first"], e["t"]), max(row["last"], e["t"])
        if e["user_id"] is not None:
            row["user_id"] = e["user_id"]
    return out


def as_dict(identities: pa.Table) -> dict[str, dict]:
    def seconds(t: dt.datetime) -> int:
        return round((t - T0).total_seconds())

    return {
        r["anonymous_id"]: {
            "user_id": r["user_id"],
            "first": seconds(r["first_seen"]),
            "last": seconds(r["last_seen"]),
        }
        for r in identities.to_pylist()
    }


def empty() -> pa.Table:
    return identity_schema().empty_table()


def cut(events: list[dict]) -> list[list[dict]]:
    """Sessions per anonymous id, in order: a new one after a gap longer than GAP."""
    ordered = sorted(events, key=lambda e: (e["anonymous_id"], e["t"], e["user_id"] or ""))
    sessions: list[list[dict]] = []
    for e in ordered:
        last = sessions[-1][-1] if sessions else None
        same = last and last["anonymous_id"] == e["anonymous_id"] and e["t"] - last["t"] <= GAP
        if same:
            sessions[-1].append(e)
        else:
            sessions.append([e])
    return sessions


def users_of(
    stored: pa.Table, sessions: list[list[dict]], ttl: int | None = None
) -> list[str | None]:
    """`session_users` over `sessions` given as the events of their runs."""
    flat = [e for s in sessions for e in s]
    lengths = np.array([len(s) for s in sessions], np.int64)
    ends = np.cumsum(lengths)
    t = table_of(flat)
    return session_users(
        stored,
        t.column("anonymous_id"),
        t.column("event_time"),
        t.column("user_id"),
        ends - lengths,
        ends,
        None if ttl is None else ttl * 1_000_000,
    ).to_pylist()


@pytest.mark.parametrize("seed", range(6))
def test_identities_match_a_loop_over_events_in_time_order(seed):
    events = visits(seed)
    assert as_dict(merge(empty(), table_of(events))) == reference(events)


@pytest.mark.parametrize("seed", range(6))
def test_identities_depend_neither_on_batches_nor_on_arrival_order(seed):
    """Events shuffled and folded batch after batch give what the loop gives."""
    events = visits(seed)
    rnd = random.Random(seed)
    shuffled = rnd.sample(events, len(events))
    cuts = sorted(rnd.sample(range(1, len(events)), min(4, len(events) - 1)))
    stored = empty()
    for lo, hi in zip([0, *cuts], [*cuts, len(events)], strict=True):
        stored = merge(stored, table_of(shuffled[lo:hi]))
    assert as_dict(stored) == reference(events)


def test_a_shared_device_maps_to_the_later_user_from_then_on_and_ties_go_by_value():
    device = [
        {"anonymous_id": "d", "t": 10, "user_id": "bob"},
        {"anonymous_id": "d", "t": 20, "user_id": None},  # bob logged out
        {"anonymous_id": "d", "t": 30, "user_id": "alice"},  # alice logs in on it
        {"anonymous_id": "d", "t": 5, "user_id": "zed"},  # arrives last, seen first
    ]
    assert merge(empty(), table_of(device)).column("user_id").to_pylist() == ["alice"]
    tie = [
        {"anonymous_id": "d", "t": 30, "user_id": "bob"},
        {"anonymous_id": "d", "t": 30, "user_id": "alice"},
    ]
    for order in (tie, tie[::-1]):
        # the stored identity too: alice at the same time never replaces bob
        assert merge(merge(empty(), table_of(order[:1])), table_of(order[1:])).column(
            "user_id"
        ).to_pylist() == ["bob"]


@pytest.mark.parametrize("seed", range(6))
def test_each_session_carries_the_user_known_when_it_is_emitted(seed):
    """A session's user: the last one of its anonymous id's events up to its end (the
    loop), whether its earlier sessions were emitted in earlier batches or in this one."""
    sessions = cut(visits(seed))
    expected = []
    for i, s in enumerate(sessions):
        so_far = [
            e for t in sessions[: i + 1] if t[0]["anonymous_id"] == s[0]["anonymous_id"] for e in t
        ]
        expected.append(reference(so_far)[s[0]["anonymous_id"]]["user_id"])
    assert users_of(empty(), sessions) == expected
    # the first session of each anonymous id emitted in an earlier batch, the rest now
    firsts = {s[0]["anonymous_id"]: i for i, s in reversed(list(enumerate(sessions)))}
    earlier = [s for i, s in enumerate(sessions) if firsts[s[0]["anonymous_id"]] == i]
    later = [i for i, s in enumerate(sessions) if firsts[s[0]["anonymous_id"]] != i]
    stored = merge(empty(), table_of([e for s in earlier for e in s]))
    assert users_of(stored, [sessions[i] for i in later]) == [expected[i] for i in later]


@pytest.mark.parametrize("seed", range(3))
def test_a_batch_writes_the_identities_it_changed(seed):
    events = sorted(visits(seed), key=lambda e: e["t"])
    half = len(events) // 2
    before = merge(empty(), table_of(events[:half]))
    after = merge(before, table_of(events[half:]))
    old, new = reference(events[:half]), reference(events)
    expected = {a: row for a, row in new.items() if old.get(a) != row}
    assert as_dict(changed(before, after)) == expected


TTL = 2 * GAP  # seconds: visits() leaves 3 * GAP between some visits of a device


@pytest.mark.parametrize("seed", range(6))
def test_with_a_ttl_a_returning_visitor_starts_fresh_in_any_batches(seed):
    """`--user-ttl`: events longer than the TTL after their device's previous one start it
    afresh (first seen then, no user until a login), whether the events come in one batch
    or in several in time order (on-time events never precede the stored identity)."""
    events = sorted(visits(seed), key=lambda e: (e["t"], e["user_id"] or ""))
    want = reference(events, TTL)
    assert want != reference(events)  # the data has returns after the TTL
    ttl_us = TTL * 1_000_000
    assert as_dict(merge(empty(), table_of(events), ttl_us)) == want
    stored = empty()
    n = len(events)
    for lo, hi in zip([0, n // 3, n // 2], [n // 3, n // 2, n], strict=True):
        stored = merge(stored, table_of(events[lo:hi]), ttl_us)
    assert as_dict(stored) == want


@pytest.mark.parametrize("seed", range(6))
def test_with_a_ttl_a_session_after_the_ttl_knows_no_user_from_before(seed):
    sessions = cut(visits(seed))
    expected = []
    for i, s in enumerate(sessions):
        anon = s[0]["anonymous_id"]
        so_far = [e for t in sessions[: i + 1] if t[0]["anonymous_id"] == anon for e in t]
        expected.append(reference(so_far, TTL)[anon]["user_id"])
    assert users_of(empty(), sessions, TTL) == expected
    firsts = {s[0]["anonymous_id"]: i for i, s in reversed(list(enumerate(sessions)))}
    earlier = [s for i, s in enumerate(sessions) if firsts[s[0]["anonymous_id"]] == i]
    later = [i for i, s in enumerate(sessions) if firsts[s[0]["anonymous_id"]] != i]
    stored = merge(empty(), table_of([e for s in earlier for e in s]), TTL * 1_000_000)
    assert users_of(stored, [sessions[i] for i in later], TTL) == [expected[i] for i in later]


def test_a_visitor_back_after_the_ttl_is_anonymous_until_a_new_login():
    device = [
        {"anonymous_id": "d", "t": 0, "user_id": "ann"},
        {"anonymous_id": "d", "t": 60, "user_id": None},
        {"anonymous_id": "d", "t": 60 + TTL + 1, "user_id": None},  # back after the TTL
        {"anonymous_id": "d", "t": 60 + TTL + 2 * GAP, "user_id": None},  # within it
    ]
    sessions = cut(device)
    assert users_of(empty(), sessions, TTL) == ["ann", None, None]
    assert users_of(empty(), sessions) == ["ann", "ann", "ann"]
    assert reference(device, TTL) == {
        "d": {"user_id": None, "first": 61 + TTL, "last": 60 + TTL + 2 * GAP}
    }
