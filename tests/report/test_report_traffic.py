"""The report's traffic charts (channels, bots, bounce rate and engaged time, conversions;
with identity new vs returning sessions and the first-user channels) over a small
hand-made `sessions` table with those columns: the page's numbers against plain loops over
the rows, every chart drawn in Chromium, and an output without the columns."""

from __future__ import annotations

import re
import subprocess
from collections import defaultdict
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from sessionize.report import build_report
from sessionize.report.traffic import conversion_names
from tests.report.test_report_page import Page, _chromium

H = 3_600_000_000  # µs
T0 = 1_793_491_200_000_000  # 2026-11-01T00:00Z
TRAFFIC_CHARTS = ("channels", "bots", "engagement", "conversions")

# (start hour, minute, channel, bounce, engaged ms, is_bot, purchases, purchase value,
#  signups): bots in two channels, a session without a channel, a purchase without a value.
ROWS = [
    (0, 5, "Organic Search", False, 42_000, False, 1, 30.5, 0),
    (0, 9, "Organic Search", True, 0, False, 0, None, 0),
    (0, 20, "Paid Search", False, 95_000, False, 2, 120.0, 1),
    (0, 31, "Direct", True, 5_000, False, 0, None, 0),
    (0, 40, "Direct", True, 0, True, 0, None, 0),
    (0, 50, "Email", False, 61_000, False, 1, None, 1),
    (1, 2, "Organic Social", False, 15_000, False, 0, None, 0),
    (1, 10, "Direct", False, 33_000, False, 1, 12.25, 0),
    (1, 25, None, True, 0, False, 0, None, 0),
    (1, 30, "Referral", True, 10_000, True, 3, 999.0, 0),
    (1, 45, "Organic Search", False, 27_500, False, 0, None, 2),
    (3, 1, "Paid Search", True, 0, False, 0, None, 0),
]


def _sessions_table() -> pa.Table:
    n = len(ROWS)
    start = [T0 + h * H + m * 60_000_000 for h, m, *_ in ROWS]
    purchase_at = [s if r[6] else None for s, r in zip(start, ROWS, strict=True)]
    signup_at = [s if r[8] else None for s, r in zip(start, ROWS, strict=True)]
    cols = {
        "session_id": [f"s{i}" for i in range(n)],
        "user_id": list(range(n)),
        "start_time": pa.array(start, pa.timestamp("us", "UTC")),
        "end_time": pa.array(start, pa.timestamp("us", "UTC")),
        "duration_ms": [0] * n,
        "event_count": [1] * n,
        "pages": [["home"]] * n,
        "end_reason": ["inactivity"] * n,
        "channel": pa.array([r[2] for r in ROWS], pa.string()),
        "bounce": [r[3] for r in ROWS],
        "engaged": [not r[3] for r in ROWS],
        "engaged_time_ms": pa.array([r[4] for r in ROWS], pa.int64()),
        "is_bot": [r[5] for r in ROWS],
        "converted": [bool(r[6] or r[8]) for r in ROWS],
        "purchase_count": pa.array([r[6] for r in ROWS], pa.int64()),
        "purchase_value": pa.array([r[7] if r[6] else None for r in ROWS], pa.float64()),
        "purchase_first_at": pa.array(purchase_at, pa.timestamp("us", "UTC")),
        "signup_count": pa.array([r[8] for r in ROWS], pa.int64()),
        "signup_value": pa.array([None] * n, pa.float64()),
        "signup_first_at": pa.array(signup_at, pa.timestamp("us", "UTC")),
        "page_view_count": pa.array([1] * n, pa.int64()),
    }
    return pa.table(cols)


def _write_output(root: Path, table: pa.Table) -> Path:
    out = root / "out"
    for batch, part in ((1, table.slice(0, 7)), (2, table.slice(7))):
        path = out / f"sessions/batch_id={batch}/session_date=2026-11-01/part-00000.parquet"
        path.parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(part, path)
    return out


def _cells(html: str, table: str) -> dict[str, list[float]]:
    """Rows of `table-NAME`: first cell's text -> the data-value numbers of the others."""
    part = html[html.index(f'id="table-{table}"') :]
    part = part[: part.index("</table>")]
    rows = {}
    for row in re.findall(r"<tr>(.*?)</tr>", part):
        label = re.sub(r"<[^>]+>", "", re.match(r"<td>(.*?)</td>", row).group(1))
        rows[label] = [float(v) for v in re.findall(r'data-value="([^"]+)"', row)]
    return rows


