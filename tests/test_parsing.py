"""Every line becomes a valid event or an invalid line with a reason (docs/design.md, "Events")."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from sessionize.parsing import parse

VALID = (
    '{"user_id": 342290, "event_time": "2019-10-10T15:06:45+00:00", '
    '"visit_id": "2f83", "action": "click", '
    '"page": {"current": "category 18", "previous": "article category 2-10"}, '
    '"source": {"site": "mysite.com", "api_version": "v3"}, '
    '"user": {"ip": "71.106.102.164", "latitude": -27.07, "longitude": -65.97}, '
    '"technical": {"browser": "Firefox 53", "os": "Android 8.1", "lang": "en", '
    '"network": "adsl", "device": {"type": "tablet", "version": "Galaxy Tab S3"}}}'
)


def _parse(spark, lines, errors=None):
    errors = errors or [None] * len(lines)
    raw = spark.createDataFrame(
        [
            (line, err, f"f.json:{i}")
            for i, (line, err) in enumerate(zip(lines, errors, strict=True))
        ],
        "value string, error string, source string",
    )
    return [r.asDict() for r in parse(raw).collect()]


def test_full_event_maps_every_field(spark):
    (row,) = _parse(spark, [VALID])
    assert row["reason"] is None and row["raw"] is None
    assert row["user_id"] == 342290
    assert row["event_time"].replace(tzinfo=None) == datetime(2019, 10, 10, 15, 6, 45)
    assert row["page"] == "category 18"
    assert row["action"] == "click"
    assert (row["site"], row["api_version"]) == ("mysite.com", "v3")
    assert (row["browser"], row["language"], row["device_type"]) == ("Firefox 53", "en", "tablet")
    assert row["source"] == "f.json:0"


def test_minimal_event_defaults_action_to_view(spark):
    (row,) = _parse(
        spark, ['{"user_id": 1, "event_time": "2026-01-01T00:00:00", "page": {"current": "home"}}']
    )
    assert row["reason"] is None
    assert row["action"] == "view"
    assert row["site"] is None


def test_offsetless_time_is_utc_and_offsets_are_converted(spark, monkeypatch):
    rows = _parse(
        spark,
        [
            '{"user_id": 1, "event_time": "2026-01-01T10:00:00", "page": {"current": "a"}}',
            '{"user_id": 1, "event_time": "2026-01-01T10:00:00+02:00", "page": {"current": "a"}}',
            '{"user_id": 1, "event_time": "2026-01-01T10:00:00.123Z", "page": {"current": "a"}}',
        ],
    )
    # Spark returns naive datetimes in the driver's local zone; compare epoch instants.
    got = [r["event_time"].timestamp() for r in rows]
    want = [
        datetime(2026, 1, 1, 10, tzinfo=UTC).timestamp(),
        datetime(2026, 1, 1, 8, tzinfo=UTC).timestamp(),
        datetime(2026, 1, 1, 10, 0, 0, 123000, tzinfo=UTC).timestamp(),
    ]
    assert got == pytest.approx(want)


INVALID = [
    ("not json", "not a JSON object"),
    ('{"user_id": 1, "event_time": "2026-01-01T00:00:00", "page": {"curr', "not a JSON object"),
    ("[1, 2]", "not a JSON object"),
    ("", "empty line"),
    ('{"event_time": "2026-01-01T00:00:00", "page": {"current": "a"}}', "missing user_id"),
    (
        '{"user_id": "12", "event_time": "2026-01-01T00:00:00", "page": {"current": "a"}}',
        "user_id: expected an integer",
    ),
    (
        '{"user_id": 1.5, "event_time": "2026-01-01T00:00:00", "page": {"current": "a"}}',
        "user_id: expected an integer",
    ),
    ('{"user_id": 1, "page": {"current": "a"}}', "missing event_time"),
    (
        '{"user_id": 1, "event_time": "yesterday", "page": {"current": "a"}}',
        "event_time is not an ISO-8601 timestamp",
    ),
    (
        '{"user_id": 1, "event_time": "123", "page": {"current": "a"}}',
        "event_time is not an ISO-8601 timestamp",
    ),
    ('{"user_id": 1, "event_time": "2026-01-01T00:00:00", "page": {}}', "missing page.current"),
    ('{"user_id": 1, "event_time": "2026-01-01T00:00:00"}', "missing page.current"),
    (
        '{"user_id": 1, "event_time": "2026-01-01T00:00:00", "page": "home"}',
        "page: expected an object",
    ),
]


@pytest.fixture(scope="module")
def invalid_rows(spark):
    """All invalid lines parsed in one Spark job, keyed by their raw line (a line parsed as
    valid would have no raw line, and its test fails on the lookup)."""
    rows = _parse(spark, [line for line, _ in INVALID])
    return {r["raw"]: r for r in rows}


@pytest.mark.parametrize(("line", "reason"), INVALID)
def test_invalid_lines_get_a_reason_and_keep_the_raw_line(invalid_rows, line, reason):
    row = invalid_rows[line]
    assert row["reason"] == reason
    assert row["source"] == f"f.json:{[line for line, _ in INVALID].index(line)}"


def test_source_error_becomes_the_reason(spark):
    (row,) = _parse(spark, ["a\\xff"], errors=["not UTF-8 (byte 1)"])
    assert row["reason"] == "not UTF-8 (byte 1)"
    assert row["raw"] == "a\\xff"
