"""The report's plots, drawn with matplotlib into inline SVG (no JavaScript, no network).

matplotlib's object API is used without pyplot: no global figure state, no GUI backend.
Each function returns the `<svg>` element as text, or None when there is nothing to plot.
"""

from __future__ import annotations

import io
import re
from collections.abc import Callable

import matplotlib
import matplotlib.dates as mdates
import numpy as np
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter, MaxNLocator

from sessionize.report.data import Counts, Histogram, Hourly

BLUE, ORANGE, GREEN, RED, GREY = "#3b6ea8", "#e08a2c", "#4c9a5a", "#c0504d", "#8a8f98"
WIDTH, HEIGHT = 5.6, 2.9  # inches; the page scales every SVG to its column's width
WIDE = 11.6  # a chart spanning both columns

STYLE = {
    "font.family": "DejaVu Sans",
    "font.size": 8.5,
    "axes.titlesize": 9.5,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "axes.edgecolor": "#555555",
    "axes.grid": True,
    "axes.axisbelow": True,
    "grid.color": "#e4e6ea",
    "grid.linewidth": 0.6,
    "svg.fonttype": "none",  # text stays text: smaller files, selectable labels
}

_SVG_START = re.compile(r"<svg\b")


def render(
    chart_id: str, draw: Callable[[Figure], None], *, height: float = HEIGHT, wide: bool = False
) -> str:
    """Draw into a new figure and return its `<svg>` element (XML prolog dropped)."""
    with matplotlib.rc_context({**STYLE, "svg.hashsalt": chart_id}):  # type: ignore[dict-item]
        fig = Figure(figsize=(WIDE if wide else WIDTH, height), layout="constrained")
        draw(fig)
        buf = io.StringIO()
        fig.savefig(buf, format="svg", metadata={"Date": None})
    text = buf.getvalue()
    start = _SVG_START.search(text)
    assert start is not None  # matplotlib's SVG always has its element
    return text[start.start() :]


def thousands(ax: Axes, axis: str = "y") -> None:
    fmt = FuncFormatter(lambda v, _: _short(v))
    (ax.yaxis if axis == "y" else ax.xaxis).set_major_formatter(fmt)


def counts(ax: Axes, axis: str = "y", *, ticks: int = 6) -> None:
    """An axis of counts (sessions, events): at most `ticks` whole-number ticks in round
    steps, thousands as `k`."""
    locator = MaxNLocator(ticks, steps=[1, 2, 5, 10], integer=True)
    (ax.yaxis if axis == "y" else ax.xaxis).set_major_locator(locator)
    thousands(ax, axis)


def byte_size(v: float) -> str:
    """`0 B`, `950 B`, `20 kB`, `1.5 MB` (powers of 1,000)."""
    for div, unit in ((1e9, "GB"), (1e6, "MB"), (1e3, "kB")):
        if abs(v) >= div:
            return f"{v / div:.3g} {unit}"
    return f"{v:.3g} B"


def _short(v: float) -> str:
    for div, unit in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(v) >= div:
            return f"{v / div:.3g}{unit}"
    return f"{v:.3g}"


def time_axis(ax: Axes, times: np.ndarray, what: str) -> None:
    """Clock times as whole labels (`20:15:30`, or `20:15` when minutes suffice), the date
    in the axis label when every time is on one day, else in each label."""
    locator = mdates.AutoDateLocator(minticks=3, maxticks=7)
    ax.xaxis.set_major_locator(locator)
    first, last = times.min(), times.max()
    span_s = (last - first) / np.timedelta64(1, "s")
    clock = "%H:%M:%S" if span_s < 20 * 60 else "%H:%M"
    first_day = np.datetime_as_string(first, unit="D")
    if first_day == np.datetime_as_string(last, unit="D"):
        ax.xaxis.set_major_formatter(mdates.DateFormatter(clock))
        ax.set_xlabel(f"{what} (UTC, {first_day})")
    else:
        ax.xaxis.set_major_formatter(mdates.DateFormatter(f"%m-%d {clock}"))
        ax.set_xlabel(f"{what} (UTC)")
        ax.tick_params(axis="x", labelrotation=20)


