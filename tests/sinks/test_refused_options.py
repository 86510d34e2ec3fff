"""Options a sink or an output would reject at batch 0 are refused before anything is
recorded: kept field names that are output columns (or too long for PostgreSQL), PostgreSQL
schema names, Kafka topic prefixes, job names. A refused start leaves no checkpoint behind, so the
corrected command runs."""

from __future__ import annotations

import os
from dataclasses import replace

import pytest

from sessionize.base_schema import RESERVED_COLUMNS
from sessionize.commands.stream import StreamOptions, run_stream
from sessionize.content import Conversion, SessionContent
from sessionize.errors import ConfigError
from sessionize.mapping import EventMapping
from sessionize.schema import layout
from tests.helpers import sessionize

RICH = EventMapping(
    keep=(("site", "source.site"),),
    last=(("cart", "cart.id"),),
    change="campaign",
    gap="gap_s",
    url="u",
    referrer="r",
    user_agent="ua",
    session_columns=2,
    content=SessionContent(conversions=(Conversion("purchase", "buy", "order.total"),)),
    user_type="string",
)
# Columns the sinks add to the outputs' schemas: the PostgreSQL staging tables' (`part`),
# Kafka records' (`position`), every output's `batch_id`.
ADDED = {"batch_id", "part", "position"}


@pytest.mark.parametrize("version", [2, 3])
def test_every_output_column_is_a_name_kept_fields_cannot_take(version):
    lay = layout(replace(RICH, session_columns=version))
    mine = {"site", "cart"} | {c for c in lay.sessions.names if c.startswith("purchase_")}
    mine |= {"purchase_value_json"}
    schemas = [*lay.outputs.values(), lay.open_sessions, lay.stored]
    columns = {name for schema in schemas for name in schema.names} | ADDED
    assert columns - mine <= RESERVED_COLUMNS, sorted(columns - mine - RESERVED_COLUMNS)


@pytest.mark.parametrize(("keep", "conversion"), [
    ((("updated_batch", "x"),), None), ((("part", "x"),), None), ((("Batch_Id", "x"),), None),
    ((("n" * 64, "x"),), None), ((), Conversion("c" * 60, "buy", "v")),
])  # fmt: skip
def test_kept_names_and_conversions_outputs_would_refuse(keep, conversion):
    content = SessionContent(conversions=(conversion,) if conversion else ())
    with pytest.raises(ConfigError):
        EventMapping(keep=keep, content=content, session_columns=2)


def _assert_refused(done, fragment: str, checkpoint) -> None:
    assert done.returncode == 2, done.stderr[-2000:]
    assert done.stderr.count("\n") == 1 and fragment in done.stderr, done.stderr[-2000:]
    assert not checkpoint.exists(), sorted(p.name for p in checkpoint.rglob("*"))


def test_refused_starts_leave_no_checkpoint_then_the_corrected_command_runs(
    spark, tmp_path, pg_output
):
    hour = tmp_path / "in" / "event_date=2026-11-01" / "event_hour=10"
    hour.mkdir(parents=True)
    (hour / "a.json").write_text(
        '{"user_id": 7, "event_time": "2026-11-01T10:00:00Z", "page": {"current": "a"}}\n'
    )
    chk = tmp_path / "chk"
    base = ["stream", "--input", str(tmp_path / "in"), "--checkpoint", str(chk)]
    broker = os.environ["SESSIONIZE_TEST_KAFKA"].removeprefix("kafka://").rstrip("/")
    bad_schema = pg_output.replace("?schema=", "?schema=Bad_")
    cases = [
        (
            [
                "--output",
                str(tmp_path / "out"),
                "--output-format",
                "delta",
                "--open-sessions",
                "--keep-fields",
                "updated_batch=technical.browser",
            ],
            "'updated_batch' cannot name",
        ),
        (["--output", bad_schema], "schema='Bad_"),
        (["--output", f"kafka://{broker}/bad prefix"], "Kafka topic names take only"),
        (["--output", f'kafka://{broker}/"q"'], "Kafka topic names take only"),
        (["--output", f"kafka://{broker}/{'p' * 300}"], "a topic prefix of at most 234"),
        (["--output", str(tmp_path / "out"), "--job", "a/b"], "job name 'a/b' must be"),
    ]
    for flags, fragment in cases:
        _assert_refused(sessionize(*base, *flags, timeout=180), fragment, chk)
    opts = StreamOptions(
        input=str(tmp_path / "in"), output=pg_output, checkpoint=str(chk), partitions=1
    )
    [record] = run_stream(opts, spark, on_batch=lambda _: None)
    assert record["batch"]["records"] == 1
