"""The examples run as modules: over their sample, and over micro-batch files."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from examples import alerts, dedup, running_totals
from tests.helpers import cli_env

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("module", [running_totals, dedup, alerts])
def test_each_example_runs_over_its_sample(module, monkeypatch, capsys):
    monkeypatch.setattr(sys, "argv", [module.__name__])
    module.main()
    assert "row(s)" in capsys.readouterr().out


def test_running_totals_reads_one_micro_batch_per_file(tmp_path, monkeypatch, capsys):
    files = []
    for n, batch in enumerate([[(1, 2.0), (1, 3.0)], [(1, 5.0), (7, 1.0)]]):
        path = tmp_path / f"{n}.jsonl"
        path.write_text(
            "".join(json.dumps({"customer_id": c, "amount": a}) + "\n" for c, a in batch)
        )
        files.append(str(path))
    monkeypatch.setattr(sys, "argv", ["running_totals", *files])
    running_totals.main()
    out = capsys.readouterr().out
    assert "{'customer_id': 1, 'orders': 2, 'total': 5.0}" in out
    assert "{'customer_id': 1, 'orders': 3, 'total': 10.0}" in out
    assert "{'customer_id': 7, 'orders': 1, 'total': 1.0}" in out


def test_an_example_on_spark_fails_in_one_line(tmp_path):
    """A failure after Spark started (here an unknown state store) is one line on stderr,
    not preceded by what Spark's JVM prints as it starts."""
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "0.jsonl").write_text('{"customer_id": 1, "amount": 2.0}\n')
    args = [
        sys.executable,
        "-m",
        "examples.running_totals",
        "--input",
        str(tmp_path / "in"),
        "--output",
        str(tmp_path / "out"),
        "--checkpoint",
        str(tmp_path / "chk"),
        "--state",
        "nosuch://x",
    ]
    done = subprocess.run(
        args, cwd=ROOT, capture_output=True, text=True, env=cli_env(), timeout=300
    )
    assert done.returncode == 2, done.stderr
    assert done.stderr.splitlines() == [
        "sessionize: error: unknown state store scheme 'nosuch:'; use one of dynamodb, file, "
        "files, postgres, postgresql, redis, rediss"
    ]
