"""Every failure a user can meet ends in ONE line on stderr and exit code 2, through the
real command line: before Spark starts (flags, paths, backends, checkpoints) and inside it."""

from __future__ import annotations

import os
import re
import signal
import socket
from pathlib import Path

import pytest

from tests.helpers import cli_env, read_output, sessionize, start_cli, wait_for


def _hour(root: Path, *lines: str) -> Path:
    d = root / "in" / "event_date=2026-11-01" / "event_hour=00"
    d.mkdir(parents=True)
    (d / "a.json").write_text("".join(line + "\n" for line in lines))
    return root / "in"


def _stream(root: Path, **flags: str) -> list[str]:
    args = {
        "--input": str(root / "in"),
        "--output": str(root / "out"),
        "--checkpoint": str(root / "ck"),
    }
    args.update(flags)
    return ["stream", *(x for kv in args.items() for x in kv)]


def _garbled_checkpoint(root: Path) -> list[str]:
    _hour(root, "{}")
    (root / "ck").mkdir()
    (root / "ck" / "sessionize.json").write_bytes(b"\x00\xff not json")
    return _stream(root)


def _free_port() -> int:
    with socket.socket() as s:  # a port that was just free: nothing listens there
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _unanswered_master(root: Path) -> list[str]:
    _hour(root, "{}")
    return [*_stream(root), "--master", f"spark://127.0.0.1:{_free_port()}"]


def _unreachable_state(root: Path) -> list[str]:
    _hour(root, "{}")
    return [*_stream(root), "--state", "postgresql://sessionize@127.0.0.1:9/x"]


