"""A processor's follow-on (`stateful.FollowOn`): the second keyed step of a batch, on the
rows of one of the first step's outputs, keyed by another column, with its own state job.
Checked against the plain loop of tests/stateful/chained.py: in memory for any split, on
Spark and every store with `stateful.run`, and as a stream killed with kill -9 between the
two steps, restarted, rewound and continued."""

from __future__ import annotations

import os
import random
import signal
import uuid
from datetime import UTC, datetime
from pathlib import Path

import pyarrow as pa
import pyarrow.dataset as ds
import pytest

from sessionize import stateful
from sessionize.commands.history import batch_history, open_checkpoint
from sessionize.commands.rewind import rewind
from sessionize.commands.statetools.inspect import summarize
from sessionize.commands.statetools.job import locate
from sessionize.commands.statetools.moves import move_state
from sessionize.errors import ConfigError, ProcessorError
from sessionize.sinks.outputs import named
from sessionize.sinks.parquet_s3 import ManifestParquetSink
from sessionize.state import open_backend
from tests.helpers import cli_env, wait_for
from tests.s3_fixtures import s3_client
from tests.stateful.chained import USERS, Devices, Users, per_batch, reference, table_of

from .test_examples_engine import _iso, _run

VISIT_COLUMNS = ["device", "user", "t", "device_seq", "user_seq"]


def _events(seed: int, batches: int = 4) -> list[list[dict]]:
    """Visits of six devices, three users (devices 1 and 4 are ann's two devices), time
    rising, cut into micro-batches."""
    rng = random.Random(seed)
    t = 1_700_000_000_000_000
    out = []
    for _ in range(batches):
        batch = []
        for _ in range(rng.randint(3, 8)):
            t += rng.randint(1, 5) * 60_000_000
            d = rng.randint(1, 6)
            batch.append({"device": d, "user": ["cy", "ann", "bob"][d % 3], "t": t})
        out.append(batch)
    return out


def _local(batches: list[list[dict]]) -> tuple[list[set], list[set]]:
    run = stateful.run_local(Devices(), [table_of(b) for b in batches])
    tagged = {
        name: pa.concat_tables(
            t.append_column("batch_id", pa.array([b] * t.num_rows, pa.int64()))
            for b, t in enumerate(run.outputs[name])
        )
        for name in ("visits", "users")
    }
    return (
        per_batch(tagged["visits"], VISIT_COLUMNS, len(batches)),
        per_batch(tagged["users"], ["user", "visits"], len(batches)),
    )


@pytest.mark.parametrize("seed", range(5))
def test_in_memory_each_split_equals_the_loop_and_one_batch(seed):
    batches = _events(seed)
    assert _local(batches) == reference(batches)
    visits, _ = _local([[e for b in batches for e in b]])
    assert visits[0] == set().union(*reference(batches)[0])  # numbers do not depend on the cut


@pytest.mark.parametrize(
    ("follow_on", "match"),
    [
        (stateful.FollowOn("nothing", Users()), "names output 'nothing'"),
        (stateful.FollowOn("visits", Users(), job="a/b"), "job: job name"),
        (stateful.FollowOn("visits", Devices()), "has a follow_on of its own"),
        ("visits", "must be a stateful.FollowOn"),
    ],
)
def test_a_wrong_follow_on_is_refused_in_one_line(follow_on, match):
    class Wrong(Devices):
        pass

    Wrong.follow_on = follow_on  # type: ignore[assignment]
    with pytest.raises(ProcessorError, match=match):
        stateful.run_local(Wrong(), [])


def test_a_follow_on_keyed_by_a_column_the_output_lacks_or_writing_its_outputs_is_refused():
    class Other(Users):
        key = "who"
        state_schema = pa.schema([("who", pa.string()), ("visits", pa.int64())])

    class Clash(Users):
        outputs = {"late": USERS}

    for then, match in ((Other(), "key 'who'"), (Clash(), r"output\(s\) \['late'\]")):

        class Wrong(Devices):
            follow_on = stateful.FollowOn("visits", then)

        with pytest.raises(ProcessorError, match=match):
            stateful.run_local(Wrong(), [])


def _read(out: Path, batches: int) -> tuple[list[set], list[set]]:
    read = {
        name: ds.dataset(str(out / name), format="parquet", partitioning="hive").to_table()
        for name in ("visits", "users")
    }
    return (
        per_batch(read["visits"], VISIT_COLUMNS, batches),
        per_batch(read["users"], ["user", "visits"], batches),
    )


