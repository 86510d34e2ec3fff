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
    for venv in (".venv", ".venv-spark3.5"):
        bin_ = tmp_path / venv / "bin"
        bin_.mkdir(parents=True)
        os.symlink(sys.executable, bin_ / "python")
        # pip logs its venv and arguments; `sessionize demo` says it ran.
        (bin_ / "pip").write_text(f'#!/bin/sh\necho "{venv} $*" >> {tmp_path}/pip.log\n')
        (bin_ / "sessionize").write_text(f"#!/bin/sh\necho demo ran in {venv}\n")
        for f in ("pip", "sessionize"):
            (bin_ / f).chmod(0o755)
    return tmp_path


def _dev(clone: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHON": sys.executable}
    return subprocess.run(
        ["bash", str(clone / "dev"), *args], capture_output=True, text=True, env=env, timeout=60
    )


def _installs(clone: Path, venv: str = ".venv") -> list[str]:
    """What pip installed editable in `venv`, pip's own upgrade left out."""
    log = clone / "pip.log"
    lines = log.read_text().splitlines() if log.exists() else []
    return [
        line.split()[-1]
        for line in lines
        if line.startswith(f"{venv} ") and "--upgrade pip" not in line
    ]


def _pins(clone: Path, venv: str) -> list[str]:
    """The PySpark each install into `venv` asked for."""
    lines = (clone / "pip.log").read_text().splitlines()
    return [
        word
        for line in lines
        if line.startswith(f"{venv} ")
        for word in line.split()
        if word.startswith("pyspark==")
    ]


def test_demo_installs_the_package_alone_and_says_so(clone):
    done = _dev(clone, "demo")
    assert done.returncode == 0, done.stderr
    assert done.stdout == "demo ran in .venv\n"
    assert _installs(clone) == [".[spark]"]
    assert _pins(clone, ".venv") == ["pyspark==4.3.0"]
    assert "-q" not in (clone / "pip.log").read_text().splitlines()[-1]  # pip shows progress
    assert "dev: installing sessionize" in done.stderr and "dev: installed" in done.stderr
    assert _dev(clone, "demo").stderr == ""  # installed: nothing to do, nothing said
    assert _installs(clone) == [".[spark]"]


def test_setup_for_the_tests_after_the_demo_adds_the_test_extras(clone):
    _dev(clone, "demo")
    assert _dev(clone, "setup", "--dev").returncode == 0
    assert _installs(clone) == [".[spark]", ".[dev]"]
    _dev(clone, "demo")  # the test extras serve the demo too
    _dev(clone, "setup", "--dev")
    assert _installs(clone) == [".[spark]", ".[dev]"]


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


def test_another_spark_line_installs_its_pin_in_its_own_venv(clone):
    assert _dev(clone, "setup", "--dev", "--spark", "3.5").returncode == 0
    assert _installs(clone, ".venv-spark3.5") == [".[dev]"]
    assert _pins(clone, ".venv-spark3.5") == ["pyspark==3.5.9"]
    assert _installs(clone) == []  # the default line's venv is left alone
    _dev(clone, "setup", "--dev", "--spark", "3.5")
    assert _installs(clone, ".venv-spark3.5") == [".[dev]"]  # installed: nothing to do
    done = _dev(clone, "demo", "--spark", "3.5")
    assert done.stdout == "demo ran in .venv-spark3.5\n"


def test_a_changed_pin_reinstalls(clone):
    _dev(clone, "setup", "--dev")
    stamp = clone / ".venv" / ".sessionize-installed"
    stamp.write_text("dev\npyspark==4.2.1\n")  # set up when the default was another pin
    _dev(clone, "setup", "--dev")
    assert _pins(clone, ".venv") == ["pyspark==4.3.0", "pyspark==4.3.0"]


def test_an_unknown_line_is_one_line():
    done = subprocess.run(
        ["bash", str(ROOT / "dev"), "setup", "--spark", "3.4"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert done.stderr == "dev: --spark 3.4: give one of 3.5, 4.0, 4.1, 4.2, 4.3\n"


@pytest.fixture
def suite(clone):
    """`clone` set up for `./dev test` (test extras installed, current pin) with services
    that start at once and tools that log their arguments to `runs.log`; the pytest run
    whose arguments contain `$FAIL_ON` (when set) fails."""
    stamp = clone / ".venv" / ".sessionize-installed"
    stamp.write_text("dev\npyspark==4.3.0\n")
    os.utime(clone / "pyproject.toml", (1_000_000, 1_000_000))  # older than the install
    (clone / "services").mkdir()
    (clone / "services" / "start.sh").write_text("true\n")
    (clone / ".services").mkdir()
    (clone / ".services" / "env.sh").write_text("")
    bin_ = clone / ".venv" / "bin"
    for tool in ("ruff", "lint-imports", "mypy", "sessionize", "pytest"):
        (bin_ / tool).write_text(
            f'#!/bin/sh\necho "{tool} $*" >> {clone}/runs.log\n'
            'case "$*" in *"$FAIL_ON"*) [ -n "$FAIL_ON" ] && exit 1 ;; esac\nexit 0\n'
        )
        (bin_ / tool).chmod(0o755)
    return clone


def _test_run(clone: Path, *args: str, fail_on: str = "") -> tuple[int, list[str]]:
    env = {**os.environ, "PYTHON": sys.executable, "JAVA_HOME": "/nowhere", "FAIL_ON": fail_on}
    env.pop("SESSIONIZE_TEST_WORKERS", None)
    done = subprocess.run(
        ["bash", str(clone / "dev"), "test", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    runs = (clone / "runs.log").read_text().splitlines()
    return done.returncode, [r for r in runs if r.startswith("pytest")]


PARALLEL = "pytest -n 3 --dist loadfile -m not serial --durations=50"
SERIAL = "pytest -m serial --durations=25"


def test_the_whole_suite_runs_its_parallel_part_then_its_serial_part(suite):
    code, runs = _test_run(suite)
    assert (code, runs) == (0, [PARALLEL, SERIAL])


@pytest.mark.parametrize("failing", ["not serial", "-m serial"])
def test_a_failure_in_either_part_fails_the_suite_and_the_other_part_still_runs(suite, failing):
    code, runs = _test_run(suite, fail_on=failing)
    assert (code, runs) == (1, [PARALLEL, SERIAL])


def test_pytest_arguments_make_one_plain_pytest_run(suite):
    code, runs = _test_run(suite, "tests/logic", "-x", fail_on="tests/logic")
    assert (code, runs) == (1, ["pytest tests/logic -x"])
