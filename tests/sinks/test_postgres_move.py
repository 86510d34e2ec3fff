"""`sessionize maintain --move-output` of a PostgreSQL output: its tables move to another
schema of the database in one transaction (rows, indexes, the batch job's lease and
records), a state store in the same schema stays, the checkpoint records the new place, and
a move run again or aimed elsewhere is answered in one line."""

from __future__ import annotations

import uuid

import psycopg

from sessionize.engines.checkpoint import check_or_record, recorded
from sessionize.engines.checkpoint import output_lease as lease_of
from sessionize.fs import location_key
from sessionize.state import open_backend
from tests.helpers import OUTPUTS, sessionize
from tests.sinks.conftest import make_sink, read_rows
from tests.sinks.rows import stage

KIND = "postgresql"


def _tables(uri: str, schema: str) -> set[str]:
    with psycopg.connect(uri.split("?", 1)[0]) as conn:
        rows = conn.execute("SELECT tablename FROM pg_tables WHERE schemaname = %s", (schema,))
        return {r[0] for r in rows}


def test_a_postgresql_output_moves_to_another_schema_and_its_state_stays(pg_output, tmp_path):
    base, old_schema = pg_output.split("?schema=")
    new_schema = f"moved_{uuid.uuid4().hex[:12]}"
    new = f"{base}?schema={new_schema}"
    try:
        sink = make_sink(KIND, pg_output)
        for b in (0, 1):
            sink.clear_staging(b)
            stage(sink, b, "r")
            sink.publish(b)
        with lease_of(pg_output):  # a batch job's lease and records live with its output
            pass
        state = open_backend(pg_output)  # a state store in the same schema
        state.write_job_settings("job-a", {"partitions": 1})
        before = {name: read_rows(KIND, pg_output, name) for name in OUTPUTS}
        kept = (
            _tables(base, old_schema)
            - {*OUTPUTS}
            - {t for t in _tables(base, old_schema) if t.startswith("_sessionize_")}
        )
        assert kept and before["sessions"].num_rows

        chk = str(tmp_path / "chk")
        check_or_record(chk, {"output": location_key(pg_output)})
        done = sessionize(
            "maintain", "--output", pg_output, "--checkpoint", chk, "--move-output", new
        )
        assert done.returncode == 0, done.stderr
        assert done.stdout.startswith(f"moved {location_key(pg_output)} to {location_key(new)}")

        for name in OUTPUTS:
            assert read_rows(KIND, new, name).equals(before[name]), name
        assert _tables(base, old_schema) == kept  # only the state's tables are left
        assert {"_sessionize_lease", "_sessionize_records", "sessions"} <= _tables(base, new_schema)
        assert state.read_job_settings("job-a") == {"partitions": 1}
        assert recorded(chk)["output"] == location_key(new)
        with lease_of(new):  # the mover gave its epoch back
            pass

        again = sessionize(
            "maintain", "--output", pg_output, "--checkpoint", chk, "--move-output", new
        )
        assert again.returncode == 0 and "(0 tables)" in again.stdout, again.stderr
        other_db = new.replace(base.rsplit("/", 1)[1] + "?", "otherdb?")
        for target, says in (
            (other_db, "moves to another schema of its own database"),
            (str(tmp_path / "dir"), "moves only to another schema"),
        ):
            refused = sessionize("maintain", "--output", new, "--move-output", target)
            lines = refused.stderr.strip().splitlines()
            assert refused.returncode == 2 and len(lines) == 1 and says in lines[0], refused.stderr
    finally:
        with psycopg.connect(base, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{new_schema}" CASCADE')
