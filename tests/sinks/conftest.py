"""Sinks under test: local Parquet, Parquet on S3, Delta local and Delta on S3 (the S3
server and buckets: tests/s3_fixtures.py), PostgreSQL tables (a schema of their own per
test, on the server of services/postgres.sh), Kafka topics and Iceberg tables (a SQLite
catalog and a warehouse in the test's directory)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import uuid
from collections.abc import Iterator
from urllib.parse import parse_qs

import pyarrow as pa
import pytest

from sessionize.sinks.base import Sink
from sessionize.sinks.registry import committed_rows, open_sink
from tests.s3_fixtures import REPO, S3_SCRIPT, bucket_uri, s3_client, s3_endpoint  # noqa: F401

KINDS = ("parquet", "parquet-s3", "delta", "delta-s3", "postgresql", "kafka", "iceberg")


def kill_when_paused(module: str, *args: str, point: str) -> None:
    """Run `python -m module args` with `SESSIONIZE_PAUSE_AT=point`, wait for its PAUSED line,
    then kill -9 its process group: a crash at exactly that step. Fails if it never pauses."""
    env = {**os.environ, "SESSIONIZE_PAUSE_AT": point}
    proc = subprocess.Popen(
        [sys.executable, "-m", module, *args],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        line = proc.stdout.readline()
        assert line.startswith("PAUSED"), f"no pause: {line!r} {proc.stderr.read()[-2000:]}"
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


@pytest.fixture(params=KINDS)
def kind(request) -> str:
    return request.param


@pytest.fixture
def root(kind, tmp_path, request) -> str:
    if kind.endswith("-s3"):
        return request.getfixturevalue("bucket_uri")
    if kind == "postgresql":
        return request.getfixturevalue("pg_output")
    if kind == "kafka":
        from tests.sinks.kafka_consumer import kafka_uri

        return kafka_uri(tmp_path)
    if kind == "iceberg":
        return iceberg_uri(tmp_path)
    return str(tmp_path / "out")


def iceberg_uri(tmp_path) -> str:
    """An Iceberg output: a namespace of its own in a SQLite catalog under `tmp_path`."""
    return (
        f"iceberg://web_{uuid.uuid4().hex[:8]}?uri=sqlite:///{tmp_path}/catalog.db"
        f"&warehouse=file://{tmp_path}/warehouse"
    )


@pytest.fixture
def pg_output() -> Iterator[str]:
    """A PostgreSQL output URI with a schema of its own, dropped afterwards."""
    import psycopg

    from tests.state.services_fixtures import service_env

    uri = service_env("postgres")["SESSIONIZE_TEST_POSTGRES"]
    schema = f"out_{uuid.uuid4().hex[:12]}"
    yield f"{uri}?schema={schema}"
    with psycopg.connect(uri, autocommit=True) as conn:
        conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


def make_sink(kind: str, root: str) -> Sink:
    fmt = "delta" if kind.startswith("delta") else "parquet"
    return open_sink(root, fmt, job="job-a")


def read_rows(kind: str, root: str, name: str) -> pa.Table:
    """What a reader of output `name` sees, read with each format's own reader (not the sink)."""
    if kind.startswith("delta"):
        from deltalake import DeltaTable

        from sessionize.objectstore import ObjectStoreUri

        s3 = ObjectStoreUri.parse(root)
        uri = s3.child(name) if s3 else f"{root}/{name}"
        opts = s3.storage_options() if s3 else None
        if not DeltaTable.is_deltatable(uri, storage_options=opts):
            return pa.table({})
        from deltalake import QueryBuilder

        # delta-rs' own reader: pyarrow's dataset layer over a table on S3 next to pyarrow's
        # S3 filesystem can abort the process at exit.
        result = QueryBuilder().register("t", DeltaTable(uri, storage_options=opts))
        table = pa.table(result.execute("SELECT * FROM t").read_all())
        return table.cast(pa.schema([f.with_type(_plain(f.type)) for f in table.schema]))
    if kind == "postgresql":
        return _pg_rows(root, name)
    if kind == "kafka":  # what a read_committed consumer sees
        from tests.sinks.kafka_consumer import read_topic

        records = read_topic(root, name)
        columns = ["batch_id", "raw" if name == "invalid_events" else "session_id"]
        return pa.table({c: [r[c] for r in records] for c in columns}) if records else pa.table({})
    if kind == "iceberg":
        return iceberg_rows(root, name)
    if kind == "parquet-s3":
        from sessionize.sinks.parquet_s3 import read_committed

        return read_committed(root, name)
    data = committed_rows(root, name)  # the batch directories and the compacted files
    return pa.table({}) if data is None else data.to_table()


def _plain(t: pa.DataType) -> pa.DataType:
    """DataFusion returns string views; the Parquet readers give plain strings."""
    if t == pa.string_view():
        return pa.string()
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_list_view(t):
        return pa.list_(_plain(t.value_type))
    return t


def _pg_rows(uri: str, name: str) -> pa.Table:
    """An output table read with a plain SELECT (empty when the table is not there)."""
    import psycopg

    base, query = uri.split("?", 1)
    schema = parse_qs(query)["schema"][0]
    with psycopg.connect(base) as conn:
        cur = conn.execute(
            "SELECT 1 FROM information_schema.tables WHERE table_schema = %s AND table_name = %s",
            (schema, name),
        )
        if cur.fetchone() is None:
            return pa.table({})
        cur = conn.execute(f'SELECT * FROM "{schema}"."{name}"')
        names = [d.name for d in cur.description]
        rows = cur.fetchall()
    return pa.table({n: [r[i] for r in rows] for i, n in enumerate(names)})


def iceberg_rows(uri: str, name: str) -> pa.Table:
    """Table NAMESPACE.`name` as pyiceberg reads its current snapshot, through the catalog
    the URI names (empty when the table is not there)."""
    from urllib.parse import parse_qsl, urlsplit

    from pyiceberg.catalog.sql import SqlCatalog
    from pyiceberg.exceptions import NoSuchTableError

    parts = urlsplit(uri)
    catalog = SqlCatalog("default", **dict(parse_qsl(parts.query)))
    try:
        return catalog.load_table((parts.netloc, name)).scan().to_arrow()
    except NoSuchTableError:
        return pa.table({})
