"""State tools on a job with string user ids and its own kept attributes: the tools read the
rows in the job's layout (`user_key` as the store's key, the mapping's attributes), count
and place users by their id (two ids may share a key), and write them back unchanged."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from sessionize.commands.statetools.contents import read_partition
from sessionize.commands.statetools.copy import copy_state
from sessionize.commands.statetools.inspect import export_sessions, summarize, user_sessions
from sessionize.commands.statetools.job import locate
from sessionize.errors import ConfigError
from sessionize.mapping import EventMapping
from sessionize.schema import layout
from sessionize.state import layout_rows, open_backend
from tests.commands.state_fixture import t
from tests.helpers import sessionize

JOB = "app"
MAPPING = EventMapping(user="anonymous_id", user_type="string", keep=(("plan", "ctx.plan"),))
SETTINGS = {
    "gap": "10m",
    "lateness": "10m",
    "close_actions": "logout",
    "partitions": 1,
    **MAPPING.record(),
}
SHAPE = layout(MAPPING)
# anna and bob share stored key 7 (as two ids whose hashes collide would); cleo has key 9.
EVENTS = [
    ("anna", 7, "10:00", "home", "view", "pro", "10:10"),
    ("bob", 7, "10:01", "cart", "view", "free", "10:11"),
    ("bob", 7, "10:03", "pay", "logout", "free", "10:11"),
    ("cleo", 9, "09:55", "home", "view", None, "10:05"),
]


def _rows() -> pa.Table:
    names = ["user_id", "user_key", "event_time", "page", "action", "plan", "expires_at"]
    cols = dict(zip(names, map(list, zip(*EVENTS, strict=True)), strict=True))
    cols["event_time"] = [t(x) for x in cols["event_time"]]
    cols["expires_at"] = [t(x) for x in cols["expires_at"]]
    return pa.table({n: cols[n] for n in SHAPE.stored.names}, schema=SHAPE.stored)


@pytest.fixture
def job(tmp_path):
    uri = f"files:{tmp_path / 'state'}"
    backend = open_backend(uri, layout_rows(SHAPE))
    with backend.open(JOB, 0, -1) as tx:
        tx.put_many(_rows())
        tx.commit(3, {"open_sessions": 3, "open_users": 3})
    backend.write_job_settings(JOB, SETTINGS)
    backend.write_job_record(JOB, 3, {"version": 3, "watermark": 1})
    return locate(None, str(tmp_path / "out"), uri, JOB)


def test_inspect_and_export_read_the_jobs_layout(job, tmp_path):
    version, parts = summarize(job)
    assert (version, parts[0].users, parts[0].sessions) == (3, 3, 3)
    out = tmp_path / "open.parquet"
    assert export_sessions(job, str(out)) == (3, 3)
    table = pq.read_table(out)
    assert table.schema.field("user_id").type == pa.string()
    assert [(r["user_id"], r["plan"], r["event_count"], r["end_reason"])
            for r in table.to_pylist()] == [
        ("anna", "pro", 1, "inactivity"), ("bob", "free", 2, "explicit"),
        ("cleo", None, 1, "inactivity"),
    ]  # fmt: skip
    bob = user_sessions(job, "bob")
    assert [e["page"] for e in bob["pending_events"][0].as_py()] == ["cart", "pay"]
    assert user_sessions(job, "nobody").num_rows == 0


def test_a_user_of_the_wrong_type_is_refused_in_one_line(tmp_path):
    from tests.commands import state_fixture as fx

    uri = f"files:{tmp_path / 'state'}"
    fx.build(open_backend(uri))
    sj = locate(None, str(tmp_path / "out"), uri, fx.JOB)
    with pytest.raises(ConfigError, match="--user 'anna': this job's user ids are int64"):
        user_sessions(sj, "anna")
    assert user_sessions(sj, "2").num_rows == 1


def test_repartition_places_users_by_id_and_keeps_their_keys(job, store):
    target = job.open(store("postgres"))

    def by_name(users: pa.Array, n: int) -> np.ndarray:  # anna and cleo in 0, bob in 1
        return np.array([1 if u == "bob" else 0 for u in users.to_pylist()])

    result = copy_state(
        job.backend(),
        target,
        JOB,
        3,
        partitions_in=1,
        partitions_out=2,
        rules=job.rules,
        shape=job.layout,
        assign=by_name,
        on_line=lambda _: None,
    )
    assert [(c.users, c.rows) for c in result.partitions] == [(2, 2), (1, 2)]
    p0, p1 = (read_partition(target, JOB, p, 3, job.layout).rows for p in (0, 1))
    assert p0.select(["user_id", "user_key", "plan"]).to_pylist() == [
        {"user_id": "anna", "user_key": 7, "plan": "pro"},
        {"user_id": "cleo", "user_key": 9, "plan": None},
    ]
    assert p1["user_id"].to_pylist() == ["bob", "bob"] and p1["user_key"].to_pylist() == [7, 7]
    assert target.read_job_settings(JOB) == {**SETTINGS, "partitions": 2}


def _inspect(job, *args: str):
    return sessionize(
        "state",
        "inspect",
        "--output",
        str(job.output),
        "--state",
        job.state,
        "--job",
        JOB,
        *args,
        timeout=120,
    )


def test_inspect_a_user_through_the_cli_shows_the_jobs_own_attributes(job):
    done = _inspect(job, "--user", "bob")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith("bob-") and "2 events" in lines[0], lines
    assert [line.split()[1:] for line in lines[1:]] == [
        ["view", "cart", "plan=free"],
        ["logout", "pay", "plan=free"],
    ]


def test_an_unexpected_failure_of_inspect_does_not_speak_of_resuming_a_stream(job, tmp_path):
    for f in (tmp_path / "state").rglob("*.parquet"):
        f.write_bytes(b"not parquet")
    done = _inspect(job)
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
    assert "run the same command again" in done.stderr, done.stderr
    assert "stream" not in done.stderr, done.stderr
    log = re.search(r"full trace in (\S+\.log)", done.stderr)
    assert log, done.stderr
    Path(log.group(1)).unlink()
