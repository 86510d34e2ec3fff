"""Draw docs/concepts/revisions_timeline.svg: one user's sessions, the late events of the
next batch, and what that batch writes with `--revise-within 4h` (a 30-minute gap).

    python benchmarks/revisions_timeline.py [--to PATH]

The picture is drawn from the events below, cut by hand as the rules say (docs/
concepts/revisions.md); the SVG is deterministic, so a rerun changes nothing.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import matplotlib

matplotlib.use("svg")
import matplotlib.pyplot as plt  # noqa: E402 - after the backend is chosen

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "docs" / "concepts" / "revisions_timeline.svg"
WATERMARK, WINDOW_H = 12.0, 4.0  # hours of the day
# Batch 1's sessions of the user: (id, event hours).
WRITTEN = [
    ("1-08:00", [8.0, 8 + 10 / 60]),
    ("1-09:00", [9.0, 9 + 10 / 60]),
    ("1-09:45", [9.75, 9 + 55 / 60]),
    ("1-11:00", [11.0, 11 + 10 / 60]),
]
# Batch 2's late events: (hour, what it does).
LATE = [
    (7 + 40 / 60, "older than W:\nlate_events"),
    (8 + 20 / 60, "extends 1-08:00"),
    (9.5, "merges 1-09:00\nand 1-09:45"),
    (10 + 40 / 60, "before 1-11:00:\nnew start"),
]
# What batch 2 writes: (id, event hours, label), then the retracted ids.
REVISED = [
    ("1-08:00", [8.0, 8 + 10 / 60, 8 + 20 / 60], "revision 1"),
    ("1-09:00", [9.0, 9 + 10 / 60, 9.5, 9.75, 9 + 55 / 60], "revision 1"),
    ("1-10:40", [10 + 40 / 60, 11.0, 11 + 10 / 60], "revision of 1-11:00, new id"),
]
RETRACTED = ["1-09:45", "1-11:00"]
BLUE, ORANGE, GREY, RED = "#1f77b4", "#ff7f0e", "#7f7f7f", "#d62728"


def _session(ax, y: float, hours: list[float], label: str, color: str) -> None:
    ax.plot([hours[0], hours[-1]], [y, y], color=color, linewidth=7, alpha=0.35,
            solid_capstyle="butt")  # fmt: skip
    ax.plot(hours, [y] * len(hours), "o", color=color, markersize=5)
    ax.annotate(label, (hours[0], y + 0.22), fontsize=8, color=color)


def draw(to: Path) -> None:
    fig, ax = plt.subplots(figsize=(9, 3.6))
    start = WATERMARK - WINDOW_H
    ax.axvspan(start, WATERMARK, color=BLUE, alpha=0.06)
    ax.axvline(WATERMARK, color="black", linewidth=1)
    ax.axvline(start, color=GREY, linewidth=1, linestyle="--")
    ax.annotate("watermark of batch 2", (WATERMARK - 0.05, 3.05), ha="right", fontsize=8)
    ax.annotate("watermark - W: older events are late", (start + 0.05, 3.05), fontsize=8,
                color=GREY)  # fmt: skip
    ax.annotate("window W = 4h: late events revise", (start + 0.05, 2.8), fontsize=8,
                color=BLUE)  # fmt: skip
    for sid, hours in WRITTEN:
        _session(ax, 2.0, hours, sid, BLUE)
    for hour, what in LATE:
        color = RED if hour < start else ORANGE
        ax.plot([hour], [1.1], "v", color=color, markersize=8)
        ax.annotate(what, (hour, 1.25), fontsize=7, color=color, ha="center")
    for sid, hours, label in REVISED:
        _session(ax, 0.0, hours, f"{sid}: {label}", ORANGE)
    ax.annotate(f"retracted: {', '.join(RETRACTED)}", (11.4, -0.45), fontsize=8, color=RED)
    ax.set_yticks([2.0, 1.1, 0.0], ["batch 1 wrote", "batch 2's\nlate events", "batch 2 writes"])
    ticks = range(7, 13)
    ax.set_xticks(list(ticks), [f"{h:02d}:00" for h in ticks])
    ax.set_xlim(7.2, 12.9)
    ax.set_ylim(-0.7, 3.3)
    ax.set_xlabel("event time (one user; gap 30 min, --revise-within 4h)")
    for side in ("top", "right", "left"):
        ax.spines[side].set_visible(False)
    fig.tight_layout()
    with plt.rc_context({"svg.hashsalt": "sessionize", "svg.fonttype": "none"}):
        fig.savefig(to, format="svg", metadata={"Date": None})
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--to", type=Path, default=OUT)
    draw(parser.parse_args().to)


if __name__ == "__main__":
    main()
