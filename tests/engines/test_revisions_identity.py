"""`--revise-within` with identity end to end (docs/design.md, "Revisions", "With
identity"): visits with logins, logouts, second and shared devices whose held-back files
bring events hours behind the watermark, streamed file by file; the current numbered
sessions (the docs' query over `sessions` and `session_revisions`), the `users` and the
`identities` (their latest rows) equal `sessionize batch` over every event, on local
Parquet and on Delta, and a kill -9 inside a revising batch once the first step handed its
changes on, then a restart, writes what the uninterrupted run wrote."""

from __future__ import annotations

import json
import os
import shutil
from datetime import datetime

import pytest

from sessionize.commands.batch import BatchOptions, run_batch
from sessionize.commands.stream import StreamOptions, run_stream
from sessionize.mapping import EventMapping
from tests.engines.revising import REVISING_BATCH, RULES, START, read
from tests.helpers import cli_env, generate, run_until_killed, sessionize

MAPPING = EventMapping(anonymous="anonymous_id", user_type="string", session_columns=2)
FLUSH = "anon-flush"  # its one event, an hour after the data, moves the watermark past all
OUTPUTS = (
    "sessions",
    "page_views",
    "session_revisions",
    "page_view_revisions",
    "users",
    "identities",
    "late_events",
)


@pytest.fixture(scope="module")
def data(spark, tmp_path_factory):
    """The input, its uninterrupted stream to Parquet and its batch run."""
    root = tmp_path_factory.mktemp("revisions-identity")
    inp = generate(
        root / "in",
        start=START,
        hours=2,
        users=80,
        events_per_hour=800,
        identity_data=True,
        late_rate=0.05,
        invalid_rate=0.0,
        files_per_hour=2,
    )
    newest = max(p.stat().st_mtime for p in inp.rglob("*.json*"))
    flush = inp / "event_date=2026-11-01" / "event_hour=03" / "part-00000.json"
    flush.parent.mkdir(parents=True)
    event = {"anonymous_id": FLUSH, "event_time": "2026-11-01T03:00:00+00:00"}
    flush.write_text(json.dumps({**event, "page": {"current": "home"}}) + "\n")
    os.utime(flush, (newest + 60, newest + 60))
    run_stream(stream(inp, root / "clean"), spark, on_batch=lambda _: None)
    run_batch(
        BatchOptions(
            input=str(inp),
            output=str(root / "batch"),
            start=START,
            end=START.replace(hour=4),
            partitions=3,
            mapping=MAPPING,
        ),
        spark,
        on_hour=lambda _: None,
    )
    return root, inp


def stream(inp, root, output_format: str = "parquet") -> StreamOptions:
    return StreamOptions(
        input=str(inp),
        output=str(root / "out"),
        checkpoint=str(root / "chk"),
        output_format=output_format,
        partitions=3,
        max_files_per_trigger=1,
        rules=RULES,
        mapping=MAPPING,
    )


def latest(rows: list[dict], key: str) -> dict[str, dict]:
    """Per `key`, its row of the greatest batch (then revision); a retraction removes it."""
    out: dict[str, tuple] = {}
    for row in rows:
        rank = (row["batch_id"], row.get("revision") or 0)
        if row[key] not in out or rank > out[row[key]][0]:
            out[row[key]] = (rank, row)
    current = {}
    for k, (_, row) in out.items():
        if not row.get("retracted") and row.get("sessions") != 0:  # 0: a user with none left
            if "session_date" in row:  # a partition column in `sessions`, a date elsewhere
                row["session_date"] = str(row["session_date"])
            current[k] = {
                n: v for n, v in row.items() if n not in ("batch_id", "revision", "retracted")
            }
    return current


def current(out) -> dict[str, dict]:
    """The current numbered sessions, users and identities of a Parquet output."""
    written = [*read(out, "sessions").to_pylist(), *read(out, "session_revisions").to_pylist()]
    sessions = latest(written, "session_id")
    users = latest(read(out, "users").to_pylist(), "stitched_user_id")
    identities = latest(read(out, "identities").to_pylist(), "anonymous_id")
    return {
        "sessions": {k: v for k, v in sessions.items() if v["anonymous_id"] != FLUSH},
        "users": {k: v for k, v in users.items() if k != FLUSH},
        "identities": {k: v for k, v in identities.items() if k != FLUSH},
    }


def test_current_sessions_users_and_identities_after_the_stream_equal_one_batch(data):
    root, _ = data
    out = root / "clean" / "out"
    revisions = read(out, "session_revisions").to_pylist()
    assert any(not r["retracted"] for r in revisions), "no session was revised"
    assert REVISING_BATCH in {r["batch_id"] for r in revisions}
    assert read(out, "late_events").num_rows == 0, "the window covers the input's lateness"
    got, want = current(out), current(root / "batch")
    for name in ("sessions", "users", "identities"):
        assert got[name] == want[name], name
    assert max(r["session_number"] for r in got["sessions"].values()) > 1
    # Page views follow the first step's writes: every current session has its own.
    views: dict[str, dict] = {}
    for name in ("page_views", "page_view_revisions"):
        for r in read(out, name).to_pylist():
            views.setdefault(r["session_id"], {}).setdefault(r["batch_id"], []).append(r)
    for sid, row in got["sessions"].items():
        last = views[sid][max(views[sid])]
        assert [v["page"] for v in sorted(last, key=lambda v: v["position"])] == row["pages"]


