"""State tools on a hand-made state, without Spark: copies between every pair of backends,
inspect and export against hand-computed values, refusal while a driver holds the job, and a
migrate killed at two points then rerun."""

from __future__ import annotations

import itertools
import json

import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from sessionize.commands.statetools.contents import content_hash, read_partition
from sessionize.commands.statetools.copy import copy_state, verify
from sessionize.commands.statetools.inspect import export_sessions, summarize, user_sessions
from sessionize.commands.statetools.job import locate, rules_of
from sessionize.engines.checkpoint import check_or_record, checkpoint_lease
from sessionize.errors import IncompatibleCheckpoint, StateError
from sessionize.schema import SESSIONS
from sessionize.state import open_backend
from tests.commands import state_fixture as fx
from tests.helpers import cli_env, run_until_killed, sessionize

BACKENDS = ("files", "postgres", "redis", "dynamodb")


@pytest.mark.parametrize("src,dst", list(itertools.permutations(BACKENDS, 2)))
def test_copy_between_backends(store, src, dst):
    source, target = open_backend(store(src)), open_backend(store(dst))
    fx.build(source)
    rules = rules_of(fx.SETTINGS)
    copy_state(
        source,
        target,
        fx.JOB,
        fx.VERSION,
        partitions_in=2,
        partitions_out=2,
        rules=rules,
        on_line=lambda _: None,
    )
    for p in (0, 1):
        got = read_partition(target, fx.JOB, p, fx.VERSION)
        assert got.rows.equals(read_partition(source, fx.JOB, p, fx.VERSION).rows)
        assert got.meta == fx.META[p]
        assert content_hash(got.rows) == content_hash(fx.PARTITION_ROWS[p])
    assert target.job_versions(fx.JOB) == [fx.VERSION]
    assert target.read_job_record(fx.JOB, fx.VERSION) == source.read_job_record(fx.JOB, 7)
    assert target.read_job_settings(fx.JOB) == fx.SETTINGS
    assert source.versions(fx.JOB, 0) == [6, 7]  # the source is untouched


def test_a_copy_of_a_store_whose_records_carry_the_settings_has_them_once(store):
    """Repartitioned into 3: the target's settings entry says 3 partitions, its record
    holds no settings, and the source keeps its own."""
    source, target = open_backend(store("files")), open_backend(store("files"))
    fx.build(source, settings_in_records=True)
    copy_state(
        source,
        target,
        fx.JOB,
        fx.VERSION,
        partitions_in=2,
        partitions_out=3,
        rules=rules_of(fx.SETTINGS),
        assign=lambda users, n: users.to_numpy() % n,
        on_line=lambda _: None,
    )
    assert target.read_job_settings(fx.JOB) == {**fx.SETTINGS, "partitions": 3}
    assert target.read_job_record(fx.JOB, 7) == {"version": 7, "watermark": 1}
    assert source.read_job_settings(fx.JOB) is None
    assert source.read_job_record(fx.JOB, 7)["settings"] == fx.SETTINGS


def test_inspect_and_export_hand_computed(tmp_path):
    uri = f"files:{tmp_path / 'state'}"
    fx.build(open_backend(uri))
    sj = locate(None, str(tmp_path / "out"), uri, fx.JOB)
    version, parts = summarize(sj)
    assert version == 7
    assert [(p.versions, p.users, p.sessions) for p in parts] == [([6, 7], 1, 2), ([6, 7], 2, 2)]
    us = int(fx.t("09:50").timestamp()) * 1_000_000
    assert [p.oldest_us for p in parts] == [int(fx.t("10:00").timestamp()) * 1_000_000, us]

    out = tmp_path / "open.parquet"
    assert export_sessions(sj, str(out)) == (7, 4)
    table = pq.read_table(out)
    assert table.column_names == [*SESSIONS.names, "expires_at", "pending_events"]
    got = [
        (
            r["session_id"],
            r["closed_at"],
            r["event_count"],
            r["pages"],
            r["end_reason"],
            r["expires_at"],
            [(e["event_time"], e["page"], e["action"]) for e in r["pending_events"]],
        )
        for r in table.to_pylist()
    ]
    ms = lambda hhmm: int(fx.t(hhmm).timestamp() * 1000)  # noqa: E731
    assert got == [
        (
            f"1-{ms('10:00')}",
            fx.t("10:15"),
            2,
            ["a", "b"],
            "inactivity",
            fx.t("10:15"),
            [(fx.t("10:00"), "a", "view"), (fx.t("10:05"), "b", "view")],
        ),
        (
            f"1-{ms('10:30')}",
            fx.t("10:40"),
            1,
            ["c"],
            "inactivity",
            fx.t("10:15"),
            [(fx.t("10:30"), "c", "view")],
        ),
        (
            f"2-{ms('11:00')}",
            fx.t("11:02"),
            2,
            ["x", "y"],
            "explicit",
            fx.t("11:02"),
            [(fx.t("11:00"), "x", "view"), (fx.t("11:02"), "y", "browser_close")],
        ),
        (
            f"3-{ms('09:50')}",
            fx.t("10:00"),
            1,
            ["z"],
            "inactivity",
            fx.t("10:00"),
            [(fx.t("09:50"), "z", "view")],
        ),
    ]
    assert user_sessions(sj, 2)["session_id"].to_pylist() == [f"2-{ms('11:00')}"]
    assert export_sessions(sj, str(out), version=6) == (6, 2)  # user 4 in both partitions


