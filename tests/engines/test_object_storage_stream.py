"""A stream on object storage: Delta tables, and Parquet with its commit files, on S3 with the
`files` state on S3 (Spark's checkpoint stays local), exactly once through a kill -9 between
the state commit and the publish, the S3 server stopped before a publish (Delta) or while
the tasks commit state (Parquet), and a kill -9 between the publish and Spark's commit; and
the local Parquet outputs as Spark, pyarrow, DuckDB and Polars see them while a stream is
killed and restarted."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pyarrow as pa
import pytest

from sessionize.commands.stream import StreamOptions, run_stream
from sessionize.engines import runner
from sessionize.errors import SinkError
from sessionize.fs import child
from tests.helpers import (
    OUTPUTS,
    SORT_KEYS,
    cli_env,
    generate,
    read_output,
    run_until_killed,
    start_cli,
    wait_for,
)
from tests.readers import polling_sessions
from tests.s3_fixtures import _script, s3_stopped
from tests.sinks.conftest import read_rows

PARTITIONS = 3


def _opts(inp: Path, output: str, checkpoint: Path, **more) -> StreamOptions:
    return StreamOptions(
        input=str(inp),
        output=output,
        checkpoint=str(checkpoint),
        partitions=PARTITIONS,
        max_files_per_trigger=1,
        **more,
    )


def _cli(opts: StreamOptions) -> list[str]:
    return [
        "stream",
        "--input",
        opts.input,
        "--output",
        opts.output,
        "--checkpoint",
        opts.checkpoint,
        "--state",
        opts.state,
        "--output-format",
        opts.output_format,
        "--partitions",
        str(PARTITIONS),
        "--max-files-per-trigger",
        "1",
    ]


@pytest.fixture(scope="module")
def clean(spark, tmp_path_factory) -> tuple[Path, Path]:
    """A small input (3 micro-batches: 2 files, then the late events' file) and its
    uninterrupted local Parquet run."""
    root = tmp_path_factory.mktemp("objstream")
    inp = generate(
        root / "in",
        hours=1,
        users=60,
        events_per_hour=600,
        files_per_hour=2,
        invalid_rate=0.01,
        late_rate=0.01,
    )
    run_stream(_opts(inp, str(root / "clean"), root / "clean-chk"), spark, on_batch=print)
    return inp, root / "clean"


def _canonical(t: pa.Table, schema: pa.Schema, name: str) -> pa.Table:
    t = t.select(schema.names).cast(schema)
    return t.sort_by([(k, "ascending") for k in ["batch_id", *SORT_KEYS[name]]])


def _s3_down_before_publish(opts: StreamOptions, spark, monkeypatch, tmp_path: Path) -> None:
    """The S3 server stops before batch 1 is published: the driver stops with one line."""
    real = runner.pause_point

    def stop_s3(name: str, version: int) -> None:
        if (name, version) == ("before-publish", 1):
            _script("stop")
        real(name, version)

    monkeypatch.setattr(runner, "pause_point", stop_s3)
    try:
        with pytest.raises(SinkError) as down:
            run_stream(opts, spark, on_batch=print)
    finally:
        _script("start")
        monkeypatch.setattr(runner, "pause_point", real)
    line = str(down.value)
    assert "\n" not in line and "publishing batch 1" in line and "reachable" in line, line


def _s3_down_in_state_commit(opts: StreamOptions, spark, monkeypatch, tmp_path: Path) -> None:
    """The S3 server stops while batch 1's tasks are about to commit their `files` state on
    S3: the error raised in a task ends the command with one line naming the state store."""
    resume = tmp_path / "resume"
    env = cli_env(SESSIONIZE_PAUSE_AT="before-state-commit:1", SESSIONIZE_RESUME_FILE=str(resume))
    proc = start_cli(_cli(opts), env)
    wait_for(proc, "PAUSED before-state-commit 1")
    with s3_stopped():
        resume.touch()
        code, rest = proc.wait(timeout=600), proc.stdout.read()
    errors = [x for x in rest.splitlines() if x.startswith("sessionize: error: ")]
    assert code == 2 and len(errors) == 1 and "Traceback" not in rest, rest[-3000:]
    assert "state store files:s3://" in errors[0] and "reachable" in errors[0], errors[0]


# Each format meets S3 going down at one of the two places it matters (the sink tests stop
# it in the middle of a publish for both formats).
OUTAGES = {"delta": _s3_down_before_publish, "parquet": _s3_down_in_state_commit}


@pytest.mark.serial  # stops the shared S3 server
@pytest.mark.parametrize("output_format", sorted(OUTAGES))
def test_outputs_and_state_on_s3_exactly_once_through_kill_9_and_an_s3_outage(
    clean, bucket_uri, spark, tmp_path, monkeypatch, output_format
):
    inp, reference = clean
    out = child(bucket_uri, "out")
    opts = _opts(
        inp,
        out,
        tmp_path / "chk",
        state=f"files:{child(bucket_uri, 'state')}",
        output_format=output_format,
    )
    # Killed with batch 0's state committed on S3 and its outputs not published.
    env = cli_env(SESSIONIZE_PAUSE_AT="after-state-commit:0")
    run_until_killed(_cli(opts), "PAUSED after-state-commit 0", env)
    # The restart re-executes batch 0; S3 goes down in batch 1.
    OUTAGES[output_format](opts, spark, monkeypatch, tmp_path)
    # Killed with batch 1 published and not yet committed: the restart publishes it again.
    env = cli_env(SESSIONIZE_PAUSE_AT="after-publish:1")
    run_until_killed(_cli(opts), "PAUSED after-publish 1", env)
    run_stream(opts, spark, on_batch=print)  # re-executes batch 1, goes on to the end
    assert not (tmp_path / "s3:").exists() and not Path("s3:").exists()
    _assert_same(reference, f"{output_format}-s3", out)


def _assert_same(reference: Path, kind: str, out: str) -> None:
    for name in OUTPUTS:
        expected = read_output(reference, name)
        got = read_rows(kind, out, name)
        assert got.num_rows == expected.num_rows, name
        if expected.num_rows:
            assert _canonical(got, expected.schema, name).equals(
                _canonical(expected, expected.schema, name)
            ), name


def test_readers_polling_local_parquet_through_a_kill_9_restart(clean, spark, tmp_path):
    """Every read while batches are published, a driver is killed and a new one re-executes
    its batch: no error, no row twice, each batch whole (as many rows as the clean run's)."""
    inp, reference = clean
    whole = Counter(read_output(reference, "sessions")["batch_id"].to_pylist())
    with polling_sessions(tmp_path / "out" / "sessions", whole, spark=spark) as polled:
        opts = _opts(inp, str(tmp_path / "out"), tmp_path / "chk")
        env = cli_env(SESSIONIZE_PAUSE_AT="before-publish:1")
        run_until_killed(_cli(opts), "PAUSED before-publish 1", env)
        run_stream(opts, spark, on_batch=print)
    polled.assert_clean()
    assert read_output(tmp_path / "out", "sessions").equals(read_output(reference, "sessions"))
