"""`./dev`: the demo installs the package alone, the tests its test extras too, each step
says what it does, and the stamp knows which of the two a venv holds. Run on a copy of the
script whose venv has a pip that records its arguments instead of installing."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def clone(tmp_path):
    shutil.copy(ROOT / "dev", tmp_path / "dev")
    (tmp_path / "pyproject.toml").write_text("[project]\nname = 'x'\n")
    bin_ = tmp_path / ".venv" / "bin"
    bin_.mkdir(parents=True)
    os.symlink(sys.executable, bin_ / "python")
    # pip logs its arguments; `sessionize demo` says it ran.
    (bin_ / "pip").write_text(f'#!/bin/sh\necho "$*" >> {tmp_path}/pip.log\n')
    (bin_ / "sessionize").write_text("#!/bin/sh\necho demo ran\n")
    for f in ("pip", "sessionize"):
        (bin_ / f).chmod(0o755)
    return tmp_path


def _dev(clone: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHON": sys.executable}
    return subprocess.run(["bash", str(clone / "dev"), *args], capture_output=True, text=True,
                          env=env, timeout=60)  # fmt: skip


def _installs(clone: Path) -> list[str]:
    """The install commands pip got, pip's own upgrade left out."""
    log = clone / "pip.log"
    lines = log.read_text().splitlines() if log.exists() else []
    return [line.split()[-1] for line in lines if "--upgrade pip" not in line]


def test_demo_installs_the_package_alone_and_says_so(clone):
    done = _dev(clone, "demo")
    assert done.returncode == 0, done.stderr
    assert done.stdout == "demo ran\n"
    assert _installs(clone) == ["."]
    assert "-q" not in (clone / "pip.log").read_text().splitlines()[-1]  # pip shows progress
    assert "dev: installing sessionize" in done.stderr and "dev: installed" in done.stderr
    assert _dev(clone, "demo").stderr == ""  # installed: nothing to do, nothing said
    assert _installs(clone) == ["."]


def test_setup_for_the_tests_after_the_demo_adds_the_test_extras(clone):
    _dev(clone, "demo")
    assert _dev(clone, "setup", "--dev").returncode == 0
    assert _installs(clone) == [".", ".[dev]"]
    _dev(clone, "demo")  # the test extras serve the demo too
    _dev(clone, "setup", "--dev")
    assert _installs(clone) == [".", ".[dev]"]


def test_changed_dependencies_reinstall_and_keep_the_test_extras(clone):
    _dev(clone, "setup", "--dev")
    stamp = clone / ".venv" / ".sessionize-installed"
    os.utime(stamp, (1_000_000, 1_000_000))  # pyproject.toml is newer than the install
    _dev(clone, "demo")
    assert _installs(clone) == [".[dev]", ".[dev]"]


def test_an_empty_stamp_from_before_means_the_test_extras_are_there(clone):
    (clone / ".venv" / ".sessionize-installed").write_text("")
    os.utime(clone / "pyproject.toml", (1_000_000, 1_000_000))
    _dev(clone, "setup", "--dev")
    _dev(clone, "demo")
    assert _installs(clone) == []
