"""Hostile lines through a stream into every sink: the stream goes on, and every line is
either an event of the outputs or an `invalid_events` row with a reason, once.

Hypothesis draws one file of lines per sink (few streams, many lines each): extreme and
malformed times, numbers beyond doubles, NUL characters and bytes, lone surrogates, deep
nesting, giant strings, bytes that are not UTF-8, odd URLs, UTMs, referrers and user
agents. Every line carries a tag `T#####X`: a valid event's page starts with it, any other
line holds it in its raw text. A second file holds one event later in the day, whose
watermark closes every session of the first (times beyond `--max-future` are invalid).
Parquet and Kafka read the lines with the block reader (no conversion value mapped); Delta
and PostgreSQL map a conversion value, which Spark's exact parse reads.
"""

from __future__ import annotations

import json
import os
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from sessionize.api.arguments import event_mapping
from sessionize.commands.stream import StreamOptions, run_stream
from sessionize.events.rules import LONE_SURROGATE
from tests.sinks.conftest import read_rows
from tests.sinks.kafka_consumer import read_topic

TIMES = [
    '"0001-01-01T00:00:00Z"',
    '"0000-01-01T00:00:00Z"',
    '"0002-01-01T00:00:00Z"',
    '"0001-12-31T23:00:00-01:00"',
    '"9998-12-31T23:59:59.999999Z"',
    '"9999-12-31T23:59Z"',
    '"1970-01-01T00:00:00Z"',
    '"2026-11-01T10:00:00Z"',
    '"2026-11-01T10:00:00+18:00"',
    '"2026-11-01T10:00:00.123456789Z"',
    "1793527200",
    "1e309",
    "null",
    '"2026-13-01T00:00Z"',
    '"2026-11-01T10:00:00Z\\n"',
]
BIG = "x" * 100_000
PAGES = [
    "",
    "\\u0000",
    "a\\u0000b",
    "\\ud800",
    "\\udc00",
    "\\ud83d\\ude00",
    "\\\\ud800",
    "%00",
    BIG,
    "é\\u2028",
    "\\u0085",
]
USERS = ["{n}", "99999999999999999999", "-0", "1e309", '"{n}"', "1.5", "null", "true"]
UTMS = ["google", "%00", "a%00b", "%ud800", "%ff%fe", "a." * 3000 + "google.com", "%", "\\u0000"]
HOSTS = [
    "www.google.com",
    "a." * 40_000 + "google.com",
    "[::1",
    "%00.example",
    "t.co:99999",
    "\\u0000",
]
AGENTS = [
    "Googlebot/2.1",
    "Mozilla/5.0 (Windows NT 10.0) Chrome/120.0",
    "a" * 100_000,
    "Mozilla\\u0000bot",
    "\\ud800",
]
ACTIONS = ["view", "buy", "browser_close", "a\\u0000"]
BROWSERS = ["Firefox", "Fire\\u0000fox", BIG]
VALUES = ["12.5", "1e309", "-1e309", "NaN", '"49.90"', "1.7976931348623157e308", "{}", "null"]
EXTRAS = [
    "1e309",
    "NaN",
    "-Infinity",
    "[" * 3000 + "]" * 3000,
    '"\\ud800"',
    '"\\u0000"',
    "123456789012345678901234567890",
]
GARBAGE = [b"", b"\x00", b"\xff\xfe", b"{", b"\x00{}", b" \xc3\x28 ", b'{"a": "\x00"}']


def _event(
    i: int,
    time: str = TIMES[7],
    page: str = "",
    utm: str = "google",
    host: str = HOSTS[0],
    agent: str = AGENTS[1],
    browser: str = "Firefox",
    action: str = "view",
    value: str = "12.5",
) -> bytes:
    """Line `i` as an event whose every field is ordinary unless given."""
    return (
        f'{{"user_id": {100_000 + i}, "event_time": {time}, "page": {{"current": '
        f'"T{i:05d}X{page}", "url": "https://shop.example/p?utm_source={utm}&utm_medium=cpc", '
        f'"referrer": "https://{host}/x"}}, "action": "{action}", "technical": {{"browser": '
        f'"{browser}", "ua": "{agent}"}}, "order": {{"total": {value}}}}}'
    ).encode()


