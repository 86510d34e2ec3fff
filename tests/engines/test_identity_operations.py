"""A session job with identity (`sessionize stream --anonymous-field`) killed with kill -9
around its two steps (the sessions per anonymous id, then the users step per stitched
user, engines/keyed.py) and restarted: the final `sessions` (numbered and attributed),
`users`, `identities` and `page_views` are an uninterrupted run's, nothing doubled and
nothing lost, on Parquet (change logs) and on Delta (`users` and `identities` kept
current). A checkpoint written before the users step existed is refused in one line that
says what to do, and doing it gives the uninterrupted run's outputs (hourly batches
likewise); `state migrate` and `repartition` refuse such a job in one line. One generated input
and one uninterrupted run serve every case."""

from __future__ import annotations

import shutil
from datetime import UTC, datetime

import pyarrow as pa
import pytest

from sessionize.commands.batch import BatchOptions, run_batch
from sessionize.commands.stream import StreamOptions, run_stream
from sessionize.mapping import EventMapping
from sessionize.state import open_backend
from tests.helpers import cli_env, generate, read_output, run_until_killed, sessionize

START = datetime(2026, 11, 1, tzinfo=UTC)
MAPPING = EventMapping(anonymous="anonymous_id", user_type="string", session_columns=3)
# Each output's rows in one order whatever the run: its key within each batch.
ROW_KEYS = {
    "sessions": ["batch_id", "session_id"],
    "page_views": ["batch_id", "session_id", "position"],
    "users": ["batch_id", "stitched_user_id"],
    "identities": ["batch_id", "anonymous_id"],
}


@pytest.fixture(scope="module")
def reference(spark, tmp_path_factory):
    """Two hours of visits with logins, logouts, second and shared devices, in four files
    (four micro-batches), and their uninterrupted stream in `root/clean`."""
    root = tmp_path_factory.mktemp("identity-kills")
    inp = generate(
        root / "in",
        start=START,
        hours=2,
        users=120,
        events_per_hour=1200,
        identity_data=True,
        invalid_rate=0.0,
        files_per_hour=2,
    )
    records = run_stream(
        StreamOptions(
            input=str(inp),
            output=str(root / "clean" / "out"),
            checkpoint=str(root / "clean" / "chk"),
            partitions=2,
            max_files_per_trigger=1,
            mapping=MAPPING,
        ),
        spark,
        on_batch=lambda _: None,
    )
    assert [r["version"] for r in records] == [0, 1, 2, 3]
    return root, inp


def stream_args(inp, run, *extra: str) -> list[str]:
    return [
        "stream",
        "--input", str(inp),
        "--output", str(run / "out"),
        "--checkpoint", str(run / "chk"),
        "--partitions", "2",
        "--max-files-per-trigger", "1",
        "--anonymous-field", "anonymous_id",
        "--user-type", "string",
        *extra,
    ]  # fmt: skip


def kill_at(args: list[str], point: str) -> None:
    """Run the CLI until it reaches the pause point `point` (`NAME:BATCH`), then kill -9 it."""
    name, batch = point.split(":")
    run_until_killed(args, f"PAUSED {name} {batch}", cli_env(SESSIONIZE_PAUSE_AT=point))


def rows(table: pa.Table, name: str) -> list[dict]:
    return table.sort_by([(k, "ascending") for k in ROW_KEYS[name]]).to_pylist()


def state_versions(chk, job: str) -> tuple[set[int], list[int]]:
    """The versions every partition of `job` committed, and the versions with a job record."""
    backend = open_backend(f"files:{chk / 'state'}")
    committed = set.intersection(*(set(backend.versions(job, p)) for p in (0, 1)))
    return committed, backend.job_versions(job)


