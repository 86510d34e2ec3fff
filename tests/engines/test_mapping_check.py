"""Mapped paths that match nothing are said: one warning line per flag and path, with the
nearest field name the input holds, once per run (after the first batch that brings the
run to 1,000 valid events, or at the end of a batch run); the batch record keeps it for
`status`, and the Python API warns it (`MappingWarning`)."""

from __future__ import annotations

import json
import os
import warnings
from datetime import UTC, datetime, timedelta

import pyarrow as pa
import pytest

from sessionize import Sessionizer
from sessionize.commands.batch import BatchOptions, run_batch
from sessionize.commands.status import batch_status, describe
from sessionize.commands.stream import StreamOptions, run_stream
from sessionize.content import Conversion, SessionContent
from sessionize.engines.mapping_check import CHECKED_EVENTS, count_present
from sessionize.errors import MappingWarning
from sessionize.mapping import EventMapping

H0 = datetime(2026, 11, 1, tzinfo=UTC)


def _segment_event(i: int, t: datetime) -> dict:
    """A Segment-style track call."""
    return {
        "anonymousId": f"a{i % 37}",
        "timestamp": t.strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
        "type": "track",
        "event": "Order Completed" if i % 50 == 7 else "Page Viewed",
        "context": {
            "page": {
                "url": f"https://shop.example/p{i % 9}?utm_source=mail",
                "path": f"/p{i % 9}",
                "referrer": "https://mail.example/",
            },
            "userAgent": "Mozilla/5.0",
            "campaign": {"name": "spring"},
        },
        "properties": {"revenue": 12.5, "currency": "EUR"},
    }


