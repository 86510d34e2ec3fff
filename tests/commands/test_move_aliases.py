"""`sessionize maintain --move-output` loses nothing: a new place that is the output (or
inside it) through a symlink is refused before anything moves; a move copies, verifies,
records, then deletes, so a kill -9 at any step, or a copy that differs from its original,
leaves every file somewhere, and the same command run again completes the move.

The output is a real one (two stream batches, then compacted: batch files, compacted
files, views of hard links and relative symlinks); each test moves its own copy of it
(`cp -a` keeps the hard links and symlinks) and checks the moved tree against a listing
of the original written here (every path with its kind, link target or SHA-256).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import uuid
from pathlib import Path

import pytest

from sessionize.commands.maintain import maintain
from sessionize.commands.stream import StreamOptions, run_stream
from sessionize.errors import StateError
from tests.helpers import OUTPUTS, cli_env, generate, read_output, sessionize, start_cli, wait_for

LEASE = "_lease"


def tree(root: Path) -> dict[str, str]:
    """{relative path: "dir" | "link:TARGET" | sha256} of everything under `root` but the
    lease; a hard-linked file appears under each of its names."""
    found = {}
    for folder, dirs, files in os.walk(root):
        for name in dirs + files:
            path = os.path.join(folder, name)
            rel = os.path.relpath(path, root)
            if rel.split(os.sep)[0] == LEASE:
                continue
            if os.path.islink(path):
                found[rel] = "link:" + os.readlink(path)
            elif os.path.isdir(path):
                found[rel] = "dir"
            else:
                with open(path, "rb") as f:
                    found[rel] = hashlib.sha256(f.read()).hexdigest()
    return found


@pytest.fixture(scope="module")
def built(spark, tmp_path_factory) -> Path:
    """A stopped stream's checkpoint and compacted output under `root/{chk,out}`."""
    root = tmp_path_factory.mktemp("move-src")
    inp = generate(root / "in", hours=1, users=40, events_per_hour=400, files_per_hour=2)
    opts = StreamOptions(
        input=str(inp),
        output=str(root / "out"),
        checkpoint=str(root / "chk"),
        partitions=2,
        max_files_per_trigger=1,
    )
    run_stream(opts, spark, on_batch=lambda _: None)
    maintain(str(root / "out"), checkpoint=str(root / "chk"), compact=True, say=lambda _: None)
    assert os.path.islink(root / "out" / "sessions"), "compaction gives views (symlinks)"
    return root


@pytest.fixture
def job(built, tmp_path) -> Path:
    """This test's copy of the job: `tmp_path/{chk,out}`, the checkpoint bound to its `out`."""
    for name in ("chk", "out"):
        subprocess.run(["cp", "-a", str(built / name), str(tmp_path / name)], check=True)
    for record in ("sessionize.json", "sessionize-paths.json"):
        path = tmp_path / "chk" / record
        body = json.loads(path.read_text())
        path.write_text(json.dumps({**body, "output": str(tmp_path / "out")}))
    return tmp_path


def _move(job: Path, new: str, **env: str):
    return sessionize(
        "maintain",
        "--output",
        str(job / "out"),
        "--checkpoint",
        str(job / "chk"),
        "--move-output",
        new,
        env=cli_env(**env),
    )


def _one_line(done) -> str:
    assert done.returncode == 2, done.stdout + done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    return lines[0]


def _recorded_output(job: Path) -> str:
    return json.loads((job / "chk" / "sessionize.json").read_text())["output"]


def _assert_moved(job: Path, new: Path, before: dict[str, str], rows: dict) -> None:
    assert not (job / "out").exists()
    assert tree(new) == before
    assert _recorded_output(job) == str(new)
    for name in OUTPUTS:  # read through the moved views' relative symlinks
        assert read_output(new, name).equals(rows[name]), name