def test_run_on_every_store_continues_both_steps(spark, tmp_path, state):
    batches = _events(7, batches=2)
    out = tmp_path / "out"
    lines: list[str] = []
    records = [
        stateful.run(
            spark.createDataFrame(
                [{**e, "t": datetime.fromtimestamp(e["t"] / 1e6, UTC)} for e in b],
                "device long, user string, t timestamp",
            ),
            Devices(),
            output=str(out),
            state=state(),
            partitions=2,
            on_batch=lines.append,
        )
        for b in batches
    ]
    assert _read(out, 2) == reference(batches)
    assert [r["follow_on"]["job"] for r in records] == ["stateful.users"] * 2
    users = len({e["user"] for e in batches[1]})
    assert (
        f"; then stateful.users: {len(batches[1])} rows, {users} keys, users_seen {users},"
        in (lines[1])
    )
    assert records[1]["follow_on"]["totals"]["counters"]["users_seen"] == sum(
        len({e["user"] for e in b}) for b in batches
    )
    store = state()
    backend = open_backend(f"files:{out / '_state'}" if store == "files" else store)
    assert backend.job_versions("stateful.users") == [0, 1]
    assert backend.read_job_settings("stateful.users")["processor"] == "Users"
    assert not (out / "_handoff").exists()  # removed once the batch is recorded


def _write(inp: Path, batches: list[list[dict]], first: int = 0) -> None:
    inp.mkdir(exist_ok=True)
    for n, batch in enumerate(batches, start=first):
        path = inp / f"{n:03d}.jsonl"
        path.write_text(
            "".join(
                f'{{"device": {e["device"]}, "user": "{e["user"]}", "t": "{_iso(e["t"])}"}}\n'
                for e in batch
            )
        )
        os.utime(path, (1_000_000 + n, 1_000_000 + n))


def test_a_stream_killed_between_the_steps_then_rewound_equals_the_loop(spark, tmp_path):
    """Killed after batch 1's first step has committed its state and handed its rows on,
    before the follow-on ran, then after both steps of batch 2 committed theirs, before
    the publish: each restart reruns the batch from the version before of both jobs. Then
    rewound to batch 1 (both jobs go back) and continued over the undone files and one
    more: every output is the loop's."""
    batches = _events(11)
    _write(tmp_path / "in", batches)
    proc = _run_chained(tmp_path, cli_env(SESSIONIZE_PAUSE_AT="before-follow-on:1"))
    wait_for(proc, "PAUSED before-follow-on 1")
    assert list((tmp_path / "chk" / "handoff" / "batch=1").glob("part-*.parquet"))
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    # Killed again once both steps of batch 2 have committed their state, before publishing.
    proc = _run_chained(tmp_path, cli_env(SESSIONIZE_PAUSE_AT="before-publish:2"))
    wait_for(proc, "PAUSED before-publish 2")
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    restart = _run_chained(tmp_path, cli_env(), tmp_path / "restart.log")
    restart.wait(timeout=900)
    log = (tmp_path / "restart.log").read_text()
    assert restart.returncode == 0, log[-3000:]
    assert _read(tmp_path / "out", 4) == reference(batches)

    chk = str(tmp_path / "chk")
    # The state tools find the follow-on's job by its name; moving one step alone is refused.
    version, parts = summarize(locate(chk, None, job="stateful.users"))
    assert (version, sum(p.users for p in parts)) == (
        3,
        len({e["user"] for b in batches for e in b}),
    )
    with pytest.raises(ConfigError, match="runs job 'stateful' and 'stateful.users', not 'nope'"):
        locate(chk, None, job="nope")
    with pytest.raises(ConfigError, match="one of the two steps"):
        move_state(f"files:{tmp_path / 'moved'}", checkpoint=chk, on_line=lambda _: None)

    plan = rewind(chk, 1, say=lambda _: None)
    assert plan.batches == [2, 3]
    assert _read(tmp_path / "out", 2) == tuple(r[:2] for r in reference(batches))
    backend = open_backend(f"files:{tmp_path / 'chk' / 'state'}")
    assert backend.job_versions("stateful.users") == backend.job_versions("stateful") == [0, 1]
    assert batch_history(open_checkpoint(chk)).restorable == [0, 1]

    more = _events(12, batches=1)
    last = max(e["t"] for b in batches for e in b)
    more = [[{**e, "t": e["t"] - more[0][0]["t"] + last + 60_000_000} for e in more[0]]]
    _write(tmp_path / "in", more, first=4)
    rows = (
        spark.readStream.schema("device long, user string, t timestamp")
        .option("maxFilesPerTrigger", 1)
        .json(str(tmp_path / "in"))
    )
    stateful.start(
        rows,
        Devices(),
        output=str(tmp_path / "out"),
        checkpoint=chk,
        partitions=2,
        on_batch=lambda _: None,
    ).wait()
    assert _read(tmp_path / "out", 5) == reference([*batches, *more])
    assert backend.job_versions("stateful.users") == [0, 1, 2, 3, 4]


