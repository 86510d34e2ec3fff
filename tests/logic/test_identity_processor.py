"""Identity in the session processor, batch after batch through the keyed core's `step`:
sessions per anonymous id carry the user known when they are emitted, every anonymous id
keeps its identity row after its sessions close, and any split into batches gives what one
batch gives; all against a plain loop over the events in time order (test_identity.py)."""

from __future__ import annotations

import dataclasses
import datetime as dt

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from sessionize import schema
from sessionize.config import SessionRules
from sessionize.core.declared import NEVER_US, declared
from sessionize.core.step import step
from sessionize.errors import ConfigError
from sessionize.logic.processor import SessionProcessor
from sessionize.mapping import EventMapping

from .test_identity import GAP, T0, TTL, cut, reference, visits

RULES = SessionRules(gap_us=GAP * 1_000_000, lateness_us=0, close_actions=())
LAYOUT = schema.layout(
    EventMapping(anonymous="anonymous_id", user_type="string", session_columns=3)
)
FAR = 2**62


def us(seconds: int) -> int:
    return int((T0 + dt.timedelta(seconds=seconds)).timestamp()) * 1_000_000


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


def run(
    events: list[dict],
    cuts: list[int],
    open_sessions: bool = False,
    rules: SessionRules = RULES,
    current: bool = False,
) -> dict:
    """The events in time order, cut into batches at `cuts`, then a batch that closes all.
    `current`: `identities` kept current, applied batch after batch to out["table"] (and
    its state before the closing batch in out["table_before_last"])."""
    processor = SessionProcessor(RULES if rules is None else rules, LAYOUT, open_sessions, current)
    store = declared(processor).rows.empty()
    out: dict[str, list] = {"sessions": [], "page_views": [], "open_sessions": [], "identities": []}
    table: dict = {}
    bounds = [0, *cuts, len(events)]
    before = None
    for batch_id, (lo, hi) in enumerate([*zip(bounds, bounds[1:], strict=False), (0, 0)]):
        batch = events[lo:hi]
        latest = max((us(e["t"]) for e in events[:hi]), default=None)
        after = FAR if (lo, hi) == (0, 0) else latest
        got = step(
            processor,
            store,
            events_table(batch),
            batch_id=batch_id,
            partition=0,
            watermark_before=before,
            watermark_after=after,
        )
        assert got.outputs["late_events"].num_rows == 0
        for name in out:
            if name in got.outputs:
                out[name] += [{**r, "batch": batch_id} for r in got.outputs[name].to_pylist()]
        if current:
            out["table_before_last"] = dict(table)
            for key in got.deletes["identities"].column("anonymous_id").to_pylist():
                table.pop(key, None)
            for r in got.outputs["identities"].to_pylist():
                table[r["anonymous_id"]] = {
                    "user_id": r["user_id"],
                    "first": round((r["first_seen"] - T0).total_seconds()),
                    "last": round((r["last_seen"] - T0).total_seconds()),
                }
        gone = pa.concat_arrays([got.removes, got.puts.column("user_key").combine_chunks()])
        store = pa.concat_tables(
            [store.filter(pc.invert(pc.is_in(store["user_key"], value_set=gone))), got.puts]
        )
        before = after
    out["store"] = store
    out["table"] = table
    return out


def in_time_order(seed: int) -> list[dict]:
    events = sorted(visits(seed), key=lambda e: e["t"])
    return [{**e, "page": f"p{i}"} for i, e in enumerate(events)]  # no duplicates


def expected_sessions(events: list[dict], ttl: int | None = None) -> list[tuple]:
    """(anonymous id, start, user id, stitched user id) of every session, by the loop."""
    sessions = cut(events)
    out = []
    for i, s in enumerate(sessions):
        anon = s[0]["anonymous_id"]
        so_far = [e for t in sessions[: i + 1] if t[0]["anonymous_id"] == anon for e in t]
        user = reference(so_far, ttl)[anon]["user_id"]
        out.append((anon, min(e["t"] for e in s), user, user or anon))
    return sorted(out, key=str)


def got_sessions(rows: list[dict]) -> list[tuple]:
    out = [
        (
            r["anonymous_id"],
            round((r["start_time"] - T0).total_seconds()),
            r["user_id"],
            r["stitched_user_id"],
        )
        for r in rows
    ]
    return sorted(out, key=str)