def per_hour(
    sessions: Hourly | None, events: Hourly | None, *, still_open: int | None = None
) -> str | None:
    """Bars per hour; the last hour of sessions is marked as lacking the sessions still
    open at the end of the run (`still_open`, from the progress log, when known)."""
    series = [
        (s, label, c)
        for s, label, c in (
            (sessions, "sessions started", BLUE),
            (events, "events (page views)", ORANGE),
        )
        if s is not None
    ]
    if not series:
        return None

    def draw(fig: Figure) -> None:
        axes = fig.subplots(len(series), 1, sharex=True, squeeze=False)[:, 0]
        for ax, (h, label, color) in zip(axes, series, strict=True):
            x = h.hours.astype("datetime64[m]") + np.timedelta64(30, "m")
            bars = ax.bar(x, h.counts, width=np.timedelta64(50, "m"), color=color)
            ax.set_ylabel(f"{label}\nper hour")
            counts(ax)
            if h is sessions:
                _mark_still_open(ax, bars[-1], still_open)
        hours = np.concatenate([h.hours for h, _, _ in series]).astype("datetime64[m]")
        time_axis(axes[-1], np.array([hours.min(), hours.max() + 60], "datetime64[m]"), "hour")

    return render("per-hour", draw, height=HEIGHT * (1.25 if len(series) == 2 else 1), wide=True)


def _mark_still_open(ax: Axes, bar, still_open: int | None) -> None:
    """Hatch the last hour's bar and say why it is low: its sessions still open are not in
    the outputs yet (they are written when they close)."""
    bar.set_hatch("///")
    bar.set_edgecolor("white")
    bar.set_alpha(0.6)
    what = "sessions still open" if still_open is None else f"{still_open:,} sessions still open"
    ax.annotate(
        f"low: {what}\nat the last batch are left out\nuntil they close",
        (bar.get_x() + bar.get_width() / 2, bar.get_height()),
        xytext=(0, 4),
        textcoords="offset points",
        ha="center",
        va="bottom",
        fontsize=7.5,
        color="#333333",
    )
    ax.set_ylim(top=max(ax.get_ylim()[1], bar.get_height() * 1.6))


def histogram(
    chart_id: str, h: Histogram | None, *, xlabel: str, unit: str, integer: bool
) -> str | None:
    if h is None:
        return None

    def draw(fig: Figure) -> None:
        ax = fig.subplots()
        widths = np.diff(h.edges)
        ax.bar(
            h.edges[:-1],
            h.counts,
            width=widths * (0.85 if integer else 1.0),
            align="center" if integer else "edge",
            color=BLUE,
            edgecolor="white" if not integer else None,
            linewidth=0.4,
        )
        if h.tail_from is not None:
            ax.bar(
                h.edges[-2],
                h.counts[-1],
                width=widths[-1] * (0.85 if integer else 1.0),
                align="center" if integer else "edge",
                color=GREY,
                label=f"≥ {h.tail_from:.3g} {unit}",
            )
        for (name, value), style in zip(h.percentiles.items(), ("-", "--", ":"), strict=True):
            ax.axvline(
                min(value, h.edges[-1]),
                color=RED,
                linestyle=style,
                linewidth=1,
                label=f"{name} {value:.3g} {unit}",
            )
        ax.legend(frameon=False, fontsize=7.5)
        ax.set_xlabel(xlabel)
        ax.set_ylabel("sessions")
        if integer:
            ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        counts(ax)

    return render(chart_id, draw)


def share_bars(
    ax: Axes, c: Counts, labels: list[str], color: str | list[str], *, room: float
) -> None:
    """Horizontal bars of sessions, top to bottom in `c`'s order, each with its count and
    share of all; `room` widens the axis past the longest bar to leave its label space."""
    total = sum(c.values)
    y = np.arange(len(c.labels))[::-1]
    ax.barh(y, c.values, color=color, height=0.6)
    ax.set_yticks(y, labels)
    for yi, v in zip(y, c.values, strict=True):
        ax.annotate(f" {v:,} ({v / total:.1%})", (v, yi), va="center", fontsize=8)
    ax.set_xlim(0, max(c.values) * room)
    ax.set_xlabel("sessions")
    ax.grid(axis="y", visible=False)
    counts(ax, "x")


def end_reasons(c: Counts) -> str | None:
    if not c.labels:
        return None

    def draw(fig: Figure) -> None:
        colors = [GREEN if label == "explicit" else BLUE for label in c.labels]
        labels = [_reason_label(label) for label in c.labels]
        share_bars(fig.subplots(), c, labels, colors, room=1.15)

    return render("end-reasons", draw, height=0.9 + 0.3 * len(c.labels), wide=True)