@pytest.mark.timeout(1800)  # JVMs started and killed, on a busy machine
def test_kill_9_after_the_first_step_handed_on_a_revising_batch_then_restart(data, tmp_path):
    root, inp = data
    args = [
        "stream",
        "--input", str(inp),
        "--output", str(tmp_path / "out"),
        "--checkpoint", str(tmp_path / "chk"),
        "--partitions", "3",
        "--max-files-per-trigger", "1",
        "--anonymous-field", "anonymous_id",
        "--user-type", "string",
        "--revise-within", "3h",
    ]  # fmt: skip
    point = f"before-follow-on:{REVISING_BATCH}"
    seen = run_until_killed(
        args, f"PAUSED {point.replace(':', ' ')}", cli_env(SESSIONIZE_PAUSE_AT=point)
    )
    assert "PAUSED" in seen
    done = sessionize(*args, env=cli_env())
    assert done.returncode == 0, done.stderr[-3000:]
    for name in OUTPUTS:
        assert read(tmp_path / "out", name).equals(read(root / "clean" / "out", name)), name


def delta_rows(root, name: str) -> list[dict]:
    from deltalake import DeltaTable

    return DeltaTable(str(root / name)).to_pyarrow_table().to_pylist()


def test_delta_keeps_the_sessions_users_and_identities_of_one_batch(spark, data, tmp_path):
    """Delta keeps `sessions`, `users` and `identities` current: after the stream they are
    one batch's of every event, and every session keeps the page views of its latest
    first-step write (the users step alone renumbers some, and writes none)."""
    root, inp = data
    run_stream(stream(inp, tmp_path, "delta"), spark, on_batch=lambda _: None)
    out = tmp_path / "out"
    bookkeeping = ("batch_id", "revision", "revised_batch")
    sessions = {
        r["session_id"]: {k: v for k, v in r.items() if k not in bookkeeping}
        for r in delta_rows(out, "sessions")
        if r["anonymous_id"] != FLUSH
    }
    want = current(root / "batch")
    for row in want["sessions"].values():
        row["session_date"] = datetime.fromisoformat(row["session_date"]).date()
    assert sessions == want["sessions"]
    assert any(r["revision"] > 0 for r in delta_rows(out, "sessions"))
    users = {r["stitched_user_id"]: r for r in delta_rows(out, "users")}
    assert {k: v for k, v in users.items() if k != FLUSH} == want["users"]
    identities = {r["anonymous_id"]: r for r in delta_rows(out, "identities")}
    assert {k: v for k, v in identities.items() if k != FLUSH} == want["identities"]
    views: dict[str, list] = {}
    for v in sorted(delta_rows(out, "page_views"), key=lambda v: v["position"]):
        views.setdefault(v["session_id"], []).append(v["page"])
    for sid, row in sessions.items():
        assert views[sid] == row["pages"], sid


def test_maintain_compact_keeps_the_page_views_of_renumbered_sessions(data, tmp_path):
    """Compaction folds the revisions: `sessions` read alone is then the current numbered
    sessions, and `page_views` alone their page views, also of sessions the users step
    alone revised (renumbered, with no page views in their current row's batch)."""
    root, _ = data
    out = tmp_path / "out"
    shutil.copytree(root / "clean" / "out", out, symlinks=True)
    before = current(out)["sessions"]
    done = sessionize("maintain", "--output", str(out), "--compact", env=cli_env())
    assert done.returncode == 0, done.stderr[-3000:]
    alone = latest(read(out, "sessions").to_pylist(), "session_id")
    assert {k: v for k, v in alone.items() if v["anonymous_id"] != FLUSH} == before
    views: dict[str, list] = {}
    for v in sorted(read(out, "page_views").to_pylist(), key=lambda v: v["position"]):
        views.setdefault(v["session_id"], []).append(v["page"])
    for sid, row in before.items():
        assert views[sid] == row["pages"], sid


def test_bounded_sessions_with_a_window_are_numbered_as_one_batch(spark, data):
    """`Sessionizer.sessions` over a bounded input with `revise_within`: one pass, where no
    event is behind a watermark, numbers the sessions as one batch of every event does."""
    from sessionize import Sessionizer

    root, inp = data
    lines = []
    for path in sorted(inp.rglob("*.json*")):
        lines += [(line,) for line in path.read_text().splitlines() if line.strip()]
    s = Sessionizer(
        anonymous_field="anonymous_id", user_type="string", partitions=2, revise_within="3h"
    )
    sessions = s.sessions(spark.createDataFrame(lines, "value string")).sessions
    columns = ["session_id", "user_id", "stitched_user_id", "session_number", "is_new_user"]
    got = {r["session_id"]: r.asDict() for r in sessions.select(*columns).collect()}
    want = current(root / "batch")["sessions"]
    assert len(want) > 100
    assert {k: {c: v[c] for c in columns} for k, v in want.items()} == {
        k: v for k, v in got.items() if k in want
    }