@pytest.mark.parametrize("seed", range(4))
def test_sessions_carry_the_user_known_when_emitted_in_any_batches(seed):
    events = in_time_order(seed)
    want = expected_sessions(events)
    whole = run(events, [])
    assert got_sessions(whole["sessions"]) == want
    n = len(events)
    streamed = run(events, [n // 5, n // 3, n // 2, 2 * n // 3, 4 * n // 5])
    assert got_sessions(streamed["sessions"]) == want
    assert all("anonymous_id" in r for r in streamed["page_views"])


@pytest.mark.parametrize("seed", range(4))
def test_every_anonymous_id_keeps_its_identity_after_its_sessions_close(seed):
    events = in_time_order(seed)
    n = len(events)
    store = run(events, [n // 4, n // 2, 3 * n // 4])["store"]
    # every session closed: the store holds one identity row per anonymous id, no timer
    assert store.num_rows == store.group_by("user_id").aggregate([]).num_rows
    kept = {
        r["user_id"]: {
            "user_id": r["sent_user_id"],
            "first": round((r["identity_first_seen"] - T0).total_seconds()),
            "last": round((r["event_time"] - T0).total_seconds()),
        }
        for r in store.to_pylist()
    }
    assert kept == reference(events)
    assert set(store.column("expires_at").cast(pa.int64()).to_pylist()) == {NEVER_US}


def test_open_sessions_carry_the_user_known_now():
    events = [
        {"anonymous_id": "a", "t": 0, "user_id": None, "page": "p0"},
        {"anonymous_id": "a", "t": 60, "user_id": "ann", "page": "p1"},  # login mid-visit
        {"anonymous_id": "b", "t": 60, "user_id": None, "page": "p2"},
    ]
    out = run(events, [1], open_sessions=True)
    first = {
        r["anonymous_id"]: (r["user_id"], r["stitched_user_id"])
        for r in out["open_sessions"]
        if r["updated_batch"] == 0
    }
    assert first == {"a": (None, "a")}  # batch 0: the login is not there yet
    second = {
        r["anonymous_id"]: (r["user_id"], r["stitched_user_id"])
        for r in out["open_sessions"]
        if r["updated_batch"] == 1
    }
    assert second == {"a": ("ann", "ann"), "b": (None, "b")}


@pytest.mark.parametrize("seed", range(3))
def test_each_batch_writes_the_identities_it_changed(seed):
    """A batch's `identities` rows: the anonymous ids whose user, first or last seen (over
    every event so far, open sessions included) differ from the batch before's."""
    events = in_time_order(seed)
    n = len(events)
    cuts = [n // 4, n // 2, 3 * n // 4]
    rows = run(events, cuts)["identities"]
    bounds = [0, *cuts, n]
    for batch_id, hi in enumerate(bounds[1:]):
        old, new = reference(events[: bounds[batch_id]]), reference(events[:hi])
        want = {a: row for a, row in new.items() if old.get(a) != row}
        got = {
            r["anonymous_id"]: {
                "user_id": r["user_id"],
                "first": round((r["first_seen"] - T0).total_seconds()),
                "last": round((r["last_seen"] - T0).total_seconds()),
            }
            for r in rows
            if r["batch"] == batch_id
        }
        assert got == want, batch_id
    assert not [r for r in rows if r["batch"] == len(cuts) + 1]  # closing changes nobody


def test_identity_columns_are_reserved_only_with_identity():
    keep = (("stitched_user_id", "x"),)
    EventMapping(keep=keep)  # without --anonymous-field the name is free
    with pytest.raises(ConfigError, match="stitched_user_id"):
        EventMapping(keep=keep, anonymous="anonymous_id", user_type="string")


def test_a_checkpoint_refuses_a_change_of_the_anonymous_field(tmp_path):
    """Recorded with the mapping's other fields: set on a checkpoint made without it (whose
    record lacks the field: as before it existed) or changed, a restart is refused."""
    from sessionize.engines.checkpoint import check_or_record
    from sessionize.engines.sessions import state_settings
    from sessionize.errors import IncompatibleCheckpoint

    def settings(mapping: EventMapping) -> dict:
        return {**state_settings(RULES, 2, mapping), "output": str(tmp_path / "out")}

    plain = settings(EventMapping(user_type="string"))
    del plain["anonymous_field"]  # a checkpoint recorded before the option existed
    check_or_record(str(tmp_path / "chk"), plain)
    stitched = EventMapping(user_type="string", anonymous="anonymous_id")
    with pytest.raises(IncompatibleCheckpoint, match="--anonymous-field .*this run: anonymous_id"):
        check_or_record(str(tmp_path / "chk"), settings(stitched))
    check_or_record(str(tmp_path / "chk2"), settings(stitched))
    other = EventMapping(user_type="string", anonymous="device_id")
    with pytest.raises(IncompatibleCheckpoint, match="--anonymous-field anonymous_id"):
        check_or_record(str(tmp_path / "chk2"), settings(other))


def test_a_late_event_keeps_its_anonymous_id_and_its_own_user_id():
    late = {"anonymous_id": "d", "t": 0, "user_id": "ann", "page": "p0"}
    got = step(
        SessionProcessor(RULES, LAYOUT),
        None,
        events_table([late]),
        batch_id=0,
        partition=0,
        watermark_before=us(60),
        watermark_after=us(60),
    )
    rows = got.outputs["late_events"].to_pylist()
    assert [(r["anonymous_id"], r["user_id"]) for r in rows] == [("d", "ann")]
    assert got.outputs["late_events"].schema == LAYOUT.late_events


TTL_RULES = dataclasses.replace(RULES, user_ttl_us=TTL * 1_000_000)


@pytest.mark.parametrize("seed", range(4))
def test_with_a_ttl_identities_expire_by_the_watermark_in_any_batches(seed):
    """`--user-ttl`: sessions after the TTL start afresh, each batch writes the identities
    it changed, the kept-current table drops an identity once the watermark passes its
    `last_seen + TTL` and the store forgets it, in one batch or several (the loop of
    test_identity.py with its TTL rule)."""
    events = in_time_order(seed)
    n = len(events)
    cuts = [n // 5, n // 3, n // 2, 2 * n // 3, 4 * n // 5]
    for batches in ([], cuts):
        out = run(events, batches, rules=TTL_RULES)  # identities: the change log
        assert got_sessions(out["sessions"]) == expected_sessions(events, TTL)
        bounds = [0, *batches, n]
        for batch_id, hi in enumerate(bounds[1:]):
            old, new = reference(events[: bounds[batch_id]], TTL), reference(events[:hi], TTL)
            want = {a: row for a, row in new.items() if old.get(a) != row}
            got = {
                r["anonymous_id"]: (r["user_id"], round((r["last_seen"] - T0).total_seconds()))
                for r in out["identities"]
                if r["batch"] == batch_id
            }
            assert got == {a: (w["user_id"], w["last"]) for a, w in want.items()}, batch_id
        out = run(events, batches, rules=TTL_RULES, current=True)
        # before the closing batch: the identities whose last_seen + TTL the watermark
        # (the latest event, no lateness) has not passed; after it, none is left
        latest = max(e["t"] for e in events)
        live = {a: r for a, r in reference(events, TTL).items() if r["last"] + TTL >= latest}
        assert out["table_before_last"] == live
        assert len(live) < len(reference(events, TTL))  # some expired on the way
        assert out["table"] == {} and out["store"].num_rows == 0


def test_a_checkpoint_refuses_a_change_of_the_user_ttl_and_an_older_one_keeps_none(tmp_path):
    """The TTL is recorded with the rules: another one on restart is refused; a record
    from before the option reads as no TTL; without --anonymous-field it is recorded
    unset, and given there it is refused as matching nothing."""
    from sessionize.api.sessionizer import Sessionizer
    from sessionize.engines.checkpoint import check_or_record, read_settings
    from sessionize.engines.sessions import state_settings
    from sessionize.errors import IncompatibleCheckpoint

    stitched = EventMapping(user_type="string", anonymous="anonymous_id")

    def settings(rules: SessionRules) -> dict:
        return {**state_settings(rules, 2, stitched), "output": str(tmp_path / "out")}

    check_or_record(str(tmp_path / "chk"), settings(TTL_RULES))
    longer = dataclasses.replace(RULES, user_ttl_us=10 * TTL * 1_000_000)
    with pytest.raises(IncompatibleCheckpoint, match="--user-ttl 1h .*this run: 10h"):
        check_or_record(str(tmp_path / "chk"), settings(longer))
    older = settings(RULES)
    del older["user_ttl"]  # recorded before the option existed
    check_or_record(str(tmp_path / "old"), older)
    assert SessionRules.from_record(read_settings(str(tmp_path / "old"))).user_ttl_us is None
    plain = state_settings(TTL_RULES, 2, EventMapping(user_type="string"))
    assert plain["user_ttl"] == ""
    with pytest.raises(ConfigError, match="--user-ttl applies to identities"):
        Sessionizer(user_ttl="30d").resolved({})
    assert Sessionizer(user_ttl="30d", anonymous_field="a", user_type="string").resolved({})
    default = Sessionizer(anonymous_field="a", user_type="string").rules.user_ttl_us
    assert default == 400 * 86_400 * 1_000_000
    with pytest.raises(ConfigError, match="--user-ttl must be at least --gap"):
        Sessionizer(user_ttl="1m", gap="10m")


def test_the_attribution_lookback_is_recorded_refused_on_change_and_where_it_matches_nothing(
    tmp_path,
):
    """`--attribution-lookback` is recorded with the rules and reaches the users step;
    another one on restart is refused; a record from before the option reads as the 90
    days then fixed; without --anonymous-field, or with sessions of schema 1 (no traffic
    to attribute), giving it is refused as matching nothing."""
    from sessionize.api.sessionizer import Sessionizer
    from sessionize.engines.checkpoint import check_or_record, read_settings
    from sessionize.engines.sessions import state_settings
    from sessionize.errors import IncompatibleCheckpoint

    stitched = EventMapping(user_type="string", anonymous="anonymous_id", session_columns=3)
    two_days = dataclasses.replace(RULES, attribution_lookback_us=2 * 86_400_000_000)

    def settings(rules: SessionRules) -> dict:
        return {**state_settings(rules, 2, stitched), "output": str(tmp_path / "out")}

    check_or_record(str(tmp_path / "chk"), settings(two_days))
    assert read_settings(str(tmp_path / "chk"))["attribution_lookback"] == "2d"
    with pytest.raises(IncompatibleCheckpoint, match=r"--attribution-lookback 2d \(this run: 90d"):
        check_or_record(str(tmp_path / "chk"), settings(RULES))
    older = settings(RULES)
    del older["attribution_lookback"]  # recorded before the option existed
    check_or_record(str(tmp_path / "old"), older)
    recorded = SessionRules.from_record(read_settings(str(tmp_path / "old")))
    assert recorded.attribution_lookback_us == 90 * 86_400_000_000
    users = SessionProcessor(two_days, schema.layout(stitched)).follow_on
    assert users is not None and users.processor.rules.lookback_us == 2 * 86_400_000_000

    given = Sessionizer(attribution_lookback="2d", anonymous_field="a", user_type="string")
    assert given.resolved({})[0].rules.attribution_lookback_us == 2 * 86_400_000_000
    with pytest.raises(ConfigError, match="--attribution-lookback applies to the users step"):
        Sessionizer(attribution_lookback="2d").resolved({})
    with pytest.raises(ConfigError, match="--attribution-lookback needs the sessions' traffic"):
        given.resolved({"session_columns": "1"})
    with pytest.raises(ConfigError, match="--attribution-lookback must be positive"):
        Sessionizer(attribution_lookback="0s")


def test_a_users_state_written_with_other_columns_is_refused_in_one_line(tmp_path):
    """A users step whose stored rows lack the columns this run keeps (written before
    `users` summed conversions) cannot be read: the start is refused, naming them, not
    failed in a task. A job started over (no version of the step) is not refused."""
    from sessionize.content import parse_conversion
    from sessionize.engines.checkpoint import check_follow_on_rows
    from sessionize.engines.sessions import SessionSettings
    from sessionize.errors import IncompatibleCheckpoint
    from sessionize.state import open_backend

    mapping = dataclasses.replace(
        EventMapping(anonymous="anonymous_id", user_type="string", session_columns=3),
        content=dataclasses.replace(
            EventMapping().content, conversions=(parse_conversion("purchase=order"),)
        ),
    )
    backend = open_backend(f"files:{tmp_path / 'state'}")
    settings = SessionSettings.of(
        RULES, 2, backend.uri, "job", str(tmp_path / "out"), mapping=mapping
    )
    then = settings.follow_on()
    assert then is not None
    check_follow_on_rows(backend, then)  # nothing stored yet
    entry = then.record()
    columns = str(entry["state_schema"]).split(", ")
    older = [c for c in columns if not c.startswith("purchase_")]
    backend.write_job_settings(then.job, {**entry, "state_schema": ", ".join(older)})
    check_follow_on_rows(backend, then)  # no version: started over
    backend.write_job_record(then.job, 0, {"version": 0, "watermark": None})
    with pytest.raises(IncompatibleCheckpoint, match=r"this run adds purchase_count int64, "
                       r"purchase_value double\): start the job over"):  # fmt: skip
        check_follow_on_rows(backend, then)
    backend.write_job_settings(then.job, entry)
    check_follow_on_rows(backend, then)  # the same columns
