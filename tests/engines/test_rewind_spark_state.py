"""Rewinding a stream of the `spark` engine: Spark's own state versions go back with the logs,
and the rerun ends with the outputs of the uninterrupted run."""

from __future__ import annotations

import pytest

from sessionize.commands.history import batch_history, history_lines, open_checkpoint
from sessionize.commands.rewind import rewind
from sessionize.commands.stream import StreamOptions, run_stream
from sessionize.engines.spark_logs import spark_state_versions
from tests.helpers import OUTPUTS, generate, read_output


# spark-rocksdb: tests/commands/test_rewind.py (across a compacted file-source log).
@pytest.mark.parametrize("state", ["spark-hdfs"])
def test_spark_state_rewind_then_rerun_equals_the_uninterrupted_run(spark, state, tmp_path):
    inp = generate(
        tmp_path / "in", hours=1, users=60, events_per_hour=400, files_per_hour=2, late_rate=0.01
    )
    opts = StreamOptions(
        input=str(inp),
        output=str(tmp_path / "out"),
        checkpoint=str(tmp_path / "chk"),
        state=state,
        partitions=2,
        max_files_per_trigger=1,
    )
    records = run_stream(opts, spark, on_batch=lambda _: None)
    assert [r["version"] for r in records] == [0, 1, 2]
    whole = {n: read_output(tmp_path / "out", n) for n in OUTPUTS}
    assert whole["sessions"].num_rows > 0

    ck = open_checkpoint(opts.checkpoint)
    lines = history_lines(ck, batch_history(ck))
    assert [x.split()[1] for x in lines[:-1]] == ["0", "1", "2"], lines
    assert lines[-1].startswith("oldest restorable batch: 0 "), lines

    said: list[str] = []
    rewind(opts.checkpoint, 1, say=said.append)
    versions = spark_state_versions(opts.checkpoint)
    assert versions and all(v and v[-1] == 2 for v in versions.values()), versions
    assert not (tmp_path / "chk" / "sessionize-batches" / "2.json").exists()

    records = run_stream(opts, spark, on_batch=lambda _: None)
    assert [r["version"] for r in records] == [2]
    for name in OUTPUTS:
        assert read_output(tmp_path / "out", name).equals(whole[name]), name
