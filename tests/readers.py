"""Readers of a live Parquet output, as users run them (README "Reading the outputs"): DuckDB's
`read_parquet` glob and a pyarrow dataset, polling `sessions` in a thread while the test
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
import pyarrow as pa
import pyarrow.dataset as ds


@dataclass
class Polled:
    reads: Counter = field(default_factory=Counter)  # reader -> reads that found data
    problems: list[str] = field(default_factory=list)
    vanished: int = 0  # reads that met a file removed after listing, and read again

    def assert_clean(self) -> None:
        assert not self.problems, self.problems[:5]
        assert self.reads["DuckDB"] > 0 and self.reads["pyarrow"] > 0, self.reads


@contextmanager
def polling_sessions(sessions: Path, whole: Counter, retires: bool = False) -> Iterator[Polled]:
    """Poll `sessions` until the block ends; `whole` is each batch's session count in a
    clean run (what a whole batch holds); `retires`: the block removes published rows, so a
    read may meet a vanished file once and read again."""
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
            read("DuckDB", lambda: con.sql(query).to_arrow_table())
            read("pyarrow", by_pyarrow)

    def by_pyarrow() -> pa.Table:
        data = ds.dataset(str(sessions), format="parquet", partitioning="hive")
        return data.to_table(columns=["batch_id", "user_id", "start_time"])

    def read(reader: str, table: Callable[[], pa.Table]) -> None:
        for attempt in range(3):
            try:
                check(reader, table())
                return
            except Exception as e:  # noqa: BLE001 - every error is a finding
                gone = isinstance(e, FileNotFoundError) or "No such file" in str(e)
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
