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

# How many classes the driver JVM took from the recorded archive, as its class-loading log
# says ("shared objects file (top)": the archive on top of the JDK's own).
PROBE = textwrap.dedent(
    """
    import json, sys
    from sessionize.spark_session import driver_java_options, get_spark
    conf, log = json.loads(sys.argv[1]), sys.argv[2]
    conf["spark.driver.extraJavaOptions"] = (
        f"{driver_java_options()} -Xlog:class+load=info:file={log}")
    spark = get_spark("archive-probe", master="local[1]", conf=conf)
    print(json.dumps({"count": spark.range(3).count()}))
    spark.stop()
    """
)


def _probe(tmp_path: Path, cache: Path, conf: dict | None = None) -> tuple[dict, str]:
    script, log = tmp_path / "probe.py", tmp_path / "classes.log"
    script.write_text(PROBE)
    log.unlink(missing_ok=True)
    env = {**os.environ, "SESSIONIZE_JVM_CACHE": str(cache), "PYSPARK_PYTHON": sys.executable}
    out = subprocess.run(
        [sys.executable, str(script), json.dumps(conf or {}), str(log)],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    got = json.loads(out.stdout.strip().splitlines()[-1])
    got["from_archive"] = log.read_text().count("source: shared objects file (top)")
    return got, out.stdout + out.stderr


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
    assert without["from_archive"] == 0 and got["from_archive"] > 5000, (got, without)

    # A driver whose class path is not the recorded one (a jar of the user's first): the JVM
    # refuses the archive, and its warning does not reach the user.
    jar = tmp_path / "extra.jar"
    with zipfile.ZipFile(jar, "w") as z:
        z.writestr("META-INF/MANIFEST.MF", "Manifest-Version: 1.0\n")
    got, output = _probe(tmp_path, cache, {"spark.driver.extraClassPath": str(jar)})
    assert got["count"] == 3 and got["from_archive"] == 0, got
    assert "archive" not in output.lower() and "cds" not in output.lower(), output

    left = cache / f".{archive.name}.123.partial"  # what an interrupted recording leaves
    left.write_bytes(b"x")
    gone = sessionize("jvm-archive", "--remove", env=cli_env(SESSIONIZE_JVM_CACHE=str(cache)))
    assert gone.returncode == 0 and f"removed {archive}" in gone.stdout
    assert list(cache.iterdir()) == []


def test_a_cache_it_cannot_write_is_one_line_saying_what_to_do(tmp_path):
    blocked = tmp_path / "file"
    blocked.write_text("not a directory")
    done = sessionize("jvm-archive", env=cli_env(SESSIONIZE_JVM_CACHE=str(blocked / "cache")))
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        f"sessionize: error: cannot write the JVM class archive into {blocked / 'cache'} "
        "(Not a directory): set SESSIONIZE_JVM_CACHE to a directory of yours"
    ]


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


def test_another_install_of_the_same_jars_has_an_archive_of_its_own(tmp_path):
    """The JVM maps an archive only for the class path it recorded: the same jars in another
    venv are another archive, and another Java too."""
    from sessionize import jvm_archive

    one, two = tmp_path / "venv1" / "jars", tmp_path / "venv2" / "jars"
    for jars in (one, two):
        jars.mkdir(parents=True)
        (jars / "spark-core.jar").write_bytes(b"x" * 10)
    java = tmp_path / "java" / "bin"
    java.mkdir(parents=True)
    (java / "java").write_bytes(b"#!")
    home = java.parent
    assert jvm_archive.fingerprint(home, one) == jvm_archive.fingerprint(home, one)
    assert jvm_archive.fingerprint(home, one) != jvm_archive.fingerprint(home, two)
    (one / "spark-core.jar").write_bytes(b"x" * 11)  # another Spark
    changed = jvm_archive.fingerprint(home, one)
    assert changed != jvm_archive.fingerprint(home, two)
    (java / "java").write_bytes(b"#!!")  # another Java
    assert jvm_archive.fingerprint(home, one) != changed
