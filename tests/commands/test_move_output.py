"""A checkpoint writes to one output: another `--output` is refused in one line that says
how to move the outputs, and `sessionize maintain --move-output` moves them so that a
later rewind retires the rows in their new place (nothing doubled, nothing lost)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from sessionize.commands.rewind import rewind
from sessionize.commands.stream import StreamOptions, run_stream
from sessionize.errors import IncompatibleCheckpoint
from tests.helpers import OUTPUTS, generate, read_output, sessionize


def _one_line(done) -> str:
    assert done.returncode == 2, done.stdout + done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    return lines[0]


def test_another_output_is_refused_and_a_moved_output_rewinds_in_its_new_place(spark, tmp_path):
    inp = generate(tmp_path / "in", hours=1, users=60, events_per_hour=600, files_per_hour=3)
    chk, old, new = tmp_path / "chk", tmp_path / "old", tmp_path / "out"
    opts = StreamOptions(
        input=str(inp),
        output=str(old),
        checkpoint=str(chk),
        partitions=3,
        max_files_per_trigger=1,
    )
    run_stream(opts, spark, on_batch=lambda _: None)
    first = {name: read_output(old, name) for name in OUTPUTS}  # one batch per file
    assert set(first["page_views"]["batch_id"].to_pylist()) == {0, 1, 2}

    other = tmp_path / "other"
    refused = sessionize(
        "stream", "--input", str(inp), "--output", str(other), "--checkpoint", str(chk)
    )
    line = _one_line(refused)
    assert f"--output {old} (this run: {other})" in line, line
    assert f"maintain --output {old} --checkpoint {chk} --move-output {other}" in line, line
    assert not other.exists()

    moved = sessionize(
        "maintain", "--output", f"{old}/", "--checkpoint", str(chk), "--move-output", str(new)
    )
    assert moved.returncode == 0, moved.stderr
    assert not old.exists() and (new / "sessions").is_dir()
    with pytest.raises(IncompatibleCheckpoint, match=f"--output {new} \\(this run: {old}\\)"):
        run_stream(opts, spark, on_batch=lambda _: None)  # the old place is another output

    rewind(str(chk), 0, say=lambda _: None)
    for name in OUTPUTS:  # the rows of batches after 0 are retired in the new place
        kept = read_output(new, name)
        assert kept.num_rows == 0 or set(kept["batch_id"].to_pylist()) == {0}, name
    assert read_output(new, "page_views").num_rows > 0  # batch 0 stays
    # The same place spelled another way (file://, a trailing slash) is accepted; the
    # batches recomputed there are those of the first run, once.
    run_stream(replace(opts, output=f"file://{new}/"), spark, on_batch=lambda _: None)
    for name in OUTPUTS:
        assert read_output(new, name).equals(first[name]), name
