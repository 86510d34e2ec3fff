"""A Parquet file's schema against the mapping, judged per file without Spark
(sources/parquet.py): every row of a file that lacks or mistypes a field carries the reason
naming the field and the file's type; a file that is not Parquet is one unreadable row."""

from __future__ import annotations

from datetime import UTC, datetime

import pyarrow as pa
import pyarrow.parquet as pq

from sessionize.mapping import EventMapping
from sessionize.sources.parquet import read_file

T = datetime(2026, 11, 1, tzinfo=UTC)


def _rows(path) -> list[dict]:
    return pa.Table.from_batches(list(read_file(str(path), EventMapping()))).to_pylist()


def test_a_good_file_keeps_its_values_and_has_no_error(tmp_path):
    path = tmp_path / "good.parquet"
    pq.write_table(
        pa.table(
            {
                "user_id": pa.array([7], pa.int32()),
                "event_time": pa.array([T], pa.timestamp("ms")),
                "page": [{"current": "home"}],
                "technical": [{"lang": "en"}],
            }
        ),
        path,
    )
    (row,) = _rows(path)
    assert (row["user_id"], row["event_time"], row["page.current"]) == (
        7,
        "2026-11-01T00:00:00.000000Z",
        "home",
    )
    assert row["technical.lang"] == "en"
    assert (row["action"], row["error"], row["raw"]) == (None, None, None)


def test_a_mistyped_field_makes_every_row_invalid_naming_it(tmp_path):
    path = tmp_path / "bad.parquet"
    pq.write_table(
        pa.table(
            {
                "user_id": ["7", "8"],
                "event_time": [T, T],
                "page": [{"current": "a"}] * 2,
            }
        ),
        path,
    )
    rows = _rows(path)
    assert [r["error"] for r in rows] == [
        "user_id: expected an integer, the Parquet file has string"
    ] * 2
    assert [r["source"] for r in rows] == [str(path)] * 2
    assert '"user_id": "8"' in rows[1]["raw"]


def test_a_file_that_is_not_parquet_is_one_unreadable_row(tmp_path):
    path = tmp_path / "x.parquet"
    path.write_text('{"user_id": 1}\n')
    (row,) = _rows(path)
    assert row["error"].startswith("unreadable file: ")
    assert row["source"] == str(path)
