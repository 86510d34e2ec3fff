"""The `postgresql` backend: the contract suite and the remote checks on a real server
(services/postgres.sh), plus its table layout, index use and URI rules."""

from __future__ import annotations

import pickle
import uuid

import psycopg
import pytest

from sessionize.errors import ConfigError, StateError
from sessionize.state import open_backend
from sessionize.state.backends import postgres, postgres_version
from sessionize.state.backends.postgres import PostgresBackend

from .contract import StateBackendContract
from .remote_checks import CredentialChecks, RemoteBackendChecks
from .services_fixtures import postgres_uri, restartable  # noqa: F401 - fixtures
from .workers import J, commit, expected, read_all, rows

pytestmark = pytest.mark.services


@pytest.fixture
def pg_schema(postgres_uri):  # noqa: F811
    schema = f"t_{uuid.uuid4().hex[:12]}"
    yield schema
    with psycopg.connect(postgres_uri, autocommit=True) as conn:
        conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


@pytest.fixture
def make_backend(postgres_uri, pg_schema):  # noqa: F811
    def make(spec=None, cache=True):
        return PostgresBackend(f"{postgres_uri}?schema={pg_schema}", spec=spec)

    return make


@pytest.fixture
def sql(postgres_uri, pg_schema):  # noqa: F811
    """Run a query in the test's schema: sql("SELECT ...", params) -> rows."""
    conn = psycopg.connect(postgres_uri, autocommit=True)
    conn.execute(f'SET search_path = "{pg_schema}"')

    def run(query: str, params=None) -> list:
        cur = conn.execute(query, params)
        return cur.fetchall() if cur.description else []

    yield run
    conn.close()


class TestPostgresContract(StateBackendContract):
    @pytest.fixture
    def unusable_backend(self):
        return open_backend("postgresql://sessionize@127.0.0.1:1/sessionize?connect_timeout=2")

    @pytest.fixture
    def leftovers(self, sql):
        def find(backend, job, partition):
            """Version rows before the oldest restorable version, state rows that ended by
            then (no restorable version sees them)."""
            oldest = min(backend.versions(job, partition), default=None)
            if oldest is None:
                return []
            where = " JOIN partitions p USING (pid) WHERE p.job = %s AND p.part = %s AND "
            versions = sql(
                "SELECT 'version', version FROM versions" + where + "version < %s",
                (job, partition, oldest),
            )
            rows = sql(
                "SELECT 'row', key, valid_to FROM state" + where + "valid_to <= %s",
                (job, partition, oldest),
            )
            return versions + rows

        return find


class TestPostgresChecks(RemoteBackendChecks, CredentialChecks):
    service = "postgres"
    read_chunk = postgres_version.KEYS_PER_QUERY

    def commit_trip_bound(self, keys: int) -> int:
        return 1 + 8  # open, then the commit transaction's statements

    def secret_uri(self) -> str:
        return "postgresql://sessionize:s3cret-pw@127.0.0.1:1/sessionize?connect_timeout=2"


# ----- layout ----------------------------------------------------------------------------


def test_layout_rows_carry_version_ranges(make_backend, sql):
    backend = make_backend()
    commit(backend, J, 0, -1, 0, {1: [10, 11], 2: [20]})
    commit(backend, J, 0, 0, 1, {1: [15]}, removes=[2])
    commit(backend, J, 0, 1, 2, {3: [30]}, meta={"watermark": 7})
    got = sql(
        "SELECT s.key, s.valid_from, s.valid_to, s.expires_us, s.n_rows FROM state s"
        " JOIN partitions p USING (pid) WHERE p.job = %s ORDER BY key, valid_from",
        (J,),
    )
    assert got == [(1, 0, 1, 10, 2), (1, 1, None, 15, 1), (2, 0, 1, 20, 1), (3, 2, None, 30, 1)]
    assert sql("SELECT version, meta::text, keys FROM versions ORDER BY version") == [
        (0, "{}", 2), (1, "{}", 1), (2, '{"watermark": 7}', 2)
    ]  # fmt: skip
    backend.maintenance(J, 0, retain=2)  # keep 1 and 2: rows that ended at 1 go
    assert sql("SELECT key, valid_from FROM state ORDER BY key") == [(1, 1), (3, 2)]
    assert read_all(backend, J, 0, 1) == expected({1: [15]})
    backend.truncate_after(J, 1)
    assert sql("SELECT key, valid_from, valid_to FROM state ORDER BY key") == [(1, 1, None)]


