"""Readers of a live Parquet output, as users run them (README "Reading the outputs"): DuckDB's
`read_parquet` glob, a pyarrow dataset, Polars' `scan_parquet` glob and (when given a session)
`spark.read.parquet`, polling `sessions` in a thread while the test
writes, kills, rewinds or reruns. Each read must hold no session twice and every batch it
holds whole, and succeed: where the block retires rows (a rewind, a replaced batch), README
"Reading the outputs" says a reader that listed a file just before it went fails with "file
not found" and reads again; that read again must then be clean."""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import duckdb
import polars as pl
import pyarrow as pa
import pyarrow.dataset as ds
from pyspark.sql import SparkSession

COLUMNS = ["batch_id", "user_id", "start_time"]


@dataclass
class Polled:
    reads: Counter = field(default_factory=Counter)  # reader -> reads that found data
    problems: list[str] = field(default_factory=list)
    vanished: int = 0  # reads that met a file removed after listing, and read again
    readers: tuple[str, ...] = ("DuckDB", "pyarrow", "Polars")

    def assert_clean(self) -> None:
        assert not self.problems, self.problems[:5]
        assert all(self.reads[r] > 0 for r in self.readers), self.reads


@contextmanager
def polling_sessions(
    sessions: Path,
    whole: Counter,
    retires: bool = False,
    spark: SparkSession | None = None,
    committed: Callable[[], set[int]] | None = None,
) -> Iterator[Polled]:
    """Poll `sessions` until the block ends; `whole` is each batch's session count in a
    clean run (what a whole batch holds); `retires`: the block removes published rows, so a
    read may meet a vanished file once and read again; `spark`: Spark reads too, one read
    in ten rounds (a Spark read costs the writer's Spark far more than the others);
    `committed`: the batches committed so far, asked before each read: each of them must be
    in the read whole, and only a batch committed during the read may be seen in part (a
    reader that lists directory by directory may list them in two views, views.py)."""
    polled, done = Polled(), threading.Event()
    if spark is not None:
        polled.readers += ("Spark",)

    def check(reader: str, table: pa.Table, before: set[int] | None) -> None:
        keys = list(zip(table["user_id"].to_pylist(), table["start_time"].to_pylist(), strict=True))
        if len(keys) != len(set(keys)):
            polled.problems.append(f"{reader} saw a session twice")
        seen = Counter(table["batch_id"].to_pylist())
        must = seen.keys() if before is None else before
        if any(seen[b] != whole[b] for b in must) or any(n > whole[b] for b, n in seen.items()):
            polled.problems.append(f"{reader} saw part of a batch: {dict(seen)} of {dict(whole)}")
        if table.num_rows:
            polled.reads[reader] += 1

    def poll() -> None:
        con = duckdb.connect()
        query = (
            f"SELECT {', '.join(COLUMNS)} FROM read_parquet("
            f"'{sessions}/**/*.parquet', hive_partitioning=true)"
        )
        rounds = 0
        while not done.wait(0.05):  # a pause between reads leaves the writer its share
            if not has_files():  # a glob over no file at all fails in Polars
                continue
            read("DuckDB", lambda: con.sql(query).to_arrow_table())
            read("pyarrow", by_pyarrow)
            read("Polars", by_polars)
            if spark is not None and rounds % 10 == 0:
                read("Spark", by_spark)
            rounds += 1

    def has_files() -> bool:
        try:
            return any(sessions.rglob("*.parquet"))
        except OSError:  # a directory retired while walked
            return False

    def by_pyarrow() -> pa.Table:
        data = ds.dataset(str(sessions), format="parquet", partitioning="hive")
        return data.to_table(columns=COLUMNS)

    def by_polars() -> pa.Table:
        scan = pl.scan_parquet(f"{sessions}/**/*.parquet", hive_partitioning=True)
        return scan.select(COLUMNS).collect().to_arrow()

    def by_spark() -> pa.Table:
        assert spark is not None
        return spark.read.parquet(str(sessions)).select(*COLUMNS).toArrow()

    def read(reader: str, table: Callable[[], pa.Table]) -> None:
        for attempt in range(3):
            try:
                before = None if committed is None else committed()
                check(reader, table(), before)
                return
            except Exception as e:  # noqa: BLE001 - every error is a finding
                # "file not found" in each reader's words (DuckDB's glob, when the view it
                # resolved is moved out of its path as it lists: "No files found").
                gone = isinstance(e, FileNotFoundError) or any(
                    w in str(e)
                    for w in ("No such file", "FILE_NOT_EXIST", "FileNotFound", "No files found")
                )
                if not (retires and gone and attempt < 2):
                    polled.problems.append(f"{reader}: {type(e).__name__}: {e}")
                    return
                polled.vanished += 1

    poller = threading.Thread(target=poll)
    poller.start()
    try:
        yield polled
    finally:
        done.set()
        poller.join()
