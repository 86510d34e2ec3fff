"""A processor's declared outputs on PostgreSQL and Kafka, through the sinks sessions use: a
table or a topic per output, the replaced output's key from its declaration, against the
plain loop of test_running_totals through restarts."""

from __future__ import annotations

from examples.running_totals import TOTALS
from sessionize import stateful
from tests.sinks.conftest import _pg_rows, pg_output  # noqa: F401 - a fixture
from tests.sinks.kafka_consumer import kafka_uri, read_topic

from . import test_running_totals
from .helpers import ORDER_COLUMNS
from .test_delta_outputs import SPLIT, latest_totals


def _run_split(spark, output: str, state: str) -> None:
    for batch in SPLIT:  # every run is a new engine on the same output and state: a restart
        df = spark.createDataFrame(batch, ORDER_COLUMNS)
        stateful.run(df, latest_totals(), output=output, state=f"files:{state}", partitions=2)


def _by_batch(rows: list[dict]) -> list[set[tuple]]:
    got = [set() for _ in SPLIT]
    for row in rows:
        got[row["batch_id"]].add((row["customer_id"], row["orders"], row["total"]))
    return got


def _final() -> list[tuple]:
    (final,) = test_running_totals.reference([[o for b in SPLIT for o in b]])
    return sorted(final)


def test_postgresql_takes_a_processors_outputs(spark, tmp_path, pg_output):  # noqa: F811
    _run_split(spark, pg_output, str(tmp_path / "state"))
    totals = _pg_rows(pg_output, "totals").to_pylist()
    assert _by_batch(totals) == test_running_totals.reference(SPLIT)
    latest = _pg_rows(pg_output, "latest")
    assert latest.column_names == TOTALS.names  # the declared columns, no batch_id
    assert sorted(tuple(r.values()) for r in latest.to_pylist()) == _final()


def test_kafka_takes_a_processors_outputs(spark, tmp_path):
    output = kafka_uri(tmp_path)
    _run_split(spark, output, str(tmp_path / "state"))
    assert _by_batch(read_topic(output, "totals")) == test_running_totals.reference(SPLIT)
    # The replaced output: one record per touched key, keyed by customer_id, holding the
    # key's rows; the last record of each key (a compacted topic) is the table.
    last: dict[str, list[dict]] = {}
    for record in read_topic(output, "latest"):
        assert record["key"] == str(record["customer_id"]), record
        last[record["key"]] = record["latest"]
    rows = [tuple(r[c] for c in TOTALS.names) for key_rows in last.values() for r in key_rows]
    assert sorted(rows) == _final()
