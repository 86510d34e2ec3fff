"""Sinks under test: local Parquet, Parquet on S3, Delta local and Delta on S3 (the S3
server and buckets: tests/s3_fixtures.py)."""

from __future__ import annotations

import os

import pyarrow as pa
import pyarrow.dataset as ds
import pytest

from sessionize.sinks.base import Sink
from sessionize.sinks.registry import open_sink
from tests.s3_fixtures import REPO, S3_SCRIPT, bucket_uri, s3_client, s3_endpoint  # noqa: F401

KINDS = ("parquet", "parquet-s3", "delta", "delta-s3")


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
