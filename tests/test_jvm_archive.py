"""The driver JVM's class-data archive: `sessionize jvm-archive` records it, every session
sessionize starts maps it, and one the JVM cannot use is left aside without a word."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path

from tests.helpers import cli_env, sessionize

# What the driver JVM maps, as the JVM itself reports it (jcmd VM.info).
PROBE = textwrap.dedent(
    """
    import json, re, subprocess, sys
    from sessionize.spark_session import get_spark
    spark = get_spark("archive-probe", master="local[1]", conf=json.loads(sys.argv[1]))
    pid = spark.sparkContext._jvm.java.lang.ProcessHandle.current().pid()
    info = subprocess.run(["jcmd", str(pid), "VM.info"], capture_output=True, text=True).stdout
    mapped = re.search(r"CDS archive\\(s\\) mapped at: .*?, size (\\d+)", info)
    print(json.dumps({"mapped": int(mapped.group(1)) if mapped else 0,
                      "count": spark.range(3).count()}))
    spark.stop()
    """
)


def _probe(tmp_path: Path, cache: Path, conf: dict | None = None) -> tuple[dict, str]:
    script = tmp_path / "probe.py"
    script.write_text(PROBE)
    env = {**os.environ, "SESSIONIZE_JVM_CACHE": str(cache), "PYSPARK_PYTHON": sys.executable}
    out = subprocess.run([sys.executable, str(script), json.dumps(conf or {})], env=env,
                         capture_output=True,
                         text=True, timeout=300)  # fmt: skip
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout.strip().splitlines()[-1]), out.stdout + out.stderr


def test_a_recorded_archive_is_mapped_by_every_later_session_and_removed_on_demand(tmp_path):
    cache = tmp_path / "cache"
    without, _ = _probe(tmp_path, cache)  # the JDK's own archive only

    done = sessionize("jvm-archive", env=cli_env(SESSIONIZE_JVM_CACHE=str(cache)), timeout=900)
    assert done.returncode == 0, done.stderr
    (archive,) = cache.glob("spark-driver-*.jsa")
    assert re.fullmatch(r"spark-driver-[0-9a-f]{16}\.jsa", archive.name)
    assert list(cache.glob(".*partial")) == []
    size = archive.stat().st_size
    assert size > 50e6 and str(archive) in done.stdout

    got, _ = _probe(tmp_path, cache)
    assert got["count"] == 3
    assert got["mapped"] >= size > without["mapped"], (got, size, without)

    # A driver whose class path is not the recorded one (a jar of the user's first): the JVM
    # refuses the archive, and its warning does not reach the user.
    jar = tmp_path / "extra.jar"
    with zipfile.ZipFile(jar, "w") as z:
        z.writestr("META-INF/MANIFEST.MF", "Manifest-Version: 1.0\n")
    got, output = _probe(tmp_path, cache, {"spark.driver.extraClassPath": str(jar)})
    assert got["count"] == 3 and got["mapped"] < size, got
    assert "archive" not in output.lower() and "cds" not in output.lower(), output

    gone = sessionize("jvm-archive", "--remove", env=cli_env(SESSIONIZE_JVM_CACHE=str(cache)))
    assert gone.returncode == 0 and f"removed {archive}" in gone.stdout
    assert not archive.exists()


def test_a_damaged_archive_is_left_aside_without_a_word(tmp_path):
    from sessionize import jvm_archive

    cache = tmp_path / "cache"
    cache.mkdir()
    os.environ["SESSIONIZE_JVM_CACHE"] = str(cache)
    try:
        path = jvm_archive.archive_path()
    finally:
        del os.environ["SESSIONIZE_JVM_CACHE"]
    path.write_bytes(os.urandom(4096))
    got, output = _probe(tmp_path, cache)
    assert got["count"] == 3
    assert "archive" not in output.lower() and "cds" not in output.lower(), output
