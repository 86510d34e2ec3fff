"""Identity with revisions (`--anonymous-field` with `--revise-within`; docs/design.md,
"Revisions" and "Identity"), the first step alone (keyed by anonymous id), batch after
batch through the keyed core's `step`: the current sessions (`sessions`, then each batch's
`session_revisions`) carry the user a plain loop gives each session of every event known
so far, cut again per anonymous id (the fold of the id's events up to and including the
session), the `identities` change log follows every known event, and an identity row
holds only the events that have left the state; for late events with a user id (a late
login) and without."""

from __future__ import annotations

import datetime as dt
import random

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from sessionize import schema
from sessionize.config import SessionRules
from sessionize.core.declared import declared
from sessionize.core.step import step
from sessionize.logic.identity_step import split_state
from sessionize.logic.processor import SessionProcessor
from sessionize.mapping import EventMapping

from .test_identity import GAP, T0, as_dict, cut, reference, visits

LAYOUT = schema.layout(EventMapping(anonymous="anonymous_id", user_type="string"))
FAR = 2**62
WINDOW = 4 * 3600  # seconds: more than any lateness below


def rules(window: int = WINDOW, ttl: int | None = None) -> SessionRules:
    return SessionRules(
        gap_us=GAP * 1_000_000,
        lateness_us=0,
        close_actions=(),
        revise_within_us=window * 1_000_000,
        user_ttl_us=None if ttl is None else ttl * 1_000_000,
    )


def us(seconds: int) -> int:
    return int((T0 + dt.timedelta(seconds=seconds)).timestamp()) * 1_000_000


def seconds(t: dt.datetime) -> int:
    return round((t - T0).total_seconds())


def events_table(events: list[dict]) -> pa.Table:
    rows = [
        {
            "user_id": e["anonymous_id"],
            "event_time": T0 + dt.timedelta(seconds=e["t"]),
            "page": e["page"],
            "action": "view",
            "sent_user_id": e["user_id"],
        }
        for e in events
    ]
    return pa.Table.from_pylist(rows, schema=LAYOUT.event)


def stream(batches: list[list[dict]], r: SessionRules) -> list[dict]:
    """Each batch through `step` (the watermark after it: the latest event time so far),
    then one that closes everything; per batch its outputs and the store after it."""
    processor = SessionProcessor(r, LAYOUT, numbered=False)
    store = declared(processor).rows.empty()
    before = None
    latest = None
    out = []
    for batch_id, batch in enumerate([*batches, []]):
        latest = max([latest or 0, *(us(e["t"]) for e in batch)])
        after = FAR if batch_id == len(batches) else latest
        got = step(
            processor,
            store,
            events_table(batch),
            batch_id=batch_id,
            partition=0,
            watermark_before=before,
            watermark_after=after,
        )
        gone = pa.concat_arrays([got.removes, got.puts.column("user_key").combine_chunks()])
        store = pa.concat_tables(
            [store.filter(pc.invert(pc.is_in(store["user_key"], value_set=gone))), got.puts]
        )
        out.append({"outputs": got.outputs, "store": store, "before": before, "after": after})
        before = after
    return out


FIELDS = ("anonymous_id", "start", "end", "event_count", "user_id", "stitched_user_id")


def as_tuple(row: dict) -> tuple:
    return (
        row["anonymous_id"],
        seconds(row["start_time"]),
        seconds(row["end_time"]),
        row["event_count"],
        row["user_id"],
        row["stitched_user_id"],
    )


def fold(now: dict[str, tuple], outputs: dict) -> list[dict]:
    """The current sessions `now` (by id) after one batch's outputs, as the docs' query
    folds them; returns the batch's revision rows. A revision must change something."""
    for row in outputs["sessions"].to_pylist():
        assert row["session_id"] not in now, "a first write of a current id"
        now[row["session_id"]] = as_tuple(row)
    revisions = outputs["session_revisions"].to_pylist()
    for row in revisions:
        if row["retracted"]:
            del now[row["session_id"]]
        else:
            assert now.get(row["session_id"]) != as_tuple(row), "a revision that changes nothing"
            now[row["session_id"]] = as_tuple(row)
    return revisions


def expected(known: list[dict], watermark: int, ttl: int | None) -> dict[str, tuple]:
    """The plain loop: every known event cut again per anonymous id, the sessions whose
    close (last event + gap) the watermark has passed, each with the user the fold of its
    id's events up to and including it gives."""
    out = {}
    sessions = cut(known)
    for i, s in enumerate(sessions):
        anon, first, last = s[0]["anonymous_id"], s[0]["t"], s[-1]["t"]
        if not us(last + GAP) < watermark:
            continue
        so_far = [e for t in sessions[: i + 1] if t[0]["anonymous_id"] == anon for e in t]
        user = reference(so_far, ttl)[anon]["user_id"]
        sid = f"{anon.replace('-', '%2D')}-{us(first) // 1000}"
        out[sid] = (anon, first, last, len(s), user, user or anon)
    return out


