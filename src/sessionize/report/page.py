"""Assemble the report: one HTML file with inline CSS and inline SVG charts, no scripts.

Every chart sits in `<figure class="chart" id="chart-NAME">`; a chart without data is a
`<figure class="chart empty">` that says why. Key numbers are also written as text
(`data-value` attributes on the summary, small tables under some charts), so the page can be
read, searched and checked without looking at the pictures.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from html import escape

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


def _session_charts(out: OutputData, still_open: int | None) -> list[Chart]:
    reasons = out.end_reasons
    return [
        Chart(
            "per-hour",
            "Sessions and events per hour",
            "Sessions by the hour they started; events (page views) by their event time. "
            "The last hour's sessions are low (hatched): the sessions still open when the "
            "job stopped are written when they close.",
            charts.per_hour(out.sessions_per_hour, out.events_per_hour, still_open=still_open),
            wide=True,
        ),
        Chart(
            "session-duration",
            "Session duration",
            _pct_caption("From first to last event", out.duration_min, "min"),
            charts.histogram(
                "session-duration",
                out.duration_min,
                xlabel="duration (minutes)",
                unit="min",
                integer=False,
            ),
        ),
        Chart(
            "events-per-session",
            "Events per session",
            _pct_caption("Events kept in each session", out.events_per_session, "events"),
            charts.histogram(
                "events-per-session",
                out.events_per_session,
                xlabel="events in the session",
                unit="events",
                integer=True,
            ),
        ),
        Chart(
            "end-reasons",
            "How sessions ended",
            "A close action, no event for the gap, or a rule of --max-duration, "
            "--split-at-midnight or --split-on-change.",
            charts.end_reasons(reasons),
            table=_table("end-reasons", reasons),
            wide=True,
        ),
    ]


def _pct_caption(text: str, h: Histogram | None, unit: str) -> str:
    if h is None:
        return text + "."
    p = h.percentiles
    return f"{text}; median {p['p50']:.3g}, p90 {p['p90']:.3g}, p99 {p['p99']:.3g} {unit}."


TRAFFIC_PARTS = ("channels", "bots", "rates", "conversions")


def _traffic_charts(t: Traffic, progress: Progress) -> list[Chart]:
    dropped = np.nansum(progress.bot_events)
    drop_note = (
        f" {dropped:,.0f} bot events were dropped before sessionization (--bots drop)."
        if dropped
        else ""
    )
    return [
        Chart(
            "channels",
            "Sessions by channel",
            "Channel of each session (from its first event's UTM parameters, gclid and "
            "referrer); bot sessions left out.",
            traffic_charts.channels(t.channels),
            empty=t.missing.get("channels", ""),
            table=_table("channels", t.channels),
        ),
        Chart(
            "bots",
            "Bot sessions",
            "Sessions whose first event's user agent is a bot's (is_bot)." + drop_note,
            traffic_charts.bots(t.bots),
            empty=t.missing.get("bots", ""),
            table=_table("bots", t.bots),
        ),
        Chart(
            "engagement",
            "Bounce rate and engaged time per hour",
            "Sessions by the hour they started: the share that bounced (not engaged) and "
            "their mean engaged time; bot sessions left out.",
            traffic_charts.engagement(t.rates),
            empty=t.missing.get("rates", ""),
            table=_rates_table(t.rates),
            wide=True,
        ),
        Chart(
            "conversions",
            "Conversions and their value by channel",
            "Conversion events (NAME_count) and the sum of their value (NAME_value) per "
            "channel, for each --conversion; bot sessions left out.",
            traffic_charts.conversions(t.conversions),
            empty=t.missing.get("conversions", "no conversions in the outputs"),
            table=_conversions_table(t.conversions),
            wide=True,
        ),
    ]


def _rates_table(r: HourlyRates | None) -> str:
    """Per hour: sessions, bounce rate (the fraction as data-value) and engaged seconds."""
    if r is None:
        return ""
    rows = "".join(
        f"<tr><td>{_when(h.astype('datetime64[m]'))}</td>"
        f'<td class="n" data-value="{n}">{n:,} sessions</td>'
        f'<td class="n" data-value="{b!r}">{b:.1%} bounced</td>'
        f'<td class="n" data-value="{e!r}">{e:,.1f} s engaged</td></tr>'
        for h, n, b, e in zip(
            r.hours, r.sessions.tolist(), r.bounce_rate.tolist(), r.engaged_s.tolist(), strict=True
        )
        if n
    )
    return f'<table class="numbers" id="table-engagement">{rows}</table>'


def _conversions_table(c: Conversions | None) -> str:
    """Per channel and conversion name: conversion events and value."""
    if c is None:
        return ""
    rows = "".join(
        f"<tr><td>{escape(channel)} · {escape(name)}</td>"
        f'<td class="n" data-value="{c.counts[name][i]}">{c.counts[name][i]:,}</td>'
        f'<td class="n" data-value="{c.values[name][i]!r}">{c.values[name][i]:,.2f}</td></tr>'
        for i, channel in enumerate(c.channels)
        for name in c.names
    )
    return f'<table class="numbers" id="table-conversions">{rows}</table>'


def _pages_chart(out: OutputData) -> Chart:
    return Chart(
        "top-pages",
        "Top entry, exit and overall pages",
        "First page of each session, last page of each session, and every page view.",
        charts.top_pages(out.entry_pages, out.exit_pages, out.top_pages),
        wide=True,
    )


def _quality_charts(out: OutputData) -> list[Chart]:
    return [
        Chart(
            "late-invalid",
            "Late and invalid events per batch",
            "Late: behind the watermark, kept in late_events. Invalid: unreadable lines, "
            "kept in invalid_events with a reason.",
            charts.late_invalid(out.batches, out.late_per_batch, out.invalid_per_batch),
        ),
        Chart(
            "invalid-reasons",
            "Top invalid reasons",
            f"The {len(out.invalid_reasons.labels)} most frequent reasons.",
            charts.invalid_reasons(out.invalid_reasons),
            empty="no invalid events",
            table=_table("invalid-reasons", out.invalid_reasons),
        ),
    ]


def _progress_charts(p: Progress) -> list[Chart]:
    t = p.committed_at
    empty = p.missing or "not in the progress log"
    read, written = (byte_size(np.nansum(b)) for b in (p.state_bytes_read, p.state_bytes_written))
    return [
        Chart(
            "batch-duration",
            "Batch duration",
            "Seconds from a batch's start to its commit.",
            charts.over_time(
                "batch-duration", t, [(p.duration_s, "duration", charts.BLUE)], "seconds"
            ),
            empty=empty,
        ),
        Chart(
            "events-per-second",
            "Lines read per second",
            "Lines read in the batch (valid and invalid) divided by its duration.",
            charts.over_time(
                "events-per-second", t, [(p.events_per_s, "lines/s", charts.GREEN)], "lines/s"
            ),
            empty=empty,
        ),
        Chart(
            "open-sessions",
            "Open sessions",
            "Sessions held in the state after each batch.",
            charts.over_time(
                "open-sessions",
                t,
                [(p.open_sessions, "open", charts.ORANGE)],
                "sessions",
                ticks="count",
            ),
            empty=empty,
        ),
        Chart(
            "state-bytes",
            "State bytes per batch",
            "Bytes each batch read from the state store and wrote to it (its new state "
            "version), as the store measures them; 1 kB = 1,000 bytes.",
            charts.over_time(
                "state-bytes",
                t,
                [
                    (p.state_bytes_read, f"read ({read} in all)", charts.BLUE),
                    (p.state_bytes_written, f"written ({written} in all)", charts.RED),
                ],
                "bytes per batch",
                ticks="bytes",
            ),
            empty=empty,
        ),
    ]


def _table(name: str, c: Counts | None) -> str:
    if c is None or not c.labels:
        return ""
    rows = "".join(
        f'<tr><td>{escape(label)}</td><td class="n" data-value="{v}">{v:,}</td></tr>'
        for label, v in zip(c.labels, c.values, strict=True)
    )
    return f'<table class="numbers" id="table-{name}">{rows}</table>'


def now() -> datetime:
    return datetime.now(UTC)
