"""Outputs as other readers see them: DuckDB and Polars globs over local Parquet while batches
are published, DuckDB's `delta_scan` next to deltalake's reader on the Delta tables, and
pyiceberg and DuckDB's `iceberg_scan` polling Iceberg tables while batches are committed.
(Spark's Iceberg runtime is a Maven jar, which this test environment cannot fetch.)"""

from __future__ import annotations

import glob
import os
import threading
from collections import Counter

import duckdb
import polars as pl

from sessionize.sinks.delta import compact_and_vacuum
from sessionize.sinks.registry import open_sink
from tests.sinks.rows import stage

ROWS_PER_BATCH = 6  # rows.stage: 2 partitions x 3 rows


def duckdb_with(*names: str) -> duckdb.DuckDBPyConnection:
    """DuckDB with extensions from their duckdb-extension-NAME packages (no download)."""
    import importlib

    con = duckdb.connect(config={"autoinstall_known_extensions": False})
    for name in names:
        base = os.path.dirname(importlib.import_module(f"duckdb_extension_{name}").__file__)
        (path,) = glob.glob(f"{base}/extensions/v{duckdb.__version__}/{name}.duckdb_extension")
        con.execute(f"LOAD '{path}'")
    return con


def duckdb_with_delta() -> duckdb.DuckDBPyConnection:
    return duckdb_with("delta")


def _check(counts: Counter, ids: list[str], reader: str) -> None:
    assert len(ids) == len(set(ids)), f"{reader} saw a row twice"
    partial = {b: n for b, n in counts.items() if n != ROWS_PER_BATCH}
    assert not partial, f"{reader} saw part of a batch: {partial}"


def _publishing(sink, batches) -> tuple[threading.Thread, threading.Event]:
    """Stage and publish `batches` in a thread; the event is set once it has stopped."""
    done = threading.Event()

    def publish_loop() -> None:
        try:
            for b in batches:
                sink.clear_staging(b)
                stage(sink, b, "t")
                sink.publish(b)
        finally:
            done.set()

    writer = threading.Thread(target=publish_loop)
    writer.start()
    return writer, done


def test_glob_readers_see_whole_batches_while_batches_are_published(tmp_path):
    root = str(tmp_path)
    sink = open_sink(root)
    sink.clear_staging(0)
    stage(sink, 0, "t")
    sink.publish(0)
    writer, done = _publishing(sink, range(1, 30))
    pattern = f"{root}/sessions/**/*.parquet"
    con = duckdb.connect()
    reads = 0
    while not done.is_set() or reads < 2:
        rows = con.sql(
            f"SELECT batch_id, session_id FROM read_parquet('{pattern}', hive_partitioning=true)"
        ).fetchall()
        _check(Counter(b for b, _ in rows), [s for _, s in rows], "DuckDB")
        df = pl.scan_parquet(pattern, hive_partitioning=True).select("batch_id", "session_id")
        df = df.collect()
        _check(Counter(df["batch_id"].to_list()), df["session_id"].to_list(), "Polars")
        reads += 1
    writer.join()
    final = con.sql(f"SELECT count(*) FROM read_parquet('{pattern}', hive_partitioning=true)")
    assert final.fetchone()[0] == 30 * ROWS_PER_BATCH


def test_duckdb_delta_scan_reads_what_deltalake_reads_before_and_after_compaction(tmp_path):
    root = str(tmp_path)
    sink = open_sink(root, "delta", job="j")
    for b in (0, 1, 2, 1):  # batch 1 replayed
        sink.clear_staging(b)
        stage(sink, b, f"a{b}")
        sink.publish(b)
    sink.invalidate_from(2)
    con = duckdb_with_delta()
    query = f"SELECT batch_id, session_id, session_date FROM delta_scan('{root}/sessions')"
    expected = sorted((b, f"a{b}-{b}-{p}-{i}") for b in (0, 1) for p in (0, 1) for i in range(3))

    def seen_by_both() -> list:
        by_duckdb = sorted(con.sql(query).fetchall())
        t = sink.table("sessions").to_pyarrow_table(
            columns=["batch_id", "session_id", "session_date"]
        )
        by_deltalake = sorted(zip(*(t[c].to_pylist() for c in t.column_names), strict=True))
        assert by_duckdb == by_deltalake
        return [(b, s) for b, s, _ in by_duckdb]

    assert seen_by_both() == expected
    files_before = len(sink.table("sessions").file_uris())
    report = compact_and_vacuum(sink, retention_hours=0)
    assert len(sink.table("sessions").file_uris()) < files_before
    assert report["sessions"]["vacuumed_files"] > 0
    assert seen_by_both() == expected


def test_iceberg_readers_see_whole_batches_while_batches_are_committed(tmp_path):
    """pyiceberg's scan and DuckDB's `iceberg_scan` of the table's current metadata, polled
    while batches are committed (one replayed), see whole batches, each row once."""
    from pyiceberg.catalog.sql import SqlCatalog

    from tests.sinks.conftest import iceberg_uri

    uri = iceberg_uri(tmp_path)
    sink = open_sink(uri, job="j")
    namespace = sink.output.namespace
    catalog = SqlCatalog(
        "default", uri=f"sqlite:///{tmp_path}/catalog.db", warehouse=f"file://{tmp_path}/warehouse"
    )
    batches = [*range(8), 5]  # batch 5 published again, as after a crash
    for b in batches[:1]:
        sink.clear_staging(b)
        stage(sink, b, "t")
        sink.publish(b)
    writer, done = _publishing(sink, batches[1:])
    con = duckdb_with("avro", "iceberg")
    reads = 0
    try:
        while not done.is_set() or reads < 2:
            table = catalog.load_table((namespace, "sessions"))
            t = table.scan(selected_fields=("batch_id", "session_id")).to_arrow()
            ids = t["session_id"].to_pylist()
            _check(Counter(t["batch_id"].to_pylist()), ids, "pyiceberg")
            rows = con.sql(
                f"SELECT batch_id, session_id FROM iceberg_scan('{table.metadata_location}')"
            ).fetchall()
            _check(Counter(b for b, _ in rows), [s for _, s in rows], "DuckDB iceberg_scan")
            reads += 1
    finally:
        writer.join()
    final = catalog.load_table((namespace, "sessions"))
    got = con.sql(f"SELECT count(*) FROM iceberg_scan('{final.metadata_location}')")
    assert got.fetchone()[0] == 8 * ROWS_PER_BATCH
