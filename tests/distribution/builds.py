"""The package as users get it: `python -m build` (an sdist, then the wheel built from
it), installed into a venv of its own. Shared by the wheel test and the spark-submit test."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# The PySpark of the oldest supported line, as a platform (EMR 7, Databricks' 3.5 LTS) has it.
PLATFORM_PYSPARK = "pyspark==3.5.9"


def run(*args: str | Path, check: bool = True, **kw) -> subprocess.CompletedProcess:
    """Run a command to completion; with `check`, a failure shows what it printed."""
    done = subprocess.run([str(a) for a in args], capture_output=True, text=True, **kw)
    if check:
        assert done.returncode == 0, f"{args}: {done.stdout[-2000:]}\n{done.stderr[-4000:]}"
    return done


def build(out: Path) -> Path:
    """The sdist and the wheel of this checkout under `out`; returns the wheel."""
    run(sys.executable, "-m", "build", "--outdir", out, ROOT)
    (sdist,) = out.glob("sessionize-*.tar.gz")
    assert sdist.stat().st_size > 0
    (wheel,) = out.glob("sessionize-*.whl")
    return wheel


def venv(path: Path) -> Path:
    """A new venv with the pip of this Python; returns its bin directory."""
    run(sys.executable, "-m", "venv", path)
    return path / "bin"


def pyspark_version(bin_: Path) -> str:
    return run(bin_ / "python", "-c", "import pyspark; print(pyspark.__version__)").stdout.strip()
