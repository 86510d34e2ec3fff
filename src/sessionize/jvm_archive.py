"""Where the driver JVM's class-data archive lives, and the JVM options that map it.

A Spark driver loads and verifies about 15,000 classes from Spark's jars before its first
job: 2-3 s of a fresh process on a small machine, paid again by every `sessionize` command.
The JVM can record the classes it loaded into an archive (class-data sharing, "CDS") and
map that file at the next start instead. `commands.jvm_archive` records one; `spark_session`
passes these options to every driver JVM it starts while the archive is there.

The archive belongs to one Java and one set of Spark jars in one place: its name holds a
fingerprint of both, so another install (another Java, another PySpark, another venv) looks
for its own. The JVM checks the archive again when it maps it and runs without it,
silently, if anything differs.
"""

from __future__ import annotations

import hashlib
import os
import shutil
from pathlib import Path

# The JVM warns on stdout when it cannot map an archive (another Java, another classpath):
# it then runs without one, which is the whole of the fallback, so the warning is dropped.
QUIET = "-Xlog:cds=off -Xlog:cds+dynamic=off"
PREFIX = "spark-driver-"


def cache_dir() -> Path:
    """`$SESSIONIZE_JVM_CACHE`, else `$XDG_CACHE_HOME/sessionize`, else
    `~/.cache/sessionize`."""
    if os.environ.get("SESSIONIZE_JVM_CACHE"):
        return Path(os.environ["SESSIONIZE_JVM_CACHE"])
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "sessionize"


def _java_home() -> Path | None:
    if os.environ.get("JAVA_HOME"):
        return Path(os.environ["JAVA_HOME"])
    java = shutil.which("java")
    return Path(os.path.realpath(java)).parent.parent if java else None


def fingerprint(home: Path | None = None, jars: Path | None = None) -> str:
    """16 hex digits that change with the Java (its VM library) or the Spark jars: their
    place, names and sizes, as the JVM records the class path in the archive and maps it
    only for the same one (default: this Java, this PySpark's jars)."""
    import pyspark

    parts: list[str] = []
    home = home or _java_home()
    if home is not None:
        vm = home / "lib" / "server" / "libjvm.so"
        target = vm if vm.exists() else home / "bin" / "java"
        if target.exists():
            st = target.stat()
            parts.append(f"{os.path.realpath(target)}:{st.st_size}:{st.st_mtime_ns}")
    jars = jars or Path(pyspark.__file__).parent / "jars"
    if jars.is_dir():
        parts.append(os.path.realpath(jars))
        for jar in sorted(jars.iterdir()):
            parts.append(f"{jar.name}:{jar.stat().st_size}")
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16]


def archive_path() -> Path:
    """The archive of this Java and these Spark jars (it may not exist)."""
    return cache_dir() / f"{PREFIX}{fingerprint()}.jsa"


def java_options() -> str:
    """The driver JVM options that map the archive, or "" while there is none."""
    path = archive_path()
    if not path.is_file():
        return ""
    return f"-XX:SharedArchiveFile={path} {QUIET}"
