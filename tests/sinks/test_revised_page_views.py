"""Which sessions' page views a revising batch replaces (`sinks/revised_rows.touched` for
Delta, PostgreSQL and Iceberg; `kafka_revisions.revised_records` for Kafka): those it
writes page views for, those it retracts, and those revised into a session without page
views, whose old ones must go; a session only renumbered by the users step keeps its own."""

from __future__ import annotations

import json

import pyarrow as pa

from sessionize.sinks.kafka_revisions import revised_records
from sessionize.sinks.revised_rows import touched


def staged() -> dict[str, pa.Table]:
    # A: revised with page views; B: renumbered only (page views kept, none in the batch);
    # C: revised into a session without page views (a late close event cut them off);
    # D: retracted; N: first written.
    revisions = pa.table(
        {
            "session_id": ["A", "B", "C", "D"],
            "revision": [1, 2, 1, 3],
            "retracted": [False, False, False, True],
            "page_view_count": [2, 3, 0, None],
            "batch_id": [5, 5, 5, 5],
        }
    )
    views = pa.table({"session_id": ["A", "A"], "page": ["/a", "/b"], "batch_id": [5, 5]})
    first = pa.table({"session_id": ["N"], "page_view_count": [1], "batch_id": [5]})
    first_views = pa.table({"session_id": ["N"], "page": ["/n"], "batch_id": [5]})
    return {
        "sessions": first,
        "session_revisions": revisions,
        "page_views": first_views,
        "page_view_revisions": views,
    }


def test_tables_replace_the_page_views_of_revised_retracted_and_emptied_sessions():
    t = touched(staged())
    every, replaced = t.of("page_views")
    assert sorted(replaced["session_id"].to_pylist()) == ["A", "C", "D"]
    assert sorted(every["session_id"].to_pylist()) == ["A", "C", "D", "N"]
    assert sorted(t.of("sessions")[1]["session_id"].to_pylist()) == ["A", "B", "C", "D"]


def test_kafka_writes_a_tombstone_for_an_emptied_session_and_nothing_for_a_renumbered_one():
    records = revised_records(staged(), 5, renumbered=True)["page_views"]
    by_key = {key.decode(): value for key, value in records}
    assert sorted(by_key) == ["A", "C", "D", "N"]
    assert by_key["C"] is None and by_key["D"] is None
    assert [v["page"] for v in json.loads(by_key["A"])["page_views"]] == ["/a", "/b"]
