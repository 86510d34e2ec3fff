"""Through Spark Connect (services/spark-cluster.sh's server over the cluster; on another
line, services/lines/spark-connect.sh's server of that line): no SparkContext on the client,
and a stream's foreachBatch runs in a Python process of the server. `stream` and `batch`
with `--remote`, and the Python API on a Connect session, give what they give on local[2]."""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import UTC, datetime

import pyspark
import pytest

from sessionize import Sessionizer
from sessionize.commands.batch import BatchOptions, run_batch
from sessionize.commands.stream import StreamOptions, run_stream
from tests.api.test_api import _nested, _random_events
from tests.cluster.cluster import Cluster
from tests.helpers import OUTPUTS, assert_same_as_clean, generate, read_output, sessionize

# The cluster's two one-core workers run one application at a time: tests/cluster runs on
# one worker of the parallel part (tests/conftest.py, ONE_WORKER).
pytestmark = pytest.mark.skipif(
    pyspark.__version__.startswith("3.5."),
    reason="PySpark 3.5's package has no Connect server jar and nothing is downloaded "
    "here: Connect on 3.5 is not tested here",
)

# The input's hour, and two after it without files: partitions Spark runs no task for.
HOURS = ("2026-11-01T00", "2026-11-01T02")


@pytest.mark.parametrize("state", ["redis"], indirect=True)
def test_stream_and_batch_through_connect_equal_local(data, cluster: Cluster, spark, state):
    """The stream on a server state (Redis), the batch on files state."""
    root, inp = data
    run = root / "remote"
    streamed = sessionize(
        "stream",
        "--input",
        str(inp),
        "--output",
        str(run / "out"),
        "--checkpoint",
        str(run / "chk"),
        "--partitions",
        "3",
        "--max-files-per-trigger",
        "1",
        "--remote",
        cluster.remote,
        "--state",
        state(),
    )
    assert streamed.returncode == 0, streamed.stderr[-3000:]
    # The client reports the batches the server ran, one line each.
    assert [line.split(":")[0] for line in streamed.stdout.splitlines()] == [
        f"batch {i}" for i in range(4)
    ], streamed.stdout
    assert_same_as_clean(root, run)

    start, end = (datetime.strptime(h, "%Y-%m-%dT%H").replace(tzinfo=UTC) for h in HOURS)
    local = root / "batch-local"
    run_batch(
        BatchOptions(input=str(inp), output=str(local), start=start, end=end, partitions=3),
        spark,
        on_hour=lambda _: None,
    )
    remote = root / "batch-remote"
    done = sessionize(
        "batch",
        "--input",
        str(inp),
        "--output",
        str(remote),
        "--from",
        HOURS[0],
        "--to",
        HOURS[1],
        "--partitions",
        "3",
        "--remote",
        cluster.remote,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    # Piped, the CLI prints one plain line an hour and no progress bar (drawn in a
    # terminal: tests/commands/test_status.py).
    assert "left" not in done.stdout and done.stdout.count(" lines read, ") == 3, done.stdout
    for name in OUTPUTS:
        assert read_output(remote, name).equals(read_output(local, name)), name


def test_spark_managed_state_through_connect_equals_local(data, cluster: Cluster):
    """Spark's own state (RocksDB, transformWithState) through Connect: the rows of the
    local run (batch ids aside: this engine emits a session one batch later)."""
    root, inp = data
    run = root / "remote-rocksdb"
    streamed = sessionize(
        "stream",
        "--input",
        str(inp),
        "--output",
        str(run / "out"),
        "--checkpoint",
        str(run / "chk"),
        "--partitions",
        "3",
        "--max-files-per-trigger",
        "1",
        "--remote",
        cluster.remote,
        "--state",
        "spark-rocksdb",
    )
    assert streamed.returncode == 0, streamed.stderr[-3000:]
    for name in OUTPUTS:
        expected = read_output(root / "clean" / "out", name, with_batch=False)
        assert read_output(run / "out", name, with_batch=False).equals(expected), name
    assert read_output(run / "out", "sessions").num_rows > 0


def test_identity_and_its_users_step_through_connect_equal_local(cluster: Cluster, spark, tmp_path):
    """`--anonymous-field` through Connect: each batch's users step is a second Spark job
    that the server's foreachBatch runs (DataFrames only): the numbered sessions, `users`
    and `identities` of the local run."""
    from tests.engines.test_identity_operations import MAPPING, ROW_KEYS, rows

    inp = generate(
        tmp_path / "in",
        hours=1,
        users=60,
        events_per_hour=600,
        identity_data=True,
        invalid_rate=0.0,
        files_per_hour=2,
    )
    local = tmp_path / "local"
    run_stream(
        StreamOptions(
            input=str(inp),
            output=str(local / "out"),
            checkpoint=str(local / "chk"),
            partitions=2,
            max_files_per_trigger=1,
            mapping=MAPPING,
        ),
        spark,
        on_batch=lambda _: None,
    )
    run = tmp_path / "remote"
    streamed = sessionize(
        "stream",
        "--input", str(inp),
        "--output", str(run / "out"),
        "--checkpoint", str(run / "chk"),
        "--partitions", "2",
        "--max-files-per-trigger", "1",
        "--anonymous-field", "anonymous_id",
        "--user-type", "string",
        "--remote", cluster.remote,
    )  # fmt: skip
    assert streamed.returncode == 0, streamed.stderr[-3000:]
    lines = streamed.stdout.splitlines()
    assert [line.split(":")[0] for line in lines] == ["batch 0", "batch 1"], streamed.stdout
    for name in ROW_KEYS:
        want = read_output(local / "out", name)
        assert want.num_rows > 0, name
        assert rows(read_output(run / "out", name), name) == rows(want, name), name


# A process of its own: one Python process holds either a classic or a Connect session
# (pyspark.sql.functions builds the columns of the kind the process started).
_API_ON_CONNECT = """
import json, sys
from pyspark.sql import SparkSession
from sessionize import Sessionizer

spark = SparkSession.builder.remote(sys.argv[1]).getOrCreate()
lines = [(line,) for line in json.loads(sys.argv[2])]
result = Sessionizer(partitions=2).sessions(spark.createDataFrame(lines, "value string"))
table = result.sessions.toArrow()
print(json.dumps(table.to_pylist(), default=str))
"""


def test_sessions_on_a_connect_session_equal_local(cluster: Cluster, spark):
    events = [_nested(e) for e in _random_events(seed=5, users=5, n=60)]
    lines = [json.dumps(e, default=lambda t: t.isoformat()) for e in events]
    local = (
        Sessionizer(partitions=2)
        .sessions(spark.createDataFrame([(line,) for line in lines], "value string"))
        .sessions
    )
    done = subprocess.run(
        [sys.executable, "-c", _API_ON_CONNECT, cluster.remote, json.dumps(lines)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    got = json.loads(done.stdout.splitlines()[-1])
    expected = json.loads(json.dumps(local.toArrow().to_pylist(), default=str))
    key = lambda r: (r["user_id"], r["start_time"])  # noqa: E731
    assert sorted(got, key=key) == sorted(expected, key=key)
    assert len(got) > 5
