"""Schema 3 end to end: `generate --web-data` across midnight with the midnight and
max-duration splits, in batch mode and streamed file by file through our store and Spark's
two state stores; every output of the sessions closed by the stream's last watermark is
the batch's, so sources kept across splits travel through every state (the carry rows).
The columns' values are checked against a reference in tests/logic/test_carried_v3.py."""

from __future__ import annotations

from datetime import UTC, datetime

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from sessionize.commands.batch import BatchOptions, run_batch
from sessionize.commands.stream import StreamOptions, run_stream
from sessionize.config import SessionRules
from sessionize.content import Conversion, SessionContent
from sessionize.mapping import EventMapping
from tests.helpers import generate, read_output

START = datetime(2026, 11, 1, 22, tzinfo=UTC)
MIN = 60_000_000
RULES = SessionRules(max_duration_us=20 * MIN, split_at_midnight=True)
MAPPING = EventMapping(
    url="page.url",
    referrer="page.referrer",
    user_agent="technical.user_agent",
    session_columns=3,
    content=SessionContent(
        ping_action="ping", conversions=(Conversion("purchase", "purchase", "order.value"),)
    ),
)


@pytest.fixture(scope="module")
def batch_run(spark, tmp_path_factory):
    root = tmp_path_factory.mktemp("v3")
    inp = generate(
        root / "in",
        start=START,
        hours=3,
        users=150,
        events_per_hour=1500,
        web_data=True,
        invalid_rate=0.0,
        late_rate=0.0,
        files_per_hour=2,
    )
    run_batch(
        BatchOptions(
            input=str(inp),
            output=str(root / "batch"),
            start=START,
            end=START.replace(day=2, hour=0),
            partitions=2,
            rules=RULES,
            mapping=MAPPING,
        ),
        spark,
        on_hour=lambda _: None,
    )
    return root, inp


def _differences(got: pa.Table, want: pa.Table) -> str:
    """What differs between two tables of the same rows, for the assertion's message."""
    if got.num_rows != want.num_rows or got.schema != want.schema:
        same = got.schema == want.schema
        return f"{got.num_rows} rows, {want.num_rows} wanted; schemas equal: {same}"
    out = []
    for name in got.column_names:
        a, b = got[name].to_pylist(), want[name].to_pylist()
        rows = [i for i in range(len(a)) if a[i] != b[i]]
        if rows:
            out.append(f"{name}: {len(rows)} rows, e.g. {a[rows[0]]!r} != {b[rows[0]]!r}")
    return "; ".join(out)


def _closed_by(table: pa.Table, sessions: pa.Table, watermark: int, key: str) -> pa.Table:
    """`table`'s rows of the sessions closed before `watermark`."""
    closed = sessions.filter(pc.less(pc.cast(sessions["closed_at"], "int64"), watermark))
    if key == "session_id" and table is sessions:
        return closed
    return table.filter(pc.is_in(table["session_id"], closed["session_id"]))


@pytest.mark.parametrize("state", ["files", "spark-rocksdb", "spark-hdfs"])
def test_batch_equals_stream_in_every_output(spark, batch_run, tmp_path, state):
    root, inp = batch_run
    records = run_stream(
        StreamOptions(
            input=str(inp),
            output=str(tmp_path / "out"),
            checkpoint=str(tmp_path / "chk"),
            state=state,
            partitions=2,
            max_files_per_trigger=1,
            rules=RULES,
            mapping=MAPPING,
        ),
        spark,
        on_batch=lambda _: None,
    )
    assert len(records) >= 4 and records[-1]["totals"]["late"] == 0
    watermark = records[-1]["watermark"]
    b_sessions = read_output(root / "batch", "sessions", with_batch=False)
    s_sessions = read_output(tmp_path / "out", "sessions", with_batch=False)
    want = _closed_by(b_sessions, b_sessions, watermark, "session_id")
    assert s_sessions.num_rows > 50
    assert s_sessions.equals(want), _differences(s_sessions, want)
    reasons = set(s_sessions["end_reason"].to_pylist())
    assert {"midnight", "max_duration"} <= reasons, reasons
    continued = s_sessions.filter(pc.is_valid(s_sessions["continues_session_id"]))
    assert continued.num_rows > 0  # sources kept across splits, through the state
    for name in ("page_views", "events"):
        b = read_output(root / "batch", name, with_batch=False)
        s = read_output(tmp_path / "out", name, with_batch=False)
        want = _closed_by(b, b_sessions, watermark, "x")
        assert s.num_rows > 0 and s.equals(want), f"{name}: {_differences(s, want)}"