# The lines every run holds, whatever Hypothesis draws besides: each kind of line that
# stopped a stream once.
FIXED = [
    lambda i: _event(i, page="a\\u0000b"),
    lambda i: _event(i, browser="Fire\\u0000fox"),
    lambda i: _event(i, utm="%00"),
    lambda i: _event(i, action="a\\u0000"),
    lambda i: f"T{i:05d}X \x00 raw NUL".encode(),
    lambda i: _event(i, page="\\ud800"),
    lambda i: _event(i, action="buy", value="1e309"),
    lambda i: _event(i, time=TIMES[0]),
    lambda i: _event(i, time=TIMES[1]),
    lambda i: _event(i, time=TIMES[5]),
    lambda i: _event(i, agent="a" * 100_000),
    lambda i: _event(i, host=HOSTS[1]),
    lambda i: _event(i, time=TIMES[2]),
]


@st.composite
def hostile_line(draw, i: int) -> bytes:
    """Line `i`: an event with hostile values, or bytes that are not one."""
    tag = f"T{i:05d}X"
    kind = draw(st.integers(0, 9))
    if kind == 0:
        return tag.encode() + draw(st.sampled_from(GARBAGE))
    if kind == 1:
        return f'{{"tag": "{tag}", "x": {"[" * 70}{"]" * 70}}}'.encode()
    pick = lambda options: draw(st.sampled_from(options))  # noqa: E731
    if kind < 6:  # an event with one hostile value, else with several
        one = draw(st.sampled_from(["page", "utm", "host", "agent", "browser", "action"]))
        return _event(
            i,
            **{
                one: pick(
                    {
                        "page": PAGES,
                        "utm": UTMS,
                        "host": HOSTS,
                        "agent": AGENTS,
                        "browser": BROWSERS,
                        "action": ACTIONS,
                    }[one]
                )
            },
        )
    fields = [
        f'"user_id": {pick(USERS).format(n=100_000 + i)}',
        f'"event_time": {pick(TIMES) if draw(st.booleans()) else TIMES[7]}',
        f'"page": {{"current": "{tag}{pick(PAGES)}", "url": "https://shop.example/p?'
        f'utm_source={pick(UTMS)}&utm_medium=cpc", "referrer": "https://{pick(HOSTS)}/x"}}',
        f'"action": "{pick(ACTIONS)}"',
        f'"technical": {{"browser": "{pick(BROWSERS)}", "ua": "{pick(AGENTS)}"}}',
        f'"order": {{"total": {pick(VALUES)}}}',
    ]
    if draw(st.booleans()):
        fields.append(f'"extra": {pick(EXTRAS)}')
    order = draw(st.permutations(fields))
    return ("{" + ", ".join(order) + "}").encode()


OPTIONS = {
    "url": "page.url",
    "referrer": "page.referrer",
    "user_agent": "technical.ua",
    "keep": {"browser": "technical.browser"},
}
CONVERSION = {"conversions": ["purchase=buy,value=order.total"]}


def _output(kind: str, tmp_path: Path, pg_output: str) -> tuple[str, str]:
    if kind == "postgresql":
        return pg_output, "parquet"
    if kind == "kafka":
        broker = os.environ["SESSIONIZE_TEST_KAFKA"].removeprefix("kafka://").rstrip("/")
        return f"kafka://{broker}/h{uuid.uuid4().hex[:10]}", "parquet"
    return str(tmp_path / f"out-{uuid.uuid4().hex[:6]}"), "delta" if kind == "delta" else "parquet"


def _loaded(line: bytes) -> object:
    try:
        return json.loads(line)
    except ValueError:
        return None


def _has_surrogate(value: object) -> bool:
    if isinstance(value, str):
        return any(0xD800 <= ord(c) <= 0xDFFF for c in value)
    if isinstance(value, dict):
        return any(_has_surrogate(k) or _has_surrogate(v) for k, v in value.items())
    return isinstance(value, list) and any(_has_surrogate(v) for v in value)


def _reasons(invalid: list[tuple[str, str | None]], n: int) -> dict[str, str | None]:
    """tag -> reason of the invalid rows."""
    out = {}
    for raw, reason in invalid:
        for i in range(n):
            if f"T{i:05d}X" in raw:
                out[f"T{i:05d}X"] = reason
    return out


