"""`sessionize report` over a real batch run: the page's numbers against the Parquet outputs
read independently, every chart drawn in headless Chromium, and a missing progress log."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from collections import Counter
from datetime import UTC, datetime, timedelta
from html.parser import HTMLParser
from pathlib import Path

import matplotlib.image
import numpy as np
import pyarrow.dataset as ds
import pytest

from sessionize.cli import main
from sessionize.commands.batch import BatchOptions, run_batch
from sessionize.mapping import EventMapping
from sessionize.report import build_report, charts
from sessionize.report.charts import BLUE, GREEN, ORANGE, RED
from sessionize.report.data import Histogram, Hourly
from tests.helpers import cli_env, generate, sessionize

REPO = Path(__file__).resolve().parents[2]
H0 = datetime(2026, 11, 1, tzinfo=UTC)
CHARTS = (
    "per-hour",
    "session-duration",
    "events-per-session",
    "end-reasons",
    "top-pages",
    "late-invalid",
    "invalid-reasons",
    "batch-duration",
    "events-per-second",
    "open-sessions",
    "state-bytes",
)
PROGRESS_CHARTS = ("batch-duration", "events-per-second", "open-sessions", "state-bytes")
# Drawn from columns this job's sessions do not have (tests/report/test_report_traffic.py
# draws them): each says so in place of its chart.
TRAFFIC_CHARTS = ("channels", "bots", "engagement", "conversions")


@pytest.fixture(scope="module")
def job(spark, tmp_path_factory) -> Path:
    """Two hours sessionized by `run_batch`, with the progress log its records make; with
    the sessions columns of a checkpoint from before the traffic columns (schema 1)."""
    root = tmp_path_factory.mktemp("report")
    inp = generate(root / "in", hours=2, users=150, events_per_hour=1200, invalid_rate=0.02)
    out = root / "out"
    opts = BatchOptions(
        input=str(inp),
        output=str(out),
        start=H0,
        end=H0 + timedelta(hours=1),
        partitions=2,
        state="files",
        mapping=EventMapping(session_columns=1),
    )
    records = run_batch(opts, spark, on_hour=lambda _: None)
    assert len(records) == 2
    t = datetime(2026, 11, 22, 12, tzinfo=UTC)
    with open(out / "_progress.jsonl", "w") as f:
        for i, record in enumerate(records):
            at = (t + timedelta(minutes=i)).isoformat()
            f.write(json.dumps({**record, "committed_at": at}) + "\n")
    return out


@pytest.fixture(scope="module")
def report(job) -> Path:
    """The report of `job`, written by the `sessionize report` command in its own process."""
    to = job.parent / "report.html"
    done = sessionize("report", "--output", str(job), "--to", str(to), env=cli_env())
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"wrote {to} (")
    return to


class Page(HTMLParser):
    """Charts (class, svg elements inside), and the `data-value` numbers by table and key."""

    def __init__(self, html: str):
        super().__init__()
        self.charts: dict[str, dict] = {}
        self.values: dict[str, int] = {}
        self.tables: dict[str, dict[str, int]] = {}
        self._chart = self._table = self._label = None
        self._in_td = False
        self.feed(html)

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "figure" and a.get("id", "").startswith("chart-"):
            self._chart = {"class": a["class"], "svg": 0, "path": 0, "text": ""}
            self.charts[a["id"][6:]] = self._chart
        elif self._chart is not None and tag in ("svg", "path"):
            self._chart[tag] += 1
        elif tag == "dd" and "data-key" in a:
            self.values[a["data-key"]] = int(a["data-value"])
        elif tag == "table":
            self._table = self.tables.setdefault(a["id"][6:], {})
        elif tag == "td" and self._table is not None:
            if "data-value" in a:
                value = a["data-value"]
                self._table[self._label] = float(value) if "." in value else int(value)
            else:
                self._in_td = True

    def handle_data(self, data):
        if self._in_td:
            self._label = data
        if self._chart is not None:
            self._chart["text"] += data

    def handle_endtag(self, tag):
        if tag == "figure":
            self._chart = None
        elif tag == "table":
            self._table = None
        elif tag == "td":
            self._in_td = False


def _chromium() -> str:
    """Debian's chromium: $SESSIONIZE_CHROMIUM, .services/env.sh, or the PATH. Missing, the
    test fails (a browser check that does not run must not pass)."""
    env_file = REPO / ".services" / "env.sh"
    found = os.environ.get("SESSIONIZE_CHROMIUM")
    if not found and env_file.exists():
        m = re.search(r"\bSESSIONIZE_CHROMIUM=(\S+)", env_file.read_text())
        found = m.group(1) if m else None
    found = found or shutil.which("chromium")
    if not found or not os.access(found, os.X_OK):
        pytest.fail("no chromium: install Debian's chromium with `services/chromium.sh install`")
    return found


def _read(out: Path, name: str, column: str) -> list:
    table = ds.dataset(out / name, partitioning="hive").to_table(columns=[column])
    return table[column].to_pylist()


def test_the_page_shows_the_numbers_of_the_outputs(job, report):
    html = report.read_text()
    page = Page(html)

    reasons = Counter(_read(job, "sessions", "end_reason"))
    invalid = Counter(_read(job, "invalid_events", "reason"))
    assert set(reasons) == {"explicit", "inactivity"}
    assert page.tables["end-reasons"] == dict(reasons)
    assert page.tables["invalid-reasons"] == dict(invalid.most_common(8))
    assert page.values["sessions"] == sum(reasons.values()) > 100
    assert page.values["users"] == len(set(_read(job, "sessions", "user_id")))
    assert page.values["page views"] == len(_read(job, "page_views", "page"))
    assert page.values["invalid events"] == sum(invalid.values()) > 0
    assert page.values["batches"] == 2
    # Self-contained: nothing to fetch, nothing to run (an SVG xmlns is a name, not a fetch).
    assert not re.search(r'<script|<link|<img|@import|(?:src|href)="(?!#)|url\((?!#)', html)


def test_every_chart_is_drawn_in_chromium(report, tmp_path):
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
    assert sorted(page.charts) == sorted(CHARTS + TRAFFIC_CHARTS)
    for name in TRAFFIC_CHARTS:
        chart = page.charts.pop(name)
        assert chart["class"].endswith(" empty") and "column in sessions" in chart["text"], name
    for name, chart in page.charts.items():
        assert chart["class"] == "chart" or chart["class"] == "chart wide", name
        assert chart["svg"] == 1 and chart["path"] >= 8, (name, chart)

    shot = tmp_path / "report.png"  # kept by pytest with the run's other temporary files
    size = "--window-size=1200,2900"
    run = subprocess.run(
        [browser, *flags, f"--screenshot={shot}", size, report.as_uri()],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 0 and shot.exists(), run.stderr[-2000:]
    pixels = (matplotlib.image.imread(shot)[:, :, :3] * 255).round().astype(int)
    for color in (BLUE, ORANGE, GREEN, RED):  # the bars and lines, as the browser drew them
        rgb = [int(color[i : i + 2], 16) for i in (1, 3, 5)]
        assert (np.abs(pixels - rgb).max(axis=2) <= 2).sum() > 500, color


def test_a_missing_progress_log_is_said_in_place_of_its_plots(job, tmp_path):
    to = tmp_path / "r.html"
    build_report(str(job), str(to), checkpoint=str(tmp_path / "chk"))
    page = Page(to.read_text())
    for name in CHARTS:
        chart = page.charts[name]
        if name in PROGRESS_CHARTS:
            assert chart["class"] == "chart empty" and chart["svg"] == 0, name
            assert f"no progress log at {tmp_path / 'chk' / 'progress.jsonl'}" in chart["text"]
        else:
            assert chart["svg"] == 1, name


def test_an_output_that_is_not_there_is_one_line_on_stderr(tmp_path, capfd):
    # capfd: the CLI writes its error line to file descriptor 2 itself (cli/failures.py).
    with pytest.raises(SystemExit) as exc:
        main(["report", "--output", str(tmp_path / "nope"), "--to", str(tmp_path / "r.html")])
    assert exc.value.code == 2
    err = capfd.readouterr().err
    assert err.startswith("sessionize: error: --output ") and err.count("\n") == 1


def _texts(svg: str) -> list[str]:
    """The text elements of an SVG (or of a page's part), in drawing order."""
    return [
        re.sub(r"<[^>]+>", "", t).strip()
        for t in re.findall(r"<text\b[^>]*>(.*?)</text>", svg, re.S)
    ]


def _chart_texts(html: str, name: str) -> list[str]:
    part = html[html.index(f'id="chart-{name}"') :]
    return _texts(part[: part.index("</figure>")])


CLOCK = re.compile(r"\d\d:\d\d(:\d\d)?")


def test_progress_charts_read_as_clock_times_the_state_in_bytes(job, report):
    html = report.read_text()
    for name in PROGRESS_CHARTS:  # the log's commits are on 2026-11-22, a minute apart
        texts = _chart_texts(html, name)
        label = texts.index("committed at (UTC, 2026-11-22)")
        assert label >= 2 and all(CLOCK.fullmatch(t) for t in texts[:label]), (name, texts)
    texts = _chart_texts(html, "state-bytes")
    label = texts.index("committed at (UTC, 2026-11-22)")
    y_ticks = texts[label + 1 : texts.index("bytes per batch")]
    assert len(y_ticks) >= 2, texts
    assert all(re.fullmatch(r"\d+(\.\d+)? (B|kB|MB|GB)", t) for t in y_ticks), y_ticks


def test_the_last_hours_sessions_say_how_many_are_still_open(job, report):
    last = json.loads((job / "_progress.jsonl").read_text().splitlines()[-1])
    still_open = last["batch"]["open_sessions"]
    assert still_open > 0
    texts = _chart_texts(report.read_text(), "per-hour")
    assert f"low: {still_open:,} sessions still open" in texts, texts
    assert "hour (UTC, 2026-11-01)" in texts, texts


def test_counts_on_small_data_have_whole_number_ticks():
    """A handful of sessions: the count axes tick 0, 1, 2, never 0.25."""
    hours = np.array(["2026-11-01T00", "2026-11-01T01"], "datetime64[h]")
    small = Hourly(hours, np.array([1, 2]))
    times = np.array(["2026-11-01T00:00", "2026-11-01T00:01"], "datetime64[ms]")
    svgs = {
        "per hour": charts.per_hour(small, small, still_open=1),
        "histogram": charts.histogram(
            "h",
            Histogram(
                np.array([1.0, 2, 3, 4]), np.array([1, 2, 1]), {"p50": 2.0, "p90": 3.0, "p99": 3.0}
            ),
            xlabel="events in the session",
            unit="events",
            integer=True,
        ),
        "open sessions": charts.over_time(
            "o", times, [(np.array([1.0, 2.0]), "open", BLUE)], "sessions", ticks="count"
        ),
    }
    for name, svg in svgs.items():
        numbers = [t for t in _texts(svg) if re.fullmatch(r"[\d.,]+", t)]
        assert numbers and all(re.fullmatch(r"\d+", t) for t in numbers), (name, numbers)