def _run_chained(tmp: Path, env: dict[str, str], log: Path | None = None):
    return _run("chained", tmp, env, log, package="tests.stateful")


def test_a_raising_follow_on_commits_nothing_and_the_fixed_one_completes(spark, tmp_path):
    """The follow-on raises in batch 1 (its second Spark job): one line naming it, neither
    step's version 1 committed, nothing of batch 1 published; the fixed one completes as
    an uninterrupted run. A handed row without the follow-on's key is named as the first
    processor's mistake."""

    class Picky(Users):
        def __init__(self, fixed: bool) -> None:
            self.fixed = fixed

        @property
        def name(self) -> str:
            return "Users"

        def process(self, state, rows, ctx):
            if not self.fixed and "zed" in rows["user"].to_pylist():
                raise ValueError("zed is not allowed")
            return super().process(state, rows, ctx)

    def job(fixed: bool) -> stateful.Processor:
        class Chained(Devices):
            follow_on = stateful.FollowOn("visits", Picky(fixed), job="users")

            @property
            def name(self) -> str:
                return "Devices"

        return Chained()

    batches = _events(3, batches=2)
    batches[1][0]["user"] = "zed"
    out = tmp_path / "out"

    def run(batch: list[dict], fixed: bool) -> dict:
        df = spark.createDataFrame(
            [{**e, "t": datetime.fromtimestamp(e["t"] / 1e6, UTC)} for e in batch],
            "device long, user string, t timestamp",
        )
        return stateful.run(
            df, job(fixed), output=str(out), state="files", partitions=2, on_batch=lambda _: None
        )

    run(batches[0], fixed=False)
    with pytest.raises(
        ProcessorError, match="processor Users raised ValueError: zed is not allowed"
    ) as failed:
        run(batches[1], fixed=False)
    assert "\n" not in str(failed.value)
    backend = open_backend(f"files:{out / '_state'}")
    assert backend.job_versions("stateful") == backend.job_versions("stateful.users") == [0]
    assert _read(out, 1) == tuple(r[:1] for r in reference(batches))
    run(batches[1], fixed=True)
    assert _read(out, 2) == reference(batches)

    later = max(e["t"] for e in batches[1]) + 60_000_000  # on time
    nameless = [{**batches[1][0], "user": None, "t": later}]
    with pytest.raises(ProcessorError, match="output 'visits' hands rows without 'user'"):
        run(nameless, fixed=True)


def test_the_hand_off_goes_through_s3_when_the_output_is_there(spark, tmp_path):
    """`stateful.run` to an `s3://` output hands the rows over under it, through pyarrow's
    S3 file system (the shared S3 API server of the test services), and removes them."""
    endpoint = os.environ["SESSIONIZE_TEST_S3"].removeprefix("http://")
    bucket = f"t-{uuid.uuid4().hex[:12]}"
    s3 = s3_client(endpoint)
    s3.create_bucket(Bucket=bucket)
    out = f"s3://{bucket}/out?endpoint_override={endpoint}&scheme=http"
    batches = _events(5, batches=2)
    for b in batches:
        df = spark.createDataFrame(
            [{**e, "t": datetime.fromtimestamp(e["t"] / 1e6, UTC)} for e in b],
            "device long, user string, t timestamp",
        )
        stateful.run(
            df, Devices(), output=out, state=f"files:{tmp_path / 'state'}", partitions=2,
            on_batch=lambda _: None,
        )  # fmt: skip
    sink = ManifestParquetSink(out, outputs=named(("visits", "users")))
    fs, base = sink._fs()
    read = {
        name: ds.dataset(
            sink.committed_files(name),
            filesystem=fs,
            format="parquet",
            partitioning=ds.partitioning(pa.schema([("batch_id", pa.int64())]), flavor="hive"),
            partition_base_dir=f"{base}/{name}",
        ).to_table()
        for name in ("visits", "users")
    }
    got = (
        per_batch(read["visits"], VISIT_COLUMNS, 2),
        per_batch(read["users"], ["user", "visits"], 2),
    )
    assert got == reference(batches)
    listed = s3.list_objects_v2(Bucket=bucket, Prefix="out/_handoff/")
    assert listed.get("KeyCount", 0) == 0