@pytest.fixture(scope="module")
def report(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("traffic")
    out = _write_output(root, _sessions_table())
    to = root / "report.html"
    build_report(str(out), str(to))
    return to


def test_the_traffic_numbers_are_those_of_the_rows(report):
    html = report.read_text()
    humans = [r for r in ROWS if not r[5]]

    channels: dict[str, int] = defaultdict(int)
    for r in humans:
        channels[r[2] or "(none)"] += 1
    assert {k: int(v[0]) for k, v in _cells(html, "channels").items()} == channels
    assert {k: int(v[0]) for k, v in _cells(html, "bots").items()} == {
        "human": len(humans),
        "bot": len(ROWS) - len(humans),
    }

    per_hour: dict[int, list] = defaultdict(list)
    for r in humans:
        per_hour[r[0]].append(r)
    expected = {}
    for h, rs in per_hour.items():
        bounced = sum(1 for r in rs if r[3])
        expected[f"2026-11-01 {h:02d}:00"] = [
            len(rs),
            bounced / len(rs),
            sum(r[4] for r in rs) / 1000 / len(rs),
        ]
    got = _cells(html, "engagement")
    assert got.keys() == expected.keys()  # hour 02 had no sessions: no row
    for hour, values in expected.items():
        assert got[hour] == pytest.approx(values), hour

    conv: dict[str, list[float]] = {}
    for r in humans:
        channel = r[2] or "(none)"
        for name, count, value in (("purchase", r[6], r[7]), ("signup", r[8], None)):
            c = conv.setdefault(f"{channel} · {name}", [0, 0.0])
            c[0] += count
            c[1] += value or 0.0
    assert _cells(html, "conversions") == conv
    channel_order = [k.split(" · ")[0] for k in _cells(html, "conversions")][::2]
    assert channel_order[:2] == ["Paid Search", "Organic Search"]  # most conversions first


def test_every_traffic_chart_is_drawn_in_chromium(report):
    browser = _chromium()
    flags = ["--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars"]
    dom = subprocess.run(
        [browser, *flags, "--dump-dom", report.as_uri()],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert dom.returncode == 0, dom.stderr[-2000:]
    page = Page(dom.stdout)
    for name in TRAFFIC_CHARTS:
        chart = page.charts[name]
        assert chart["class"] in ("chart", "chart wide"), name
        assert chart["svg"] == 1 and chart["path"] >= 4, (name, chart)


def test_an_output_without_the_columns_says_so_in_place_of_the_charts(tmp_path):
    old = _sessions_table().drop_columns(
        [
            "channel",
            "bounce",
            "engaged",
            "engaged_time_ms",
            "is_bot",
            "converted",
            "purchase_count",
            "purchase_value",
            "purchase_first_at",
            "signup_count",
            "signup_value",
            "signup_first_at",
            "page_view_count",
        ]
    )
    out = _write_output(tmp_path, old)
    to = tmp_path / "r.html"
    build_report(str(out), str(to))
    page = Page(to.read_text())
    for name in TRAFFIC_CHARTS:
        chart = page.charts[name]
        assert chart["class"].endswith("empty") and chart["svg"] == 0, name
        assert "column in sessions" in chart["text"], (name, chart["text"])
    assert page.charts["per-hour"]["svg"] == 1  # the rest of the report is there


def test_conversion_names_need_all_three_columns():
    cols = [
        "event_count",
        "page_view_count",
        "purchase_count",
        "purchase_value",
        "purchase_first_at",
        "lead_count",
        "lead_first_at",
    ]
    assert conversion_names(cols) == ["purchase"]


# Per row of ROWS: `is_new_user` (a stitched user's first session), bots among both.
NEW_USER = [True, False, True, True, True, False, True, False, True, True, False, True]


def test_with_identity_the_page_counts_new_and_returning_sessions_and_first_channels(
    tmp_path, report
):
    """Sessions with `is_new_user` (`--anonymous-field`) add two charts: human sessions of
    new and of returning users, and new users by the channel of their first session; a
    job without identity has neither (its page as it was)."""
    table = _sessions_table()
    numbered = table.append_column("is_new_user", pa.array(NEW_USER))
    to = tmp_path / "r.html"
    build_report(str(_write_output(tmp_path, numbered)), str(to))
    html = to.read_text()
    new, returning, first = 0, 0, defaultdict(int)
    for row, is_new in zip(ROWS, NEW_USER, strict=True):
        if row[5]:  # a bot's session
            continue
        new += is_new
        returning += not is_new
        if is_new:
            first[row[2] or "(none)"] += 1
    assert {k: int(v[0]) for k, v in _cells(html, "new-returning").items()} == {
        "new": new,
        "returning": returning,
    }
    assert {k: int(v[0]) for k, v in _cells(html, "first-channels").items()} == first
    page = Page(html)
    for name in ("new-returning", "first-channels"):
        assert page.charts[name]["svg"] == 1 and page.charts[name]["path"] >= 4, name
    plain = Page(report.read_text())
    assert "new-returning" not in plain.charts and "first-channels" not in plain.charts