@pytest.mark.timeout(1800)  # several JVMs started and killed, on a busy machine
def test_parquet_killed_between_the_steps_before_and_after_publish(reference, tmp_path):
    """Killed (a) in batch 1 once the first step committed its state and handed its
    sessions on, before the users step ran; (b) in batch 2 once both steps committed,
    before the publish; (c) in batch 3 after the publish, before the batch's records.
    Each restart runs the batch again from the version before of both jobs."""
    root, inp = reference
    args = stream_args(inp, tmp_path)
    chk = tmp_path / "chk"

    kill_at(args, "before-follow-on:1")
    assert list((chk / "handoff" / "batch=1").glob("part-*.parquet"))
    first, _ = state_versions(chk, "sessionize")
    users, _ = state_versions(chk, "sessionize.users")
    assert 1 in first and 1 not in users

    kill_at(args, "before-publish:2")
    users, records = state_versions(chk, "sessionize.users")
    assert 2 in users and 2 not in records
    assert 2 not in set(read_output(tmp_path / "out", "sessions")["batch_id"].to_pylist())

    kill_at(args, "after-publish:3")
    assert 3 in set(read_output(tmp_path / "out", "users")["batch_id"].to_pylist())
    assert 3 not in state_versions(chk, "sessionize")[1]

    done = sessionize(*args, env=cli_env())
    assert done.returncode == 0, done.stderr[-3000:]
    clean = root / "clean" / "out"
    same_outputs(tmp_path / "out", clean)
    assert max(read_output(clean, "sessions")["session_number"].to_pylist()) > 1


def same_outputs(got, want) -> None:
    """Every output of the session job with identity has the same rows in each batch."""
    for name in ROW_KEYS:
        new, old = read_output(got, name), read_output(want, name)
        assert old.num_rows > 0 and rows(new, name) == rows(old, name), name


def delta_rows(root, name: str) -> list[dict]:
    from deltalake import DeltaTable

    return DeltaTable(str(root / name)).to_pyarrow_table().to_pylist()


def current(table: list[dict], key: str) -> dict:
    """Per key, a change log's latest row (by batch, its batch id left out), or a kept
    table's row (it has no batch id)."""
    rows = {}
    for r in sorted(table, key=lambda r: r.get("batch_id", -1)):
        rows[r[key]] = {k: v for k, v in r.items() if k != "batch_id"}
    return rows


@pytest.mark.timeout(1800)  # several JVMs started and killed, on a busy machine
def test_delta_killed_inside_and_after_the_publish(reference, tmp_path):
    """On Delta each table is its own commit, `users` and `identities` first (kept
    current: one row per key): killed in batch 2 once those two were committed and not
    the sessions, then in batch 3 after every table, before the records. The sessions are
    the uninterrupted run's, and `users` and `identities` its change logs' latest rows."""
    root, inp = reference
    args = stream_args(inp, tmp_path, "--output-format", "delta")
    kill_at(args, "published-users:2")
    kill_at(args, "after-publish:3")
    done = sessionize(*args, env=cli_env())
    assert done.returncode == 0, done.stderr[-3000:]

    clean = root / "clean" / "out"
    out = tmp_path / "out"
    want = rows(read_output(clean, "sessions"), "sessions")
    got = sorted(delta_rows(out, "sessions"), key=lambda r: (r["batch_id"], r["session_id"]))
    for r in got:  # a Delta date; the Parquet output's Hive partition reads as text
        r["session_date"] = r["session_date"].isoformat()
    assert got == want
    for name, key in (("users", "stitched_user_id"), ("identities", "anonymous_id")):
        kept = delta_rows(out, name)
        assert len(kept) == len({r[key] for r in kept}), f"{name}: a key twice"
        assert current(kept, key) == current(read_output(clean, name).to_pylist(), key), name


