"""`sessionize batch` writing Delta (local, S3), Parquet on S3, PostgreSQL and Iceberg gives
the rows that local Parquet gets from the same input, in every output (`events` included)."""

from __future__ import annotations

from datetime import UTC, datetime

import pyarrow as pa
import pytest

from sessionize.commands.batch import BatchOptions, run_batch
from sessionize.engines.checkpoint import output_lease
from sessionize.errors import LeaseHeld
from sessionize.objectstore import ObjectStoreUri
from sessionize.state.lease import ObjectLeaseRecords
from tests.helpers import SORT_KEYS, generate
from tests.sinks.conftest import read_rows

START = datetime(2026, 11, 1, tzinfo=UTC)


def _run(spark, data, output: str, fmt: str, state: str) -> None:
    opts = BatchOptions(
        input=str(data),
        output=output,
        start=START,
        end=START.replace(hour=1),
        state=state,
        partitions=2,
        output_format=fmt,
    )
    run_batch(opts, spark=spark, on_hour=lambda _line: None)


def _entries(value: object) -> list | None:
    """A map's entries by key. A JSON object (PostgreSQL's jsonb) keeps no order and comes
    back as a struct of every key seen in the column (absent keys as None)."""
    if value is None:
        return None
    if isinstance(value, dict):
        return sorted((k, v) for k, v in value.items() if v is not None)
    return sorted(value)


def _canonical(t: pa.Table, name: str, schema: pa.Schema) -> pa.Table:
    t = t.select(schema.names)
    for i, field in enumerate(schema):
        if pa.types.is_map(field.type):
            entries = [_entries(v) for v in t[i].to_pylist()]
            t = t.set_column(i, field.name, pa.array(entries, field.type))
    t = t.cast(schema)
    keys = ["batch_id", *SORT_KEYS[name]]
    return t.sort_by([(k, "ascending") for k in keys])


@pytest.fixture(scope="module")
def data_and_reference(spark, tmp_path_factory):
    base = tmp_path_factory.mktemp("batch")
    data = generate(base / "in", hours=2, users=80, events_per_hour=600, invalid_rate=0.01)
    ref = str(base / "ref")
    _run(spark, data, ref, "parquet", "files")
    return data, ref


@pytest.mark.parametrize("kind", ["delta", "delta-s3", "parquet-s3", "postgresql", "iceberg"])
def test_batch_outputs_equal_local_parquet(
    kind, root, data_and_reference, spark, tmp_path, monkeypatch
):
    data, ref = data_and_reference
    monkeypatch.chdir(tmp_path)  # where a URI mistaken for a local path would land
    # On S3 the state is the default `files`: under OUTPUT/_state, on S3 too.
    # PostgreSQL and Iceberg outputs are written with the default format.
    fmt = "parquet" if kind in ("postgresql", "iceberg") else kind.removesuffix("-s3")
    _run(spark, data, root, fmt, "files" if kind.endswith("-s3") else f"files:{tmp_path}/state")
    if kind == "postgresql":
        # The same hours again, the state taken from the output's record (in its schema):
        # the hours are retired in a transaction of their own and recomputed, never doubled.
        said: list[str] = []
        opts = BatchOptions(
            input=str(data),
            output=root,
            start=START,
            end=START.replace(hour=1),
            partitions=2,
            explicit=frozenset({"partitions"}),
        )
        run_batch(opts, spark=spark, on_hour=said.append)
        assert any(line.startswith("reprocessing from ") for line in said), said
    assert not (tmp_path / "s3:").exists() and not (tmp_path / "postgresql:").exists()
    for name in ("sessions", "page_views", "events", "late_events", "invalid_events"):
        got = read_rows(kind, root, name)
        expected = read_rows("parquet", ref, name)
        assert expected.num_rows > 0 or name == "late_events", name  # batch: none late
        assert got.num_rows == expected.num_rows, name
        if not expected.num_rows:
            continue
        # PostgreSQL's rows come back as Python values: the reference's types are the schema.
        schema = expected.schema if kind == "postgresql" else got.schema
        assert _canonical(got, name, schema).equals(_canonical(expected, name, schema)), name


def test_a_second_driver_on_an_s3_output_is_refused(bucket_uri, data_and_reference, spark):
    data, _ = data_and_reference
    with output_lease(bucket_uri) as first:
        assert isinstance(first.records, ObjectLeaseRecords)
        with pytest.raises(LeaseHeld) as refused:
            _run(spark, data, bucket_uri, "parquet", "files")
    message = str(refused.value)
    assert "\n" not in message and "is in use by the driver on" in message, message
    store = ObjectStoreUri.parse(bucket_uri)
    listed = store.client().list_objects_v2(Bucket=store.bucket, Prefix=store.key("_lease/"))
    assert [o["Key"] for o in listed["Contents"]] == [store.key("_lease/0000000001.json")]