def test_refused_while_a_driver_holds_the_checkpoint(tmp_path, store):
    chk = fx.checkpoint(tmp_path, "files")
    fx.build(open_backend(f"files:{chk / 'state'}"))
    with checkpoint_lease(str(chk)):
        for args in (["inspect"], ["migrate", "--to", store("files")]):
            done = sessionize("state", *args, "--checkpoint", str(chk))
            assert done.returncode == 2
            lines = done.stderr.strip().splitlines()
            assert len(lines) == 1 and "is in use by" in lines[0], done.stderr
    shown = sessionize("state", "inspect", "--checkpoint", str(chk))
    assert shown.returncode == 0 and "total" in shown.stdout, shown.stderr


def test_migrate_killed_then_rerun(tmp_path, store):
    chk = fx.checkpoint(tmp_path, "files")
    source = open_backend(f"files:{chk / 'state'}")
    fx.build(source, settings_in_records=True)
    before = [content_hash(read_partition(source, fx.JOB, p, 7).rows) for p in (0, 1)]
    to = store("redis")
    args = ["state", "migrate", "--checkpoint", str(chk), "--to", to]
    settings = json.loads((chk / "sessionize.json").read_text())
    for point in ("state-copy-partition:0", "before-switch:7"):
        run_until_killed(args, "PAUSED", cli_env(SESSIONIZE_PAUSE_AT=point))
        assert json.loads((chk / "sessionize.json").read_text()) == settings  # not switched
    done = sessionize(*args)
    assert done.returncode == 0, done.stderr
    assert "switched to state" in done.stdout
    target = open_backend(to)
    for p in (0, 1):
        assert content_hash(read_partition(target, fx.JOB, p, 7).rows) == before[p]
        assert content_hash(read_partition(source, fx.JOB, p, 7).rows) == before[p]
    assert source.versions(fx.JOB, 0) == [6, 7] and source.job_versions(fx.JOB) == [6, 7]
    assert target.read_job_settings(fx.JOB) == fx.SETTINGS
    assert "settings" not in target.read_job_record(fx.JOB, 7)
    # The checkpoint now takes the new state, and refuses the old one as any other change.
    new = {**settings, "state": to}
    check_or_record(str(chk), new)
    with pytest.raises(IncompatibleCheckpoint, match="--state"):
        check_or_record(str(chk), settings)
    again = sessionize(*args)
    assert again.returncode == 0 and "nothing to do" in again.stdout, again.stderr


def test_verify_refuses_a_copy_that_differs(store):
    """A copy whose content changed after it was written (one event's page) fails the
    content hash even with the same users and rows."""
    source, target = open_backend(store("files")), open_backend(store("files"))
    fx.build(source)
    copy_state(
        source,
        target,
        fx.JOB,
        7,
        partitions_in=2,
        partitions_out=2,
        rules=rules_of(fx.SETTINGS),
        on_line=lambda _: None,
    )
    changed = fx.rows([(3, "09:50", "zz", "view", "10:00")])
    with target.open(fx.JOB, 1, -1) as tx:
        tx.put_many(fx.PARTITION_ROWS[1].filter(pc.not_equal(fx.PARTITION_ROWS[1]["user_id"], 3)))
        tx.put_many(changed)
        tx.commit(7, fx.META[1])
    with pytest.raises(StateError, match="partition 1 .* differs from the source"):
        verify(target, fx.JOB, 7, [fx.PARTITION_ROWS[0], fx.PARTITION_ROWS[1]])