def _reason_label(reason: str) -> str:
    return {
        "explicit": "explicit close",
        "inactivity": "inactivity (gap)",
        "field_change": "field change",
        "max_duration": "max duration",
        "midnight": "local midnight",
    }.get(reason, reason)


def top_pages(entry: Counts, exit_: Counts, overall: Counts) -> str | None:
    panels = [
        (c, t)
        for c, t in ((entry, "entry pages"), (exit_, "exit pages"), (overall, "all page views"))
        if c.labels
    ]
    if not panels:
        return None
    rows = max(len(c.labels) for c, _ in panels)

    def draw(fig: Figure) -> None:
        axes = fig.subplots(1, len(panels), squeeze=False)[0]
        for ax, (c, title), color in zip(axes, panels, (BLUE, ORANGE, GREEN), strict=False):
            y = np.arange(len(c.labels))[::-1]
            ax.barh(y, c.values, color=color, height=0.7)
            ax.set_yticks(y, [clip(label) for label in c.labels], fontsize=7.5)
            ax.set_title(title)
            ax.grid(axis="y", visible=False)
            counts(ax, "x", ticks=3)

    return render("top-pages", draw, height=1.0 + 0.22 * rows, wide=True)


def clip(label: str, n: int = 22) -> str:
    return label if len(label) <= n else label[: n - 1] + "…"


def late_invalid(batches: list[str], late: Counts, invalid: Counts) -> str | None:
    if not batches:
        return None
    late_d, invalid_d = late.as_dict(), invalid.as_dict()
    x = np.arange(len(batches))

    def draw(fig: Figure) -> None:
        ax = fig.subplots()
        w = 0.4
        ax.bar(
            x - w / 2,
            [late_d.get(b, 0) for b in batches],
            w,
            color=ORANGE,
            label=f"late ({sum(late.values):,})",
        )
        ax.bar(
            x + w / 2,
            [invalid_d.get(b, 0) for b in batches],
            w,
            color=RED,
            label=f"invalid ({sum(invalid.values):,})",
        )
        step = max(1, len(batches) // 12)
        tilt = max(len(b) for b in batches) * len(batches[::step]) > 60  # labels would touch
        ax.set_xticks(
            x[::step], batches[::step], rotation=30 if tilt else 0, ha="right" if tilt else "center"
        )
        ax.set_xlabel("batch id")
        ax.set_ylabel("events")
        ax.legend(frameon=False)
        counts(ax)

    return render("late-invalid", draw)


def invalid_reasons(c: Counts) -> str | None:
    if not c.labels:
        return None

    def draw(fig: Figure) -> None:
        ax = fig.subplots()
        y = np.arange(len(c.labels))[::-1]
        ax.barh(y, c.values, color=RED, height=0.6)
        ax.set_yticks(y, [clip(label, 48) for label in c.labels], fontsize=7.5)
        ax.set_xlabel("invalid events")
        ax.grid(axis="y", visible=False)
        counts(ax, "x")

    return render("invalid-reasons", draw, height=1.0 + 0.3 * len(c.labels))


def over_time(
    chart_id: str,
    times: np.ndarray,
    series: list[tuple[np.ndarray, str, str]],
    ylabel: str,
    *,
    ticks: str = "number",
) -> str | None:
    """Lines over commit time, one per (values, label, color); NaN values are gaps. The
    y ticks are `number`s, whole `count`s, or `bytes` (`20 kB`)."""
    series = [s for s in series if np.isfinite(s[0]).any()]
    if len(times) == 0 or not series:
        return None

    def draw(fig: Figure) -> None:
        ax = fig.subplots()
        marker = "o" if len(times) <= 60 else None
        for values, label, color in series:
            ax.plot(
                times, values, color=color, marker=marker, markersize=3, linewidth=1.3, label=label
            )
        ax.set_ylabel(ylabel)
        ax.set_ylim(bottom=0)
        time_axis(ax, times, "committed at")
        if len(series) > 1:
            ax.legend(frameon=False)
        if ticks == "count":
            counts(ax)
        elif ticks == "bytes":
            ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: byte_size(v)))
        else:
            thousands(ax)

    return render(chart_id, draw)