def _texts(kind: str, root: str, name: str, column: str) -> list[tuple[str, str | None]]:
    """(column, reason) of every row of output `name`, as a reader of the sink sees it."""
    if kind == "kafka":
        return [(r[column], r.get("reason")) for r in read_topic(root, name)]
    table = read_rows(kind, root, name)
    if table.num_rows == 0:
        return []
    reasons = table["reason"].to_pylist() if "reason" in table.column_names else [None] * len(table)
    return list(zip(table[column].to_pylist(), reasons, strict=True))


@pytest.mark.parametrize("kind", ["parquet", "kafka", "delta", "postgresql"])
# One drawn file per sink; no shrinking (each try is a Spark stream): a failure names the
# lines it is about.
@settings(
    max_examples=1,
    deadline=None,
    database=None,
    phases=[Phase.generate],
    suppress_health_check=list(HealthCheck),
)
@given(data=st.data())
def test_every_hostile_line_is_an_event_or_an_invalid_row_once(
    kind, data, spark, tmp_path_factory, pg_output
):
    tmp_path = tmp_path_factory.mktemp(f"hostile-{kind}")
    n = 160
    lines = [make(i) for i, make in enumerate(FIXED)]
    lines += [data.draw(hostile_line(i)) for i in range(len(FIXED), n)]
    hour = tmp_path / "in" / "event_date=2026-11-01" / "event_hour=10"
    hour.mkdir(parents=True)
    (hour / "a.json").write_bytes(b"\n".join(lines) + b"\n")
    later = datetime.now(UTC) + timedelta(hours=23)  # within --max-future 1d
    closing = hour.parent / "event_hour=11"
    closing.mkdir()
    (closing / "b.json").write_text(
        json.dumps(
            {
                "user_id": 1,
                "event_time": later.strftime("%Y-%m-%dT%H:%M:%SZ"),
                "page": {"current": "closing"},
                "tag": "closing",
            }
        )
        + "\n"
    )
    os.utime(closing / "b.json", (later.timestamp(), later.timestamp()))
    output, fmt = _output(kind, tmp_path, pg_output)
    exact = kind in ("delta", "postgresql")
    mapping = event_mapping({**OPTIONS, **(CONVERSION if exact else {})})
    opts = StreamOptions(
        input=str(tmp_path / "in"),
        output=output,
        checkpoint=str(tmp_path / "chk"),
        partitions=2,
        max_files_per_trigger=1,
        output_format=fmt,
        mapping=mapping,
    )
    records = run_stream(opts, spark, on_batch=lambda _: None)
    assert [r["version"] for r in records] == [0, 1]  # the stream went on past every line

    # every event once, a page view or not (schema 3's `events`: `page_views` holds views only)
    pages = _texts(kind, output, "events", "page")
    invalid = _texts(kind, output, "invalid_events", "raw")
    assert all(reason for _, reason in invalid), "an invalid row without a reason"
    found: dict[str, int] = {}
    for page, _ in pages:
        if page != "closing":
            found[page[:7]] = found.get(page[:7], 0) + 1
    for raw, _ in invalid:
        for i in range(n):
            if f"T{i:05d}X" in raw:
                found[f"T{i:05d}X"] = found.get(f"T{i:05d}X", 0) + 1
    missing = [i for i in range(n) if f"T{i:05d}X" not in found]
    assert not missing, [lines[i][:300] for i in missing[:3]]
    assert set(found.values()) == {1}, [t for t, c in found.items() if c > 1][:5]
    # What a plain json.loads makes of each line: a lone surrogate is invalid for it, and a
    # page written is the line's own (PostgreSQL writes U+0000 as `\x00`).
    for tag, reason in _reasons(invalid, n).items():
        doc = _loaded(lines[int(tag[1:6])])
        if isinstance(doc, dict) and _has_surrogate(doc):
            assert reason == LONE_SURROGATE, (tag, reason)
    for page, _ in pages:
        if page != "closing":
            written = _loaded(lines[int(page[1:6])])["page"]["current"]
            if kind == "postgresql":
                written = written.replace("\x00", "\\x00")
            assert page == written
            assert not _has_surrogate(page)
    totals = records[0]["batch"]
    assert totals["invalid"] == len(invalid) and totals["records"] == n