def left_state(known: list[dict], watermark: int, window: int) -> list[dict]:
    """The known events of the sessions a window has dropped (release + window passed)."""
    return [e for s in cut(known) if us(s[-1]["t"] + GAP + window) < watermark for e in s]


def arrivals(seed: int, delay: int) -> list[list[dict]]:
    """The visits' events in time order, a third of them delayed up to `delay` seconds
    (some carry a user id: late logins), cut into batches of about ten."""
    rnd = random.Random(seed)
    events = sorted(visits(seed), key=lambda e: e["t"])
    events = [{**e, "page": f"p{i}"} for i, e in enumerate(events)]  # no duplicates
    arrive = [e["t"] + (rnd.randrange(delay) if rnd.random() < 0.5 else 0) for e in events]
    ordered = [e for _, e in sorted(zip(arrive, events, strict=True), key=lambda p: p[0])]
    batches, at = [], 0
    while at < len(ordered):
        size = rnd.randrange(3, 15)
        batches.append(ordered[at : at + size])
        at += size
    return batches


CASES = [(seed, None) for seed in range(4)] + [(4, 2 * GAP), (5, 3 * GAP)]


@pytest.mark.parametrize(("seed", "ttl"), CASES)
def test_sessions_users_and_identities_equal_a_loop_over_every_known_event(seed, ttl):
    batches = arrivals(seed, delay=3 * 3600)
    behind = {True: 0, False: 0}  # late events with a user id (late logins) and without
    run = stream(batches, rules(ttl=ttl))
    known: list[dict] = []
    now: dict[str, tuple] = {}
    changes: dict[str, dict] = {}
    for batch, got in zip([*batches, []], run, strict=True):
        before, after = got["before"], got["after"]
        late = [e for e in batch if before is not None and us(e["t"]) < before - WINDOW * 10**6]
        assert late == [] and got["outputs"]["late_events"].num_rows == 0
        for e in batch:
            if before is not None and us(e["t"]) < before:
                behind[e["user_id"] is not None] += 1
        known += batch
        revisions = fold(now, got["outputs"])
        assert now == expected(known, after, ttl)
        for row in revisions:  # a retraction names the user it was last written with
            assert row["stitched_user_id"] is not None
        for r in got["outputs"]["identities"].to_pylist():
            changes[r["anonymous_id"]] = {
                "user_id": r["user_id"],
                "first": seconds(r["first_seen"]),
                "last": seconds(r["last_seen"]),
            }
        if ttl is None:  # with a TTL, `identities` is the latest span's (test_identity)
            assert changes == reference(known)
            rows, stored = split_state(got["store"])
            left = left_state(known, after, WINDOW)
            assert as_dict(stored) == reference(left)
            # the kept events are state rows, not in the identity row
            assert rows.num_rows == len(known) - len(left)
    assert behind[True] and behind[False], "late events with and without a user id"


def test_a_late_login_revises_the_later_sessions_it_names_and_a_merge_retracts_with_its_user():
    """Two sessions of one device, emitted anonymous; a late event carrying a user id in
    the first revises both (the second's events did not change, its user did); a late
    event between them then merges them, the second retracted under the user it had."""
    a = "anon-x"
    first = [
        {"anonymous_id": a, "t": 0, "user_id": None, "page": "p0"},
        {"anonymous_id": a, "t": 3 * GAP, "user_id": None, "page": "p1"},
        {"anonymous_id": "anon-y", "t": 6 * GAP, "user_id": None, "page": "p2"},
    ]
    login = [{"anonymous_id": a, "t": 60, "user_id": "u1", "page": "p3"}]
    bridge = [{"anonymous_id": a, "t": 60 + GAP, "user_id": None, "page": "p4"},
              {"anonymous_id": a, "t": 2 * GAP + 60, "user_id": None, "page": "p5"}]  # fmt: skip
    run = stream([first, login, bridge], rules())
    out = [r["outputs"] for r in run]
    assert [r["user_id"] for r in out[0]["sessions"].to_pylist()] == [None, None]
    written = {r["session_id"]: r for r in out[1]["session_revisions"].to_pylist()}
    assert {(r["event_count"], r["user_id"], r["revision"]) for r in written.values()} == {
        (2, "u1", 1),
        (1, "u1", 1),
    }
    merged = out[2]["session_revisions"].to_pylist()
    gone = [r for r in merged if r["retracted"]]
    assert [(r["user_id"], r["stitched_user_id"], r["revision"]) for r in gone] == [("u1", "u1", 2)]
    assert [(r["event_count"], r["user_id"]) for r in merged if not r["retracted"]] == [(5, "u1")]
