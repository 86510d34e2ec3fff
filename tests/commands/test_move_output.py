"""A checkpoint writes to one output: another `--output` is refused in one line that says
how to move the outputs, and `sessionize maintain --move-output` moves them so that a
later rewind retires the rows in their new place (nothing doubled, nothing lost)."""

from __future__ import annotations

from dataclasses import replace

from sessionize.commands.stream import StreamOptions, run_stream
from tests.helpers import OUTPUTS, assert_same_as_clean, generate, read_output, sessionize


def _one_line(done) -> str:
    assert done.returncode == 2, done.stdout + done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    return lines[0]


def test_another_output_is_refused_and_a_moved_output_rewinds_in_its_new_place(
    spark, tmp_path
):
    inp = generate(tmp_path / "in", hours=1, users=60, events_per_hour=600, files_per_hour=3)
    clean = tmp_path / "clean"
    opts = StreamOptions(
        input=str(inp), output=str(clean / "out"), checkpoint=str(clean / "chk"),
        partitions=3, max_files_per_trigger=1,
    )  # fmt: skip
    run_stream(opts, spark, on_batch=lambda _: None)
    run = tmp_path / "run"
    chk, old, new = run / "chk", run / "old", run / "out"
    opts = replace(opts, output=str(old), checkpoint=str(chk))
    run_stream(opts, spark, on_batch=lambda _: None)
    batches = set(read_output(old, "page_views")["batch_id"].to_pylist())
    assert len(batches) >= 3

    other = run / "other"
    refused = sessionize(
        "stream", "--input", str(inp), "--output", str(other), "--checkpoint", str(chk),
        "--partitions", "3",
    )  # fmt: skip
    line = _one_line(refused)
    assert f"--output {old} (this run: {other})" in line, line
    assert f"maintain --output {old} --checkpoint {chk} --move-output {other}" in line, line
    assert not other.exists()

    moved = sessionize(
        "maintain", "--output", f"{old}/", "--checkpoint", str(chk), "--move-output", str(new)
    )
    assert moved.returncode == 0, moved.stderr
    assert not old.exists() and (new / "sessions").is_dir()
    back = sessionize(
        "stream", "--input", str(inp), "--output", str(old), "--checkpoint", str(chk)
    )  # the old place is another output now
    assert f"--output {new} (this run: {old})" in _one_line(back)

    rewound = sessionize("rewind", "--checkpoint", str(chk), "--to-batch", "0")
    assert rewound.returncode == 0, rewound.stderr
    for name in OUTPUTS:  # the rows of batches after 0 are retired in the new place
        kept = read_output(new, name)
        assert kept.num_rows == 0 or set(kept["batch_id"].to_pylist()) == {0}, name
    assert read_output(new, "page_views").num_rows > 0  # batch 0 stays
    # The same place spelled another way (file://, a trailing slash) is accepted.
    run_stream(replace(opts, output=f"file://{new}/"), spark, on_batch=lambda _: None)
    assert_same_as_clean(tmp_path, run)