def test_a_checkpoint_without_the_users_step_is_refused_in_one_line(spark, reference, tmp_path):
    """A checkpoint of an identity job written before the users step existed has no state
    of the job `sessionize.users` (built here from a run's, that state removed): the
    restart is refused before any batch, in one line on stderr saying to start over from
    a rewind to -1; that rewind and the same command give the uninterrupted run's
    outputs."""
    root, inp = reference
    chk = tmp_path / "chk"
    options = StreamOptions(
        input=str(inp),
        output=str(tmp_path / "out"),
        checkpoint=str(chk),
        partitions=2,
        max_files_per_trigger=1,
        mapping=MAPPING,
    )
    run_stream(options, spark, on_batch=lambda _: None)
    shutil.rmtree(chk / "state" / "sessionize.users")

    refused = sessionize(*stream_args(inp, tmp_path))
    assert refused.returncode != 0
    assert refused.stderr.splitlines() == [
        f"sessionize: error: checkpoint {chk} has run job 'sessionize' up to batch 3 without "
        f"its second step 'sessionize.users' (state files:{chk}/state has none of it: the "
        "checkpoint was written before that step existed, or its state was removed): start "
        f"the job over with `sessionize rewind --checkpoint {chk} --to-batch -1`, then run "
        "it again"
    ]
    rewound = sessionize("rewind", "--checkpoint", str(chk), "--to-batch", "-1")
    assert rewound.returncode == 0, rewound.stderr[-3000:]
    run_stream(options, spark, on_batch=lambda _: None)
    same_outputs(tmp_path / "out", root / "clean" / "out")


def test_state_migrate_and_repartition_refuse_a_job_with_identity_in_one_line(reference, tmp_path):
    """The users step's job would have to move with the sessions' job: both commands
    refuse either job in one line saying to keep the state, and write nothing."""
    root, _ = reference
    chk = root / "clean" / "chk"
    moved = f"files:{tmp_path / 'moved'}"
    for job, other in (("sessionize", "sessionize.users"), ("sessionize.users", "sessionize")):
        for command in (["migrate"], ["repartition", "--partitions", "3"]):
            done = sessionize("state", *command, "--to", moved, "--checkpoint", str(chk),
                              "--job", job)  # fmt: skip
            assert done.returncode != 0
            assert done.stderr.splitlines() == [
                f"sessionize: error: job '{job}' is one of the two steps of its job (the "
                f"other: job '{other}', a session job's users step with --anonymous-field "
                "or a processor's follow-on): moving them together is not supported yet; "
                "keep the job on its state and partitions"
            ], command
    assert not (tmp_path / "moved").exists()


def test_batch_hours_run_without_the_users_step_are_refused_in_one_line(spark, reference, tmp_path):
    """Hourly batches of an identity job whose state holds no `sessionize.users` (run
    before the users step existed): the next hour is refused in one line saying to run
    them again from the state's first hour, and that run completes."""
    _, inp = reference
    out = tmp_path / "out"
    options = BatchOptions(
        input=str(inp), output=str(out), start=START, end=START, partitions=2, mapping=MAPPING
    )
    run_batch(options, spark, on_hour=lambda _: None)
    shutil.rmtree(out / "_state" / "sessionize.users")
    flags = ["--input", str(inp), "--output", str(out), "--partitions", "2",
             "--anonymous-field", "anonymous_id", "--user-type", "string"]  # fmt: skip
    refused = sessionize("batch", *flags, "--from", "2026-11-01T01", "--to", "2026-11-01T01")
    assert refused.returncode != 0
    assert refused.stderr.splitlines() == [
        f"sessionize: error: output {out} has hours of job 'sessionize' up to 2026-11-01T00 "
        f"without its second step 'sessionize.users' (state files:{out}/_state has none of "
        "it: they were run before that step existed, or its state was removed): run them "
        "again from the state's first hour, `sessionize batch --from 2026-11-01T00` with the "
        "same flags"
    ]
    again = sessionize("batch", *flags, "--from", "2026-11-01T00", "--to", "2026-11-01T01")
    assert again.returncode == 0, again.stderr[-3000:]
    assert set(read_output(out, "users")["batch_id"].to_pylist()) == {2026110100, 2026110101}
