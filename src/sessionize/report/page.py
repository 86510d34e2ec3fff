"""Assemble the report: one HTML file with inline CSS and inline SVG charts, no scripts.

Every chart sits in `<figure class="chart" id="chart-NAME">`; a chart without data is a
`<figure class="chart empty">` that says why. Key numbers are also written as text
(`data-value` attributes on the summary, small tables under some charts), so the page can be
read, searched and checked without looking at the pictures.
"""

from __future__ import annotations

import tomllib
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from html import escape
from importlib.resources import files
from typing import Any

import numpy as np

from sessionize.report import charts, traffic_charts
from sessionize.report.charts import byte_size
from sessionize.report.data import Counts, Histogram, OutputData
from sessionize.report.progress import Progress
from sessionize.report.traffic import Conversions, HourlyRates, Traffic

CSS = """
body { font-family: "DejaVu Sans", Helvetica, Arial, sans-serif; margin: 0; color: #222;
       background: #f5f6f8; }
header { background: #22303f; color: #fff; padding: 14px 28px 10px; }
header h1 { margin: 0 0 6px; font-size: 20px; font-weight: 600; }
header .paths { font-size: 12px; color: #c9d3de; margin: 2px 0; }
header code { color: #fff; }
dl.summary { display: flex; flex-wrap: wrap; gap: 6px 26px; margin: 10px 0 4px; }
dl.summary div { min-width: 90px; }
dl.summary dt { font-size: 11px; color: #c9d3de; text-transform: uppercase; }
dl.summary dd { margin: 0; font-size: 18px; font-weight: 600; }
main { padding: 10px 22px 24px; }
h2 { font-size: 15px; margin: 18px 6px 8px; color: #22303f; }
.grid { display: grid; grid-template-columns: repeat(auto-fit, minmax(460px, 1fr));
        gap: 14px; }
figure.chart { background: #fff; margin: 0; padding: 10px 12px; border-radius: 6px;
               box-shadow: 0 1px 2px rgba(0, 0, 0, .08); }
figure.chart.wide { grid-column: 1 / -1; }
figure.chart h3 { font-size: 13px; margin: 0 0 2px; }
figure.chart figcaption { font-size: 11.5px; color: #555; margin-bottom: 4px; }
figure.chart svg { width: 100%; height: auto; display: block; }
figure.chart.empty p { color: #8a5a00; background: #fff6e0; padding: 10px; font-size: 12px;
                       border-radius: 4px; }
table.numbers { font-size: 11.5px; border-collapse: collapse; margin-top: 4px; }
table.numbers td, table.numbers th { padding: 1px 10px 1px 0; text-align: left; }
table.numbers td.n { text-align: right; font-variant-numeric: tabular-nums; }
"""


@dataclass(frozen=True)
class Chart:
    id: str
    title: str
    caption: str
    svg: str | None
    empty: str = "no rows in the outputs"
    table: str = ""
    wide: bool = False

    def html(self) -> str:
        classes = "chart" + (" wide" if self.wide else "") + ("" if self.svg else " empty")
        body = self.svg or f"<p>{escape(self.empty)}</p>"
        return (
            f'<figure class="{classes}" id="chart-{self.id}">'
            f"<h3>{escape(self.title)}</h3><figcaption>{escape(self.caption)}</figcaption>"
            f"{body}{self.table}</figure>"
        )


def build_page(
    out: OutputData, progress: Progress, *, generated: datetime, traffic: Traffic | None = None
) -> str:
    """The report's HTML. Without `traffic`, its charts say the columns were not read."""
    traffic = traffic or Traffic(missing=dict.fromkeys(TRAFFIC_PARTS, "not read"))
    sections = [
        ("Sessions", _session_charts(out, _still_open(progress))),
        ("Traffic and conversions", _traffic_charts(traffic, progress)),
        ("Pages", [_pages_chart(out)]),
        ("Late and invalid events", _quality_charts(out)),
        ("Progress of the job", _progress_charts(progress)),
    ]
    body = "".join(
        f'<section id="{escape(title.split()[0].lower())}"><h2>{escape(title)}</h2>'
        f'<div class="grid">{"".join(c.html() for c in group)}</div></section>'
        for title, group in sections
    )
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>sessionize report: {escape(out.root)}</title><style>{CSS}</style></head>"
        f"<body>{_header(out, progress, generated)}<main>{body}</main></body></html>\n"
    )