# name -> (arguments given the test's directory, a fragment of the one line)
CASES = {
    "unknown flag": (lambda root: ["stream", "--nope"], "No such option '--nope'"),
    "bad duration": (
        lambda root: [*_stream(root), "--max-future", "soon"],
        "'soon' is not a duration",
    ),
    "missing input directory": (lambda root: _stream(root), "is not a directory"),
    "lateness over a year": (
        lambda root: [*_stream(_hour(root, "{}").parent), "--lateness", "366d"],
        "--lateness must be at most 365d",
    ),
    "metrics address without a port": (
        lambda root: [*_stream(root), "--metrics-host", "0.0.0.0"],
        "--metrics-host goes with --metrics-port",
    ),
    "unreachable state backend": (_unreachable_state, "127.0.0.1:9"),
    "no master answers": (_unanswered_master, "no Spark master answers at 127.0.0.1:"),
    "unreadable checkpoint": (_garbled_checkpoint, "sessionize.json is not readable"),
    # An output or checkpoint URI that no filesystem we write reads, not a local `./foo:/`.
    "output scheme we do not write": (
        lambda root: [*_stream(_hour(root, "{}").parent, **{"--output": "foo://bucket/x"})],
        "outputs are not written to foo:// URIs; give a local path, file://, s3://",
    ),
    "checkpoint scheme no filesystem reads": (
        lambda root: [*_stream(_hour(root, "{}").parent, **{"--checkpoint": "foo://b/chk"})],
        "--checkpoint foo://b/chk: no filesystem reads foo:// URIs",
    ),
    # --input-format reaches the command (test_api.py runs Parquet input in-process).
    "parquet from a broker": (
        lambda root: [
            *_stream(root, **{"--input": "kafka://127.0.0.1:9/t"}),
            "--input-format",
            "parquet",
        ],
        "--input-format parquet reads a file tree",
    ),
    # Iceberg tables are kept by Iceberg's own tools: the line names them.
    "maintain on an Iceberg output": (
        lambda root: [
            "maintain",
            "--output",
            f"iceberg://web?uri=sqlite:///{root}/catalog.db&warehouse=file://{root}/wh",
        ],
        "sessionize maintain does not compact or vacuum Iceberg tables; maintain web.* with "
        "Iceberg's own tools (expire snapshots, rewrite data files: pyiceberg's "
        "table.maintenance.expire_snapshots()",
    ),
    # Kafka's topics are kept by their cleanup policy: nothing for maintain to do.
    "maintain on a Kafka output": (
        lambda root: ["maintain", "--output", f"kafka://127.0.0.1:9/web?staging={root}/st"],
        "--output kafka://127.0.0.1:9/web: Kafka outputs leave nothing to clean (a publish "
        "drops its staged rows); retention and compaction are the topics' own",
    ),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_failure_before_spark_is_one_line(tmp_path, name):
    make_args, fragment = CASES[name]
    done = sessionize(*make_args(tmp_path), timeout=120)
    _assert_one_line(done, fragment)
    assert not Path("foo:").exists()  # a URI's scheme never becomes a local directory


def test_our_failure_inside_a_spark_task_is_its_own_line_without_a_trace(tmp_path):
    _hour(tmp_path, "not json: goes to invalid_events")
    # The tasks stage the invalid line under a path that is a file: the sink's error, raised
    # in a task, reaches the command line as written, not as Spark's failure.
    (tmp_path / "out" / "_staging").mkdir(parents=True)
    (tmp_path / "out" / "_staging" / "invalid_events").write_text("a file, not a directory")
    done = sessionize(*_stream(tmp_path), env=cli_env(), timeout=600)
    line = _assert_one_line(done, "staging batch 0 of invalid_events failed")
    assert "Not a directory" in line and "full trace" not in line, line


def test_an_unexpected_failure_inside_spark_is_one_line_naming_a_log_with_the_trace(tmp_path):
    event = '{"user_id": 7, "event_time": "2026-11-01T00:10:00Z", "page": {"current": "a"}}'
    _hour(tmp_path, event)
    first = sessionize(*_stream(tmp_path), env=cli_env(), timeout=600)
    assert first.returncode == 0, first.stderr[-3000:]
    # The state's data files are overwritten with bytes no Parquet reader takes: the next
    # batch's tasks fail inside Spark on something no check of ours names.
    damaged = list((tmp_path / "ck" / "state").rglob("*.parquet"))
    assert damaged
    for f in damaged:
        f.write_bytes(b"not parquet")
    later = tmp_path / "in" / "event_date=2026-11-01" / "event_hour=01"
    later.mkdir()
    (later / "b.json").write_text(event.replace("00:10", "01:10") + "\n")
    done = sessionize(*_stream(tmp_path), env=cli_env(), timeout=600)
    line = _assert_one_line(done, "fix the cause")
    log = re.search(r"full trace in (\S+\.log)", line)
    assert log, line
    assert "Traceback (most recent call last)" in Path(log.group(1)).read_text()
    Path(log.group(1)).unlink()


def _assert_one_line(done, fragment: str) -> str:
    assert done.returncode == 2, (done.returncode, done.stderr[-3000:])
    assert done.stderr.count("\n") == 1, done.stderr[-3000:]
    assert done.stderr.startswith("sessionize: error: "), done.stderr
    assert fragment in done.stderr, done.stderr
    return done.stderr.strip()


def test_ctrl_c_prints_one_line_and_the_stream_resumes(tmp_path):
    """Ctrl-C in a terminal sends SIGINT to the whole process group (the CLI and Spark's
    JVM): the user sees the one line, nothing of py4j's shutdown, and a rerun goes on."""
    event = '{{"user_id": 7, "event_time": "2026-11-01T00:{:02d}:00Z", "page": {{"current": "a"}}}}'
    inp = _hour(tmp_path, event.format(10))
    args = [*_stream(tmp_path), "--trigger", "processing-time=1s"]
    proc = start_cli(args, cli_env(), merged=False)
    wait_for(proc, "batch 0:")
    os.killpg(proc.pid, signal.SIGINT)
    _, stderr = proc.communicate(timeout=300)
    # Click's blank line first: it ends the terminal's `^C` echo.
    assert stderr == "\nsessionize: interrupted; run the same command again to resume\n", stderr
    assert proc.returncode == 130
    later = inp / "event_date=2026-11-01" / "event_hour=01"
    later.mkdir()
    (later / "b.json").write_text(event.format(20).replace("T00:", "T01:") + "\n")
    done = sessionize(*_stream(tmp_path), env=cli_env(), timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    # Batch 0 again if the interrupt came before Spark recorded it, then the new file.
    last = done.stdout.splitlines()[-1]
    assert last.startswith("batch 1: 1 line read, 0 invalid, 1 event in, 1 session out"), (
        done.stdout
    )
    assert read_output(tmp_path / "out", "sessions").num_rows == 1  # 00:10, closed once


def test_demo_refuses_a_workdir_it_did_not_write_and_deletes_nothing(tmp_path):
    """`sessionize demo --workdir .` in a project directory deleted it all."""
    (tmp_path / "notes.txt").write_text("keep me")
    (tmp_path / "output").mkdir()  # a name a demo writes, beside one it does not
    done = sessionize("demo", "--workdir", str(tmp_path), timeout=120)
    _assert_one_line(done, f"--workdir {tmp_path} holds notes.txt, which a demo did not write")
    assert (tmp_path / "notes.txt").read_text() == "keep me" and (tmp_path / "output").is_dir()
