"""Sinks under test: local Parquet, Parquet on S3, Delta local and Delta on S3.

The S3 API server is services/s3.sh (moto), started here if it is not running; each test
gets its own bucket.
"""

from __future__ import annotations

import os
import re
import subprocess
import uuid
from pathlib import Path

import pyarrow as pa
import pyarrow.dataset as ds
import pytest

from sessionize.sinks.base import Sink
from sessionize.sinks.registry import open_sink

REPO = Path(__file__).resolve().parents[2]
S3_SCRIPT = str(REPO / "services" / "s3.sh")
KINDS = ("parquet", "parquet-s3", "delta", "delta-s3")


def _script(action: str) -> str:
    done = subprocess.run([S3_SCRIPT, action], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, f"s3.sh {action}: {done.stderr[-2000:]}"
    return done.stdout


@pytest.fixture(scope="session")
def s3_endpoint() -> str:
    """host:port of the S3 API server; its credentials are put into the environment."""
    _script("install")
    _script("start")
    for line in _script("env").splitlines():
        name, value = re.match(r"export (\w+)=(\S+)", line).groups()
        os.environ.setdefault(name, value)
    return os.environ["SESSIONIZE_TEST_S3"].removeprefix("http://")


def s3_client(endpoint: str):
    import boto3

    return boto3.client("s3", endpoint_url=f"http://{endpoint}")


@pytest.fixture
def bucket_uri(s3_endpoint) -> str:
    name = f"t-{uuid.uuid4().hex[:12]}"
    s3_client(s3_endpoint).create_bucket(Bucket=name)
    return f"s3://{name}/out?endpoint_override={s3_endpoint}&scheme=http"


@pytest.fixture(params=KINDS)
def kind(request) -> str:
    return request.param


@pytest.fixture
def root(kind, tmp_path, request) -> str:
    if kind.endswith("-s3"):
        return request.getfixturevalue("bucket_uri")
    return str(tmp_path / "out")


def make_sink(kind: str, root: str) -> Sink:
    return open_sink(root, kind.removesuffix("-s3"), job="job-a")


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
    if kind == "parquet-s3":
        from sessionize.sinks.parquet_s3 import read_committed

        return read_committed(root, name)
    if not os.path.exists(f"{root}/{name}"):
        return pa.table({})
    return ds.dataset(f"{root}/{name}", format="parquet", partitioning="hive").to_table()


def _plain(t: pa.DataType) -> pa.DataType:
    """DataFusion returns string views; the Parquet readers give plain strings."""
    if t == pa.string_view():
        return pa.string()
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_list_view(t):
        return pa.list_(_plain(t.value_type))
    return t