def _header(out: OutputData, progress: Progress, generated: datetime) -> str:
    items = [
        ("sessions", out.sessions),
        *([("bot sessions left out", out.bots_left_out)] if out.bots_left_out else []),
        ("users", out.users),
        ("page views", out.page_views),
        ("late events", out.late),
        ("invalid events", out.invalid),
        ("batches", len(out.batches)),
    ]
    summary = "".join(
        f'<div><dt>{escape(k)}</dt><dd data-key="{escape(k)}" data-value="{v}">{v:,}</dd></div>'
        for k, v in items
    )
    span = "no sessions"
    if out.first_start is not None and out.last_end is not None:
        span = f"{_when(out.first_start)} to {_when(out.last_end)} UTC"
    log = progress.path + (f" ({progress.missing})" if progress.missing else "")
    return (
        "<header><h1>sessionize report</h1>"
        f'<dl class="summary">{summary}</dl>'
        f'<p class="paths">sessions from <b id="time-range">{escape(span)}</b></p>'
        f'<p class="paths">output <code id="output-path">{escape(out.root)}</code> · '
        f'progress log <code id="progress-path">{escape(log)}</code> · '
        f"generated {generated:%Y-%m-%d %H:%M:%S} UTC</p></header>"
    )


def _when(t: np.datetime64) -> str:
    return np.datetime_as_string(t, unit="m").replace("T", " ")


def _still_open(progress: Progress) -> int | None:
    """Sessions in the state after the last batch (None without a progress log)."""
    last = progress.open_sessions[-1:]
    return int(last[0]) if len(last) and np.isfinite(last[0]) else None


# The charts' titles and captions, by id, in the order of the page.
TEXTS: dict[str, dict[str, Any]] = tomllib.loads(
    files("sessionize.report").joinpath("charts.toml").read_text(encoding="utf-8")
)


def _chart(
    chart_id: str,
    svg: str | None,
    *,
    empty: str = "no rows in the outputs",
    table: str = "",
    **fields: str,
) -> Chart:
    """The chart `chart_id` of charts.toml, its caption's `{field}`s filled from `fields`."""
    text = TEXTS[chart_id]
    caption = text["caption"].format(**fields)
    return Chart(chart_id, text["title"], caption, svg, empty, table, text.get("wide", False))


def _session_charts(out: OutputData, still_open: int | None) -> list[Chart]:
    per_hour = charts.per_hour(out.sessions_per_hour, out.events_per_hour, still_open=still_open)
    histograms = [  # chart, its data, x label, unit, whole numbers
        ("session-duration", out.duration_min, "duration (minutes)", "min", False),
        ("events-per-session", out.events_per_session, "events in the session", "events", True),
    ]
    reasons = out.end_reasons
    return [
        _chart("per-hour", per_hour),
        *(
            _chart(
                name,
                charts.histogram(name, h, xlabel=xlabel, unit=unit, integer=whole),
                percentiles=_percentiles(h, unit),
            )
            for name, h, xlabel, unit, whole in histograms
        ),
        _chart("end-reasons", charts.end_reasons(reasons), table=_table("end-reasons", reasons)),
    ]


def _percentiles(h: Histogram | None, unit: str) -> str:
    if h is None:
        return ""
    p = h.percentiles
    return f"; median {p['p50']:.3g}, p90 {p['p90']:.3g}, p99 {p['p99']:.3g} {unit}"


TRAFFIC_PARTS = ("channels", "bots", "rates", "conversions")


def _traffic_charts(t: Traffic, progress: Progress) -> list[Chart]:
    dropped = np.nansum(progress.bot_events)
    drop_note = (
        f" {dropped:,.0f} bot events were dropped before sessionization (--bots drop)."
        if dropped
        else ""
    )
    # chart, its part of Traffic, how it is drawn, its numbers, what it shows without either
    parts: list[tuple[str, str, Callable[[Any], str | None], str, str]] = [
        ("channels", "channels", traffic_charts.channels, _table("channels", t.channels), ""),
        ("bots", "bots", traffic_charts.bots, _table("bots", t.bots), ""),
        ("engagement", "rates", traffic_charts.engagement, _rates_table(t.rates), ""),
        (
            "conversions",
            "conversions",
            traffic_charts.conversions,
            _conversions_table(t.conversions),
            "no conversions in the outputs",
        ),
    ]
    if t.identity:  # a job without --anonymous-field keeps its page as it was
        parts[2:2] = [
            ("new-returning", "new_users", traffic_charts.new_returning,
             _table("new-returning", t.new_users), ""),
            ("first-channels", "first_channels", traffic_charts.first_channels,
             _table("first-channels", t.first_channels), "no new users in the outputs"),
        ]  # fmt: skip
    return [
        _chart(
            name,
            draw(getattr(t, part)),
            empty=t.missing.get(part, empty),
            table=table,
            dropped=drop_note,
        )
        for name, part, draw, table, empty in parts
    ]


