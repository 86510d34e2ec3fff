"""Readers of a live Parquet output, as users run them (README "Reading the outputs"): DuckDB's
`read_parquet` glob and a pyarrow dataset, polling `sessions` in a thread while the test
writes, kills, rewinds or reruns. Each read must succeed, hold no session twice and every
batch it holds whole."""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.dataset as ds


@dataclass
class Polled:
    reads: Counter = field(default_factory=Counter)  # reader -> reads that found data
    problems: list[str] = field(default_factory=list)

    def assert_clean(self) -> None:
        assert not self.problems, self.problems[:5]
        assert self.reads["DuckDB"] > 0 and self.reads["pyarrow"] > 0, self.reads


@contextmanager
def polling_sessions(sessions: Path, whole: Counter) -> Iterator[Polled]:
    """Poll `sessions` until the block ends; `whole` is each batch's session count in a
    clean run (what a whole batch holds)."""
    polled, done = Polled(), threading.Event()

    def check(reader: str, table: pa.Table) -> None:
        keys = list(zip(table["user_id"].to_pylist(), table["start_time"].to_pylist(),
                        strict=True))  # fmt: skip
        if len(keys) != len(set(keys)):
            polled.problems.append(f"{reader} saw a session twice")
        seen = Counter(table["batch_id"].to_pylist())
        if any(n != whole[b] for b, n in seen.items()):
            polled.problems.append(f"{reader} saw part of a batch: {dict(seen)} of {dict(whole)}")
        if table.num_rows:
            polled.reads[reader] += 1

    def poll() -> None:
        con = duckdb.connect()
        query = (f"SELECT batch_id, user_id, start_time FROM read_parquet("
                 f"'{sessions}/**/*.parquet', hive_partitioning=true)")  # fmt: skip
        while not done.wait(0.05):  # a pause between reads leaves the writer its share
            if not any(sessions.glob("batch_id=*")):
                continue
            try:
                check("DuckDB", con.sql(query).to_arrow_table())
                data = ds.dataset(str(sessions), format="parquet", partitioning="hive")
                check("pyarrow", data.to_table(columns=["batch_id", "user_id", "start_time"]))
            except Exception as e:  # noqa: BLE001 - every error is a finding
                polled.problems.append(f"{type(e).__name__}: {e}")

    poller = threading.Thread(target=poll)
    poller.start()
    try:
        yield polled
    finally:
        done.set()
        poller.join()
