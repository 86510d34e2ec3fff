"""What a stream says about its input as a whole, through the command line: a copied backlog
(modification times reset) read out of order warns that most events went to late_events and
what to do; a batch whose lines are all invalid names the most common reason; the batch
lines and `status` count lines read, invalid lines and events in with the same words."""

from __future__ import annotations

import os
import re
import shutil

import pytest

from sessionize.cli import main as cli_main
from sessionize.engines.warnings import invalid_warning, late_warning
from tests.helpers import generate

# A line of another event contract: no `user_id` where the default mapping looks for it.
MISMAPPED = '{"uid": 5, "event_time": "2026-11-01T00:10:00Z", "page": {"current": "/"}}\n'
BATCH = re.compile(
    r"^batch (\d+): ([\d,]+) lines? read, ([\d,]+) invalid, ([\d,]+) events? in, .* "
    r"([\d,]+) late, "
)


def _n(text: str) -> int:
    return int(text.replace(",", ""))


@pytest.fixture(scope="module")
def copied_run(spark, tmp_path_factory):
    """Two generated hours copied so that the modification times run backwards (the newest
    file first), plus one file of mis-mapped lines arriving last; streamed one file per
    micro-batch by the CLI. Returns (stdout, the status text)."""
    root = tmp_path_factory.mktemp("copied")
    generated = generate(
        root / "generated",
        hours=2,
        users=60,
        events_per_hour=600,
        invalid_rate=0.0,
        duplicate_rate=0.0,
    )
    copy = root / "in"
    shutil.copytree(generated, copy)
    files = sorted(p for p in copy.rglob("*.json"))
    odd = copy / "event_date=2026-11-01" / "event_hour=00" / "zz-other-contract.json"
    odd.write_text(MISMAPPED)
    base = 1_800_000_000
    for i, path in enumerate([*reversed(files), odd]):  # later paths get newer times
        os.utime(path, (base + i, base + i))
    out_file = root / "stdout.txt"
    args = [
        "stream",
        "--input",
        str(copy),
        "--output",
        str(root / "out"),
        "--checkpoint",
        str(root / "chk"),
        "--partitions",
        "2",
        "--max-files-per-trigger",
        "1",
    ]
    stdout = _run_cli(args, out_file)
    status = _run_cli(["status", "--checkpoint", str(root / "chk")], root / "status.txt")
    return stdout, status


def _run_cli(args: list[str], to) -> str:
    """The CLI in this process (the tests' Spark session), its stdout kept in a file."""
    import contextlib

    with open(to, "w") as f, contextlib.redirect_stdout(f):
        cli_main(args)
    return to.read_text()


def test_a_copied_backlog_read_out_of_order_warns_once_per_batch_of_mostly_late_events(
    copied_run,
):
    stdout, _ = copied_run
    lines = stdout.splitlines()
    batches = {int(m[1]): m for line in lines if (m := BATCH.match(line))}
    mostly_late = {b for b, m in batches.items() if 2 * _n(m[5]) > _n(m[4])}
    assert mostly_late, stdout  # the backlog, read newest first, is mostly late
    warned = set()
    for i, line in enumerate(lines):
        if line.startswith("warning:") and "late" in line:
            batch = int(re.match(r"warning: batch (\d+) ", line)[1])
            assert lines[i - 1].startswith(f"batch {batch}: "), line  # right after its line
            assert "modification times" in line and "cp -a" in line, line
            assert "`sessionize batch`" in line, line
            warned.add(batch)
    assert warned == mostly_late, stdout


def test_a_batch_of_only_invalid_lines_names_the_most_common_reason(copied_run):
    stdout, _ = copied_run
    lines = stdout.splitlines()
    last = max(i for i, line in enumerate(lines) if BATCH.match(line))
    # The mis-mapped file arrives last: its batch reads one line, invalid (singular words).
    assert re.match(
        r"^batch \d+: 1 line read, 1 invalid, 0 events in, 0 sessions out, ", lines[last]
    ), lines[last]
    hints = [line for line in lines if line.startswith("warning: every line")]
    assert len(hints) == 1, stdout
    assert hints[0] == lines[last + 1]
    assert "'missing user_id' (1 line)" in hints[0] and "--user-field" in hints[0], hints[0]


def test_batch_lines_and_status_count_lines_invalid_and_events_alike(copied_run):
    stdout, status = copied_run
    batches = [m for line in stdout.splitlines() if (m := BATCH.match(line))]
    for m in batches:
        assert _n(m[2]) == _n(m[3]) + _n(m[4]), m[0]  # lines read = invalid + events in
    read = sum(_n(m[2]) for m in batches)
    invalid = sum(_n(m[3]) for m in batches)
    events = sum(_n(m[4]) for m in batches)
    totals = next(line for line in status.splitlines() if line.startswith("totals: "))
    assert totals.startswith(
        f"totals: {read:,} lines read, {invalid:,} invalid, {events:,} events in, "
    ), totals


@pytest.mark.parametrize(
    ("late", "total", "warns"),
    [(0, 10, False), (5, 10, False), (6, 10, True), (10, 10, True),
     # Mostly late, but a trickle of the job's events so far (under 1%): late arrivals.
     (10, 999, True), (10, 1_000, True), (10, 1_001, False), (10, 100_000, False)],
)  # fmt: skip
def test_the_late_warning_starts_above_half_of_the_batch_unless_a_trickle(late, total, warns):
    record = {
        "batch": {"events_in": 10, "late": late},
        "totals": {"events_in": total},
        "input": {"files": 1},
    }
    assert (late_warning("batch 1", record) is not None) == warns


def test_the_invalid_warning_needs_every_line_invalid_and_names_the_commonest_reason():
    record = {"batch": {"records": 5, "invalid": 5}}
    reasons = {"missing user_id": 3, "not a JSON object": 2}
    assert "'missing user_id' (3 lines)" in invalid_warning("batch 0", record, reasons)
    assert invalid_warning("batch 0", {"batch": {"records": 5, "invalid": 4}}, reasons) is None
    assert invalid_warning("batch 0", {"batch": {"records": 0, "invalid": 0}}, {}) is None


def test_the_invalid_warning_of_a_stateful_job_points_at_the_schema_not_the_mapping():
    record = {"batch": {"records": 2, "invalid": 2}}
    warning = invalid_warning("batch 0", record, {"amount: expected a number": 2}, "invalid")
    assert "2 in invalid;" in warning and "stateful.source" in warning
    assert "--user-field" not in warning and "'amount: expected a number' (2 lines)" in warning
