"""Draw the benchmarks page's plots from the benchmarks' JSON output.

    python benchmarks/plot.py                      # benchmarks/results/*.json -> docs/benchmarks/
    python benchmarks/plot.py --results DIR --to DIR

Inputs are the files the benchmarks write with `--json PATH`: `throughput.json` and
`throughput-day.json` (`throughput.py`), `state_backends.json` (`state_backends.py`),
`latency.json` (`latency.py`), `state_size.json` (`state_size.py`). The SVGs are
deterministic (no date, a fixed id salt), so a rerun on the same JSON changes nothing and
tests/docs checks that the committed plots match their JSON.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import matplotlib

matplotlib.use("svg")
import matplotlib.pyplot as plt  # noqa: E402 - after the backend is chosen

ROOT = Path(__file__).resolve().parents[1]
LABELS = {
    "stateless": "stateless read-parse-write",
    "store-files": "stream, files",
    "batch-files": "batch, files",
    "store-postgres": "stream, PostgreSQL",
    "store-redis": "stream, Redis",
    "store-dynamodb": "stream, DynamoDB (dynalite)",
    "session-window-hdfs": "Spark session_window (HDFS)",
    "session-window-rocksdb": "Spark session_window (RocksDB)",
    "spark-rocksdb": "stream, spark-rocksdb",
    "spark-hdfs": "stream, spark-hdfs",
}
BACKENDS = {"files": "files", "postgres": "PostgreSQL", "redis": "Redis", "dynamodb": "DynamoDB"}


def _results(path: Path) -> list[dict]:
    return json.loads(path.read_text())["results"]


def rates_chart(results: list[dict], title: str, out: Path) -> None:
    """Horizontal bars of events/s per contender, in the order they ran."""
    names = [LABELS.get(r["name"], r["name"]) for r in results]
    rates = [r["events"] / r["seconds"] for r in results]
    fig, ax = plt.subplots(figsize=(7, 0.45 * len(names) + 1.2))
    bars = ax.barh(names[::-1], rates[::-1], color="#3f6fb5")
    ax.bar_label(bars, labels=[f"{x:,.0f}" for x in rates[::-1]], padding=3, fontsize=8)
    ax.set_xlabel("events/s")
    ax.set_title(title, fontsize=10)
    ax.set_xlim(0, max(rates) * 1.18)
    ax.spines[["top", "right"]].set_visible(False)
    _save(fig, out)


def state_size_chart(results: list[dict], out: Path) -> None:
    """Median ms per batch against open users, one line per backend, both axes log."""
    fig, ax = plt.subplots(figsize=(7, 3.6))
    for backend in dict.fromkeys(r["backend"] for r in results):
        rows = sorted((r for r in results if r["backend"] == backend), key=lambda r: r["keys"])
        ax.plot(
            [r["keys"] for r in rows],
            [r["batch_ms"] for r in rows],
            marker="o",
            label=BACKENDS.get(backend, backend),
        )
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("open users in the partition")
    ax.set_ylabel("median ms per batch")
    ax.set_title("State store alone: 5,000 users touched per batch", fontsize=10)
    ax.legend(frameon=False, fontsize=8)
    ax.spines[["top", "right"]].set_visible(False)
    _save(fig, out)


def latency_chart(results: list[dict], out: Path) -> None:
    """p50 and p99 seconds from send to visible against the rate, per contender."""
    fig, ax = plt.subplots(figsize=(7, 3.6))
    for name in dict.fromkeys(r["name"] for r in results):
        rows = sorted((r for r in results if r["name"] == name and "p50_s" in r), key=_rate)
        if not rows:
            continue
        label = LABELS.get(name, name)
        for q, style in (("p50_s", "-"), ("p99_s", "--")):
            ax.plot(
                [r["rate"] for r in rows],
                [r[q] for r in rows],
                style,
                marker="o",
                label=f"{label}, {q[:3]}",
            )
    ax.set_xscale("log")
    ax.set_xlabel("events/s sent")
    ax.set_ylabel("seconds from send to visible")
    ax.set_title("End-to-end latency: Kafka to open_sessions in PostgreSQL", fontsize=10)
    ax.legend(frameon=False, fontsize=8)
    ax.spines[["top", "right"]].set_visible(False)
    _save(fig, out)


def _rate(row: dict) -> int:
    return row["rate"]


def batch_size_chart(results: list[dict], out: Path) -> None:
    """A stream's 10k-event batch against the open users in its state: its seconds (which
    move with the machine's load) and the store's bytes read per batch (which do not)."""
    fig, (secs, read) = plt.subplots(1, 2, figsize=(9, 3.6))
    for store in dict.fromkeys(r["store"] for r in results):
        rows = sorted((r for r in results if r["store"] == store), key=lambda r: r["users"])
        users = [r["users"] for r in rows]
        label = BACKENDS.get(store, store)
        secs.plot(users, [r["batch_s"] for r in rows], marker="o", label=label)
        read.plot(users, [r["bytes_read"] / 1e6 for r in rows], marker="o", label=label)
    for ax, what in ((secs, "s per 10k-event micro-batch"), (read, "MB read per micro-batch")):
        ax.set_xscale("log")
        ax.set_xlabel("open users in the state (8 partitions)")
        ax.set_ylabel(what)
        ax.set_ylim(bottom=0)
        ax.spines[["top", "right"]].set_visible(False)
    secs.set_title("Time (each row at its own load)", fontsize=10)
    read.set_title("The store's bytes read", fontsize=10)
    read.legend(frameon=False, fontsize=8)
    _save(fig, out)


def _save(fig, out: Path) -> None:
    fig.tight_layout()
    with plt.rc_context({"svg.hashsalt": "sessionize", "svg.fonttype": "none"}):
        fig.savefig(out, format="svg", metadata={"Date": None})
    plt.close(fig)


def draw(results: Path, to: Path) -> list[Path]:
    """Every plot whose JSON is in `results`, written to `to`; returns the files written."""
    to.mkdir(parents=True, exist_ok=True)
    done = []
    plots = {
        "throughput.json": (
            "throughput.svg",
            lambda r, o: rates_chart(r, "1M events, 8 micro-batches, 2 cores", o),
        ),
        "throughput-day.json": (
            "stores.svg",
            lambda r, o: rates_chart(r, "A day of events in 24 micro-batches, 2 cores", o),
        ),
        "state_backends.json": ("state_size.svg", state_size_chart),
        "latency.json": ("latency.svg", latency_chart),
        "state_size.json": ("batch_state_size.svg", batch_size_chart),
    }
    for source, (name, plot) in plots.items():
        if (results / source).exists():
            plot(_results(results / source), to / name)
            done.append(to / name)
    return done


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--results", type=Path, default=ROOT / "benchmarks" / "results")
    ap.add_argument("--to", type=Path, default=ROOT / "docs" / "benchmarks")
    args = ap.parse_args()
    for path in draw(args.results, args.to):
        print(path)


if __name__ == "__main__":
    main()
