"""The package without its optional extras (what `./dev demo` installs): every command
loads, and an output that needs a missing extra is refused in one line naming it. Each
extra's client is replaced by a package that fails to import, first on PYTHONPATH."""

from __future__ import annotations

import os
import subprocess
import sys

EXTRAS = {
    "psycopg": "postgres",
    "confluent_kafka": "kafka",
    "redis": "redis",
    "prometheus_client": "metrics",
    "pyiceberg": "iceberg",
}

PROBE = """
import sys
import sessionize.cli, sessionize.commands.demo, sessionize.commands.status
import sessionize.commands.maintain, sessionize.report
from sessionize.errors import ConfigError
from sessionize.sinks.registry import check_output
missing = [m for m in {modules!r} if m in sys.modules and sys.modules[m].__file__]
assert not missing, missing
for output in ("postgresql://me@127.0.0.1:1/db", "iceberg://web?uri=sqlite:///c.db&warehouse=w"):
    try:
        check_output(output)
    except ConfigError as exc:
        print(exc)
"""


def test_commands_load_without_the_extras_and_name_the_one_an_output_needs(tmp_path):
    for module in EXTRAS:
        (tmp_path / module).mkdir()
        (tmp_path / module / "__init__.py").write_text(
            f"raise ModuleNotFoundError('no {module} here', name={module!r})\n"
        )
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    done = subprocess.run(
        [sys.executable, "-c", PROBE.format(modules=list(EXTRAS))],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    postgres, iceberg = done.stdout.strip().splitlines()
    assert postgres.endswith("pip install 'sessionize[postgres]'"), done.stdout
    assert iceberg == "iceberg outputs need the iceberg extra: pip install 'sessionize[iceberg]'"
