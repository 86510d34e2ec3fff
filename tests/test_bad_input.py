"""Malformed lines and files: each kind gets its documented reason, nothing is lost.

One directory holds a file per kind; ONE Spark job reads it with the file source and parses
it (`files.listed_files` + `parsing.parse` decoding them with `files.decode_listed` in its
own task, as the engines do), then the table below is checked per file: the
reasons of its lines in order (None = a valid event), so that lines in = valid events +
invalid lines for every file, and in total.
"""

from __future__ import annotations

import gzip
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyspark.sql import functions as F

from sessionize.parsing import parse
from sessionize.sources.files import decode_listed, listed_files
from sessionize.sources.lines import decode_file

NOW = datetime(2026, 11, 1, 12, tzinfo=UTC)
MAX_FUTURE_US = 86_400_000_000


def event(**fields) -> str:
    base = {"user_id": 7, "event_time": "2026-11-01T10:00:00Z", "page": {"current": "home"}}
    base.update(fields)
    return json.dumps(base)


def raw_event(user_id: str = "7", extra: str = "") -> str:
    """An event written by hand, for what json.dumps cannot produce."""
    return (
        f'{{"user_id": {user_id}, "event_time": "2026-11-01T10:00:00Z", '
        f'"page": {{"current": "home"}}{extra}}}'
    )


def lines(*texts: str) -> bytes:
    return "".join(t + "\n" for t in texts).encode()