def test_a_failed_commit_leaves_nothing(make_backend, sql, monkeypatch):
    backend = make_backend()
    commit(backend, J, 0, -1, 0, {1: [1], 2: [2]})
    real = postgres.copy_chunks

    def dies_half_way(*args):
        chunks = real(*args)
        yield next(chunks)
        yield next(chunks)[:100]
        raise OSError("network gone")

    monkeypatch.setattr(postgres, "copy_chunks", dies_half_way)
    ps = backend.open(J, 0, 0)
    ps.put_many(rows({k: [k] for k in range(3, 500)}))
    ps.remove_many([1])
    with pytest.raises((StateError, OSError)):
        ps.commit(1)
    monkeypatch.undo()
    assert backend.versions(J, 0) == [0]
    assert sql("SELECT count(*) FROM state")[0][0] == 2
    assert sql("SELECT count(*) FROM state WHERE valid_to IS NOT NULL")[0][0] == 0
    commit(backend, J, 0, 0, 1, {3: [3]})
    assert read_all(backend, J, 0, 1) == expected({1: [1], 2: [2], 3: [3]})


def test_expiry_and_key_reads_use_indexes(make_backend, sql):
    backend = make_backend()
    n = 20_000
    commit(backend, J, 0, -1, 0, {k: [1000 + k] for k in range(n)})
    commit(backend, J, 0, 0, 1, {k: [5000 + k] for k in range(100)})
    sql("ANALYZE state")
    pid = sql("SELECT pid FROM partitions")[0][0]

    def plan(query: str, params: dict) -> str:
        return "\n".join(r[0] for r in sql("EXPLAIN " + query, params))

    expiring = plan(
        "SELECT key FROM state WHERE pid = %(pid)s AND valid_to IS NULL"
        " AND expires_us < %(upto)s AND valid_from <= %(v)s"
        " UNION ALL SELECT key FROM state WHERE pid = %(pid)s AND valid_to > %(v)s"
        " AND valid_from <= %(v)s AND expires_us < %(upto)s",
        {"pid": pid, "upto": 1010, "v": 0},
    )
    assert "state_current_expiry" in expiring and "state_ended" in expiring
    assert "Seq Scan" not in expiring
    keys = plan(
        "SELECT key FROM state WHERE pid = %(pid)s AND key = ANY(%(k)s::bigint[])"
        " AND valid_from <= %(v)s AND (valid_to IS NULL OR valid_to > %(v)s)",
        {"pid": pid, "k": "{1,2,3}", "v": 1},
    )
    assert "Seq Scan" not in keys
    with backend.open(J, 0, 0) as ps:  # an older version: history rows answer
        assert ps.expiring(1003).to_pylist() == [0, 1, 2]
    with backend.open(J, 0, 1) as ps:
        assert ps.expiring(1103).to_pylist() == [100, 101, 102]


def test_idle_connections_survive_a_server_restart(make_backend, restartable):  # noqa: F811
    restartable("postgres")
    backend = make_backend()
    commit(backend, J, 0, -1, 0, {1: [1]})
    from .services_fixtures import start_service, stop_service

    stop_service("postgres")
    start_service("postgres")
    # the pooled connection is dead; the operation is retried once on a new one
    assert read_all(backend, J, 0, 0) == expected({1: [1]})


# ----- URIs ------------------------------------------------------------------------------


def test_uris():
    b = open_backend("postgresql://u@db.example:5433/state")
    assert isinstance(b, PostgresBackend) and b.schema == "sessionize"
    assert b.uri == "postgresql://u@db.example:5433/state"
    b = open_backend("postgres://u:p%40ss@db.example/state?schema=s1&sslmode=require")
    assert b.uri == "postgresql://u:p%40ss@db.example/state?schema=s1&sslmode=require"
    assert "p%40ss" not in repr(b) and "***" in repr(b)
    assert pickle.loads(pickle.dumps(b)).uri == b.uri
    with pytest.raises(ConfigError, match="unknown option 'colour'"):
        open_backend("postgresql://u@h/db?colour=red")
    with pytest.raises(ConfigError, match="schema"):
        open_backend("postgresql://u@h/db?schema=Robert');DROP")
    with pytest.raises(ConfigError, match="database"):
        open_backend("postgresql://u@h")


def test_sql_is_parameterized(make_backend, sql):
    """Job names reach SQL only as parameters (and are validated before that)."""
    backend = make_backend()
    with pytest.raises(ConfigError):
        backend.open("x'; DROP TABLE state; --", 0, -1)
    commit(backend, "a=b.c-d_e", 0, -1, 0, {1: [1]})
    assert backend.partitions("a=b.c-d_e") == [0]
    assert sql("SELECT job FROM partitions") == [("a=b.c-d_e",)]