def test_a_new_place_inside_the_output_through_a_symlink_is_refused(job):
    """The report: `ln -s out alias; maintain --output out --move-output alias/archive`."""
    before = tree(job / "out")
    (job / "alias").symlink_to(job / "out")
    refusals = [
        (job / "alias" / "archive", "is inside --output"),
        (job / "alias", "is --output"),
        (job / "elsewhere" / ".." / "out" / "sub", "is inside --output"),
    ]
    for new, says in refusals:
        line = _one_line(_move(job, str(new)))
        assert says in line and str(job / "out") in line, line
        assert tree(job / "out") == before  # nothing moved, nothing deleted
        assert _recorded_output(job) == str(job / "out")
    assert not (job / "out" / "archive").exists() and not (job / "out" / "_moving.json").exists()


@pytest.mark.parametrize(
    "point", ["move-copying:3", "move-copied:0", "move-recorded:0", "move-removing:2"]
)
def test_a_move_killed_at_any_step_completes_when_run_again(spark, built, job, point):
    before = tree(job / "out")
    rows = {name: read_output(job / "out", name) for name in OUTPUTS}
    new = job / "moved" / "out"
    proc = start_cli(
        [
            "maintain",
            "--output",
            str(job / "out"),
            "--checkpoint",
            str(job / "chk"),
            "--move-output",
            str(new),
        ],
        cli_env(SESSIONIZE_PAUSE_AT=point),
    )
    wait_for(proc, "PAUSED")
    os.killpg(proc.pid, 9)
    proc.wait()
    for rel, kind in before.items():  # every file is in the old place or in the new one
        assert any(
            tree(place).get(rel) == kind for place in (job / "out", new) if place.exists()
        ), rel
    if point != "move-removing:2":  # a job started on the old place now is refused
        opts = StreamOptions(
            input=str(built / "in"),
            output=str(job / "out"),
            checkpoint=str(job / "chk"),
            partitions=2,
        )
        with pytest.raises(StateError, match="is being moved to .*complete it with"):
            run_stream(opts, spark, on_batch=lambda _: None)

    done = _move(job, str(new))
    assert done.returncode == 0, done.stderr
    _assert_moved(job, new, before, rows)


def test_a_move_to_another_filesystem_copies_keeps_hard_links_and_checks_every_byte(job):
    """Byte copies (here /dev/shm, a tmpfs): a copy altered before the check stops the move
    with nothing deleted; run again, it copies anew and completes."""
    shm = Path("/dev/shm")
    assert shm.is_dir() and os.stat(shm).st_dev != os.stat(job).st_dev, "needs /dev/shm (tmpfs)"
    new = shm / f"sessionize-test-move-{uuid.uuid4().hex[:8]}" / "out"
    try:
        before = tree(job / "out")
        rows = {name: read_output(job / "out", name) for name in OUTPUTS}
        resume = job / "resume"
        proc = start_cli(
            [
                "maintain",
                "--output",
                str(job / "out"),
                "--checkpoint",
                str(job / "chk"),
                "--move-output",
                str(new),
            ],
            cli_env(SESSIONIZE_PAUSE_AT="move-copied:0", SESSIONIZE_RESUME_FILE=str(resume)),
            merged=False,
        )
        wait_for(proc, "PAUSED")
        copied = next(p for p in sorted(new.rglob("*.parquet")) if not p.is_symlink())
        with open(copied, "ab") as f:
            f.write(b"x")  # the copy now differs from its original
        resume.touch()
        _, err = proc.communicate(timeout=120)
        assert proc.returncode == 2 and len(err.strip().splitlines()) == 1, err
        assert "is not a copy of" in err and "nothing more was deleted" in err, err
        kept = tree(job / "out")
        assert kept.pop("_moving.json") and kept == before  # and the intent: a job waits
        assert _recorded_output(job) == str(job / "out")

        done = _move(job, str(new))
        assert done.returncode == 0, done.stderr
        assert "copied and verified" in done.stdout, done.stdout
        _assert_moved(job, new, before, rows)
        view = os.path.realpath(new / "sessions")  # a view's file is its batch file, linked
        inodes = {os.stat(p).st_ino for p in new.rglob("*.parquet") if not p.is_symlink()}
        linked = [p for p in Path(view).rglob("*.parquet") if os.stat(p).st_nlink > 1]
        assert linked and all(os.stat(p).st_ino in inodes for p in linked)
    finally:
        shutil.rmtree(new.parent, ignore_errors=True)