def _rates_table(r: HourlyRates | None) -> str:
    """Per hour: sessions, bounce rate (the fraction as data-value) and engaged seconds."""
    if r is None:
        return ""
    hours = (_when(h.astype("datetime64[m]")) for h in r.hours)
    columns = (r.sessions.tolist(), r.bounce_rate.tolist(), r.engaged_s.tolist())
    return _numbers(
        "engagement",
        (
            (hour, [(n, f"{n:,} sessions"), (b, f"{b:.1%} bounced"), (e, f"{e:,.1f} s engaged")])
            for hour, n, b, e in zip(hours, *columns, strict=True)
            if n
        ),
    )


def _conversions_table(c: Conversions | None) -> str:
    """Per channel and conversion name: conversion events and value."""
    if c is None:
        return ""
    return _numbers(
        "conversions",
        (
            (f"{channel} · {name}", [(n, f"{n:,}"), (v, f"{v:,.2f}")])
            for i, channel in enumerate(c.channels)
            for name in c.names
            for n, v in [(c.counts[name][i], c.values[name][i])]
        ),
    )


def _pages_chart(out: OutputData) -> Chart:
    return _chart("top-pages", charts.top_pages(out.entry_pages, out.exit_pages, out.top_pages))


def _quality_charts(out: OutputData) -> list[Chart]:
    reasons = out.invalid_reasons
    return [
        _chart(
            "late-invalid",
            charts.late_invalid(out.batches, out.late_per_batch, out.invalid_per_batch),
        ),
        _chart(
            "invalid-reasons",
            charts.invalid_reasons(reasons),
            empty="no invalid events",
            table=_table("invalid-reasons", reasons),
            shown=str(len(reasons.labels)),
        ),
    ]


def _progress_charts(p: Progress) -> list[Chart]:
    """Lines over the batches' commit times: (id, lines, y label, ticks) per chart."""
    read, written = (byte_size(np.nansum(b)) for b in (p.state_bytes_read, p.state_bytes_written))
    lines = [
        ("batch-duration", [(p.duration_s, "duration", charts.BLUE)], "seconds", "number"),
        ("events-per-second", [(p.events_per_s, "lines/s", charts.GREEN)], "lines/s", "number"),
        ("open-sessions", [(p.open_sessions, "open", charts.ORANGE)], "sessions", "count"),
        (
            "state-bytes",
            [
                (p.state_bytes_read, f"read ({read} in all)", charts.BLUE),
                (p.state_bytes_written, f"written ({written} in all)", charts.RED),
            ],
            "bytes per batch",
            "bytes",
        ),
    ]
    empty = p.missing or "not in the progress log"
    return [
        _chart(
            name, charts.over_time(name, p.committed_at, series, ylabel, ticks=ticks), empty=empty
        )
        for name, series, ylabel, ticks in lines
    ]


def _table(name: str, c: Counts | None) -> str:
    if c is None or not c.labels:
        return ""
    return _numbers(
        name, ((label, [(v, f"{v:,}")]) for label, v in zip(c.labels, c.values, strict=True))
    )


def _numbers(name: str, rows: Iterable[tuple[str, list[tuple[object, str]]]]) -> str:
    """The numbers under a chart, to be read without it: a row per label, each number as
    its `data-value` and as shown."""
    html = "".join(
        f"<tr><td>{escape(label)}</td>"
        + "".join(f'<td class="n" data-value="{v}">{escape(shown)}</td>' for v, shown in cells)
        + "</tr>"
        for label, cells in rows
    )
    return f'<table class="numbers" id="table-{name}">{html}</table>'


def now() -> datetime:
    return datetime.now(UTC)