def _write(root, hours: int, per_hour: int, files_per_hour: int = 1) -> None:
    n = 0
    for h in range(hours):
        d = root / f"event_date=2026-11-01/event_hour={h:02d}"
        d.mkdir(parents=True)
        for f in range(files_per_hour):
            lines = []
            for k in range(per_hour // files_per_hour):
                t = H0 + timedelta(hours=h, seconds=(f * per_hour // files_per_hour + k) * 3)
                lines.append(json.dumps(_segment_event(n, t)))
                n += 1
            path = d / f"part-{f}.json"
            path.write_text("\n".join(lines) + "\n")
            os.utime(path, (1_800_000_000 + n, 1_800_000_000 + n))  # read in this order


TYPOS = EventMapping(
    user="anonymousId",
    user_type="string",
    time="timestamp",
    page="context.page.path",
    action="evnt",  # typo of `event`
    keep=(("campaign", "context.campain.name"),),  # typo of `campaign`
    url="context.page.uri",  # typo of `url`
    referrer="context.page.referrer",
    user_agent="context.userAgent",
    change="context.campaign.name",
    session_columns=2,
    content=SessionContent(
        conversions=(
            # every event is a `view` with the action field's typo; `revenu`: a typo too
            Conversion("order", "view", "properties.revenu"),
        )
    ),
)
SAID = {
    "--action-field evnt": "did you mean event?",
    "--keep-fields campaign=context.campain.name": "did you mean context.campaign.name?",
    "--url-field context.page.uri": "did you mean context.page.url?",
    "--conversion order=view,value=properties.revenu": "did you mean properties.revenue?",
}


def _said(lines: list[str]) -> dict[str, str]:
    """flag and path -> the end of its warning line, for the lines that are such."""
    out = {}
    for line in lines:
        if line.startswith("warning: ") and " matched nothing: " in line:
            head, _, tail = line.removeprefix("warning: ").partition(" matched nothing: ")
            assert head not in out, f"said twice: {line}"
            out[head] = tail
    return out


def test_counts_are_those_of_a_plain_loop():
    rows = [
        {
            "action": "view",
            "campaign": None,
            "change_value": "x",
            "url": None,
            "order_value_json": None,
        },
        {
            "action": "view",
            "campaign": None,
            "change_value": None,
            "url": None,
            "order_value_json": "5",
        },
        {
            "action": "Page Viewed",
            "campaign": None,
            "change_value": "y",
            "url": None,
            "order_value_json": None,
        },
    ]
    for r in rows:
        r.update(referrer="r", user_agent=None)
    table = pa.Table.from_pylist(rows)
    counts = count_present(TYPOS, table)
    assert counts["events"] == 3
    assert counts["actions"] == sum(r["action"] != "view" for r in rows)
    for column in ("campaign", "change_value", "url", "referrer", "user_agent"):
        assert counts[column] == sum(r[column] is not None for r in rows), column
    buys = [r for r in rows if r["action"] == "view"]
    assert counts["action:order"] == len(buys)
    assert counts["value:order"] == sum(r["order_value_json"] is not None for r in buys)


def test_a_batch_run_says_each_path_that_matched_nothing_once_at_its_end(spark, tmp_path):
    """Fewer than 1,000 events over two hours: judged after the last one. Paths that match
    (the referrer, the user agent, the field change) are not said; `status` says the same."""
    _write(tmp_path / "in", hours=2, per_hour=300)
    lines: list[str] = []
    opts = BatchOptions(
        input=str(tmp_path / "in"),
        output=str(tmp_path / "out"),
        start=H0,
        end=H0 + timedelta(hours=1),
        partitions=2,
        mapping=TYPOS,
    )
    with warnings.catch_warnings(record=True) as warned:
        warnings.simplefilter("always")
        records = run_batch(opts, spark, on_hour=lines.append)
    said = _said(lines)
    assert set(said) == set(SAID)
    for flag, hint in SAID.items():
        assert said[flag].endswith(hint), said[flag]
    assert "absent or null in all 600 events so far" in said["--url-field context.page.uri"]
    assert said["--conversion order=view,value=properties.revenu"].startswith(
        "the value is absent or null in all 600 view events so far"
    )
    assert "mapping_check" not in records[0] and "mapping_check" in records[1]
    assert sorted(str(w.message) for w in warned if w.category is MappingWarning) == sorted(
        line for line in lines if " matched nothing: " in line
    )
    assert _said(describe(batch_status(str(tmp_path / "out")))) == said


def test_a_stream_judges_once_after_the_batch_that_reaches_1000_events(spark, tmp_path):
    """Batches of 400 events: judged after the third (1,200 events), and not again."""
    _write(tmp_path / "in", hours=1, per_hour=2000, files_per_hour=5)
    lines: list[str] = []
    opts = StreamOptions(
        input=str(tmp_path / "in"),
        output=str(tmp_path / "out"),
        checkpoint=str(tmp_path / "chk"),
        partitions=2,
        max_files_per_trigger=1,
        mapping=TYPOS,
    )
    records = run_stream(opts, spark, on_batch=lines.append)
    checked = [r["version"] for r in records if "mapping_check" in r]
    assert checked == [2] and CHECKED_EVENTS <= 3 * 400
    assert set(_said(lines)) == set(SAID)
    assert records[2]["mapping_check"]["events"] == 1200


def test_the_python_api_warns_and_a_right_mapping_says_nothing(spark, tmp_path):
    _write(tmp_path / "in", hours=1, per_hour=1200)
    events = spark.readStream.text(str(tmp_path / "in"))
    s = Sessionizer(
        user="anonymousId",
        user_type="string",
        time="timestamp",
        page="context.page.path",
        url="context.page.uri",
        partitions=2,
    )
    with pytest.warns(MappingWarning, match="--url-field context.page.uri matched nothing"):
        s.start(
            events,
            output=str(tmp_path / "out"),
            checkpoint=str(tmp_path / "chk"),
            on_batch=lambda _: None,
        ).wait()
    right = Sessionizer(
        user="anonymousId",
        user_type="string",
        time="timestamp",
        page="context.page.path",
        url="context.page.url",
        partitions=2,
    )
    lines: list[str] = []
    with warnings.catch_warnings():
        warnings.simplefilter("error", MappingWarning)
        records = right.start(
            events,
            output=str(tmp_path / "out2"),
            checkpoint=str(tmp_path / "chk2"),
            on_batch=lines.append,
        ).wait()
    assert records[0]["mapping_check"] == {"events": 1200, "unmatched": []}
    assert not _said(lines)
