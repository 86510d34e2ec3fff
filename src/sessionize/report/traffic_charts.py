"""Charts of the traffic figures (report/traffic.py), drawn as the other report charts are:
matplotlib's object API into inline SVG; None when there is nothing to plot."""

from __future__ import annotations

import numpy as np
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter, PercentFormatter

from sessionize.report.charts import (
    BLUE,
    GREEN,
    GREY,
    HEIGHT,
    ORANGE,
    RED,
    clip,
    counts,
    render,
    share_bars,
    thousands,
    time_axis,
)
from sessionize.report.data import Counts
from sessionize.report.traffic import Conversions, HourlyRates

PALETTE = (GREEN, BLUE, ORANGE, RED, GREY)


def channels(c: Counts | None) -> str | None:
    """Horizontal bars of sessions per channel, with each bar's count and share."""
    if c is None or not c.labels:
        return None

    def draw(fig: Figure) -> None:
        share_bars(fig.subplots(), c, c.labels, BLUE, room=1.25)

    return render("channels", draw, height=0.9 + 0.28 * len(c.labels))


def engagement(r: HourlyRates | None) -> str | None:
    """Bounce rate (%) and mean engaged time (s) per hour of session start, two panels."""
    if r is None or not np.isfinite(r.bounce_rate).any():
        return None

    def draw(fig: Figure) -> None:
        top, bottom = fig.subplots(2, 1, sharex=True)
        x = r.hours.astype("datetime64[m]") + np.timedelta64(30, "m")
        marker = "o" if len(x) <= 60 else None
        top.plot(x, r.bounce_rate, color=RED, marker=marker, markersize=3, linewidth=1.3)
        top.set_ylabel("bounce rate")
        top.set_ylim(0, 1)
        top.yaxis.set_major_formatter(PercentFormatter(1.0, decimals=0))
        bottom.plot(x, r.engaged_s, color=GREEN, marker=marker, markersize=3, linewidth=1.3)
        bottom.set_ylabel("mean engaged\ntime (s)")
        bottom.set_ylim(bottom=0)
        thousands(bottom)
        hours = r.hours.astype("datetime64[m]")
        time_axis(bottom, np.array([hours.min(), hours.max() + 60], "datetime64[m]"), "hour")

    return render("engagement", draw, height=HEIGHT * 1.25, wide=True)


def conversions(c: Conversions | None) -> str | None:
    """Conversion events and their value per channel, one bar per conversion name."""
    if c is None or not c.channels or not any(sum(v) for v in c.counts.values()):
        return None
    y = np.arange(len(c.channels))[::-1]
    h = 0.8 / len(c.names)

    def draw(fig: Figure) -> None:
        left, right = fig.subplots(1, 2, sharey=True)
        for i, (name, color) in enumerate(zip(c.names, PALETTE, strict=False)):
            at = y + 0.4 - h * (i + 0.5)
            left.barh(at, c.counts[name], height=h, color=color, label=name)
            right.barh(at, c.values[name], height=h, color=color, label=name)
        left.set_yticks(y, [clip(label) for label in c.channels])
        left.set_title("conversions")
        right.set_title("value")
        counts(left, "x", ticks=4)
        right.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:,.0f}"))
        for ax in (left, right):
            ax.grid(axis="y", visible=False)
        if len(c.names) > 1:
            right.legend(frameon=False, fontsize=7.5)

    return render("conversions", draw, height=1.0 + 0.3 * len(c.channels), wide=True)


def bots(c: Counts | None) -> str | None:
    """One stacked bar: human and bot sessions, each with its share."""
    return _split("bots", c)


def new_returning(c: Counts | None) -> str | None:
    """One stacked bar: sessions of new and of returning users, each with its share."""
    return _split("new-returning", c, (GREEN, BLUE))


def first_channels(c: Counts | None) -> str | None:
    """Horizontal bars of new users per channel of their first session, with shares."""
    if c is None or not c.labels:
        return None

    def draw(fig: Figure) -> None:
        ax = fig.subplots()
        share_bars(ax, c, c.labels, GREEN, room=1.25)
        ax.set_xlabel("new users")

    return render("first-channels", draw, height=0.9 + 0.28 * len(c.labels))


def _split(chart: str, c: Counts | None, colors: tuple[str, str] = (BLUE, ORANGE)) -> str | None:
    """One stacked bar of `c`'s two parts of the sessions, each with its count and share."""
    if c is None or not sum(c.values):
        return None
    total = sum(c.values)

    def draw(fig: Figure) -> None:
        ax = fig.subplots()
        left = 0
        for label, v, color in zip(c.labels, c.values, colors, strict=True):
            ax.barh(
                [0],
                [v],
                left=left,
                color=color,
                height=0.5,
                label=f"{label}: {v:,} ({v / total:.1%})",
            )
            left += v
        ax.set_yticks([])
        ax.set_xlim(0, total)
        ax.set_xlabel("sessions")
        ax.grid(axis="y", visible=False)
        fig.legend(frameon=False, loc="outside lower center", ncol=2)
        counts(ax, "x")

    return render(chart, draw, height=1.7)