OK = None
GOOD = event()
# 120 numbered valid lines, gzipped, cut in the middle of the compressed stream.
_GZ_LINES = [event(user_id=i) for i in range(120)]
_GZ = gzip.compress(lines(*_GZ_LINES))
_GZ_CUT = _GZ[: len(_GZ) // 2]
_GZ_READ = sum(
    1
    for line in gzip.GzipFile(fileobj=__import__("io").BytesIO(_GZ_CUT))
    .read1(1 << 30)
    .split(b"\n")[:-1]
)
DEEP = "[" * 5000 + "]" * 5000
BIG_PAD = "x" * (3 << 20)

# file name -> (bytes, reasons of its lines in order). Reasons "file:..." are prefixes.
CASES: dict[str, tuple[bytes, list[str | None]]] = {
    "valid.json": (lines(GOOD, event(action="click")), [OK, OK]),
    "strings_that_look_like_other_types.json": (
        lines(event(page={"current": "5"}, action="true", source={"site": "{x}"})),
        [OK],
    ),
    "not_object_array.json": (lines("[1, 2]"), ["not a JSON object"]),
    "not_object_scalars.json": (lines("42", '"text"', "null", "true"), ["not a JSON object"] * 4),
    "syntax_error.json": (lines('{"user_id": 1, "event_time": '), ["not a JSON object"]),
    "user_id_string.json": (lines(event(user_id="12")), ["user_id: expected an integer"]),
    "user_id_float.json": (lines(event(user_id=1.5)), ["user_id: expected an integer"]),
    "user_id_bool.json": (lines(event(user_id=True)), ["user_id: expected an integer"]),
    "user_id_too_large.json": (
        lines(raw_event("99999999999999999999"), raw_event("9223372036854775807")),
        ["user_id: integer out of range (64-bit)", OK],
    ),
    "user_id_null.json": (lines(event(user_id=None)), ["missing user_id"]),
    "event_time_number.json": (
        lines(event(event_time=1761991200)),
        ["event_time: expected a string"],
    ),
    "event_time_null.json": (lines(event(event_time=None)), ["missing event_time"]),
    "action_object.json": (lines(event(action={"a": 1})), ["action: expected a string"]),
    "page_string.json": (lines(event(page="home")), ["page: expected an object"]),
    "page_current_number.json": (
        lines(event(page={"current": 5})),
        ["page.current: expected a string"],
    ),
    "page_current_missing.json": (lines(event(page={})), ["missing page.current"]),
    "source_array.json": (lines(event(source=["a"])), ["source: expected an object"]),
    "source_site_bool.json": (
        lines(event(source={"site": False})),
        ["source.site: expected a string"],
    ),
    "source_api_version_number.json": (
        lines(event(source={"api_version": 3})),
        ["source.api_version: expected a string"],
    ),
    "technical_string.json": (lines(event(technical="x")), ["technical: expected an object"]),
    "technical_browser_object.json": (
        lines(event(technical={"browser": {}})),
        ["technical.browser: expected a string"],
    ),
    "technical_lang_number.json": (
        lines(event(technical={"lang": 1})),
        ["technical.lang: expected a string"],
    ),
    "technical_device_string.json": (
        lines(event(technical={"device": "phone"})),
        ["technical.device: expected an object"],
    ),
    "technical_device_type_array.json": (
        lines(event(technical={"device": {"type": []}})),
        ["technical.device.type: expected a string"],
    ),
    "duplicate_key.json": (lines(raw_event(extra=', "user_id": 8')), ["duplicate key: user_id"]),
    "nul_byte.json": (
        lines(raw_event(extra=', "x": "a\x00b"'), event(page={"current": "a\u0000b"})),
        ["not a JSON object", OK],
    ),
    "deep_nesting.json": (
        lines(DEEP, raw_event(extra=f', "x": {DEEP}')),
        [
            "not a JSON object",
            "not a JSON object",
        ],
    ),
    "multi_megabyte.json": (lines(event(pad=BIG_PAD), BIG_PAD), [OK, "not a JSON object"]),
    "bom.json": (b"\xef\xbb\xbf" + lines(GOOD, GOOD), [OK, OK]),
    "crlf.json": (lines(GOOD, GOOD).replace(b"\n", b"\r\n"), [OK, OK]),
    "lone_cr.json": ((GOOD + "\r" + GOOD).encode(), [OK, OK]),
    "empty_file.json": (b"", []),
    "only_newline.json": (b"\n", ["empty line"]),
    "blank_lines.json": (lines(GOOD, "", "   ", GOOD), [OK, "empty line", "empty line", OK]),
    "no_trailing_newline.json": (lines(GOOD) + GOOD.encode(), [OK, OK]),
    "not_utf8.json": (
        lines(GOOD) + b'{"user_id": 1, "x": "\xff"}\n' + b"\xc3\x28\n",
        [OK, "not UTF-8 (byte 21)", "not UTF-8 (byte 0)"],
    ),
    "time_not_iso.json": (
        lines(
            event(event_time="yesterday"),
            event(event_time="2026-13-45T99:99:99"),
            event(event_time="+10000-01-01T00:00:00"),
        ),
        ["event_time is not an ISO-8601 timestamp"] * 3,
    ),
    "time_far_past.json": (lines(event(event_time="1900-01-01T00:00:00Z")), [OK]),
    "time_future.json": (
        lines(
            event(event_time=(NOW + timedelta(hours=23)).isoformat()),
            event(event_time=(NOW + timedelta(days=2)).isoformat()),
            event(event_time="2099-01-01T00:00:00Z"),
        ),
        [OK, "event_time too far in the future", "event_time too far in the future"],
    ),
    "truncated.json.gz": (
        _GZ_CUT,
        [OK] * _GZ_READ + [f"unreadable file: truncated gzip after {_GZ_READ} lines"],
    ),
    "corrupt.json.gz": (
        _GZ[:10] + b"\x00garbage" * 20,
        ["unreadable file: corrupt gzip after 0 lines (Error -3 while decompressing data: "],
    ),
    "whole.json.gz": (gzip.compress(lines(GOOD)) + gzip.compress(lines(GOOD)), [OK, OK]),
    "name with space %41.json": (lines(GOOD), [OK]),
}


@pytest.fixture(scope="module")
def results(spark, tmp_path_factory) -> dict[str, list[dict]]:
    root: Path = tmp_path_factory.mktemp("bad-input")
    for name, (content, _) in CASES.items():
        (root / name).write_bytes(content)
    now = F.lit(NOW.replace(tzinfo=None)).cast("timestamp")
    parsed = parse(
        listed_files(spark, [str(root)]), now=now, max_future_us=MAX_FUTURE_US, decode=decode_listed
    )
    by_file: dict[str, list[dict]] = {}
    for row in parsed.collect():
        by_file.setdefault(row["source"].rsplit("/", 1)[-1], []).append(row.asDict())
    return by_file


def test_every_line_is_an_event_or_an_invalid_line_and_nothing_else(results):
    assert sorted(results) == sorted(n for n, (_, want) in CASES.items() if want)
    assert sum(len(rows) for rows in results.values()) == sum(len(w) for _, w in CASES.values())


@pytest.mark.parametrize("name", sorted(CASES))
def test_kind_gets_its_reason(results, name):
    _, want = CASES[name]
    rows = results.get(name, [])
    got = [r["reason"] for r in rows]
    assert len(got) == len(want), got
    for g, w in zip(got, want, strict=True):
        if w is not None and w.startswith("unreadable file: corrupt"):
            assert g is not None and g.startswith(w), g
        else:
            assert g == w
    for r in rows:  # valid events keep no raw line; invalid ones keep it (when they have one)
        assert (r["raw"] is None) == (r["reason"] is None) or r["reason"].startswith("unread")


def test_escaped_raw_lines_stay_readable_by_parquet_readers(results, tmp_path):
    rows = results["not_utf8.json"][1:]
    assert [r["raw"] for r in rows] == ['{"user_id": 1, "x": "\\xff"}', "\\xc3("]
    table = pa.table({"raw": [r["raw"] for r in rows]})
    pq.write_table(table, tmp_path / "invalid.parquet")
    assert pq.read_table(tmp_path / "invalid.parquet").column("raw").to_pylist() == [
        r["raw"] for r in rows
    ]


def test_a_truncated_file_keeps_the_lines_before_the_cut_and_its_last_partial_line(results):
    rows = results["truncated.json.gz"]
    assert [r["user_id"] for r in rows[:-1]] == list(range(_GZ_READ))
    partial = _GZ_LINES[_GZ_READ]
    assert rows[-1]["raw"] and partial.startswith(rows[-1]["raw"])


def test_a_file_that_cannot_be_opened_is_one_invalid_row():
    (batch,) = list(decode_file("file:/nonexistent/dir/events.json"))
    assert batch.to_pylist() == [
        {
            "value": None,
            "error": "unreadable file: file not found (deleted after it was listed?) after 0 lines",
            "source": "file:/nonexistent/dir/events.json",
        }
    ]
