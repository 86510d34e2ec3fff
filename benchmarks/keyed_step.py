"""The keyed core's own cost: running totals through `stateful` (pure, in memory, no
Spark) against the same totals computed directly, on one machine.

    .venv/bin/python benchmarks/keyed_step.py [--orders 1000000 --customers 50000 --batches 20]

Three ways over the same orders, cut into `--batches` micro-batches, in one process:

- core: `examples/running_totals.py` through `stateful.run_local` (per batch: the core's
  key selection, sort, checks, timers and stored rows, plus the in-memory state);
- direct: the same per-batch totals with one pyarrow group-by per batch and a dict of
  running totals keyed by customer (what the processor computes, without the core);
- loop: a plain Python loop over the orders with a dict (one call per event).

Prints each one's time and the ratios; both int64 and string customer keys.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow as pa

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from examples.running_totals import TOTALS, RunningTotals  # noqa: E402
from sessionize import stateful  # noqa: E402


class StringTotals(RunningTotals):
    """The same totals keyed by a string customer id."""

    state_schema = pa.schema(
        [pa.field("customer_id", pa.string(), nullable=False), *list(TOTALS)[1:]]
    )
    outputs = {"totals": state_schema}


def orders(n: int, customers: int, strings: bool, seed: int = 7) -> pa.Table:
    rng = np.random.default_rng(seed)
    ids = rng.integers(0, customers, n)
    key = pa.array([f"c{i}" for i in ids]) if strings else pa.array(ids, pa.int64())
    return pa.table({"customer_id": key, "amount": pa.array(rng.integers(1, 500, n) / 4.0)})


def core(processor: stateful.Processor, batches: list[pa.Table]) -> dict:
    run = stateful.run_local(processor, batches)
    last = run.state.select(["customer_id", "orders", "total"]).to_pylist()
    return {r["customer_id"]: (r["orders"], r["total"]) for r in last}


def direct(batches: list[pa.Table]) -> dict:
    totals: dict = {}
    for batch in batches:
        agg = batch.group_by("customer_id").aggregate([("amount", "count"), ("amount", "sum")])
        for c, n, s in zip(
            agg.column("customer_id").to_pylist(),
            agg.column("amount_count").to_pylist(),
            agg.column("amount_sum").to_pylist(),
            strict=True,
        ):
            was = totals.get(c, (0, 0.0))
            totals[c] = (was[0] + n, was[1] + s)
    return totals


def loop(batches: list[pa.Table]) -> dict:
    totals: dict = {}
    for batch in batches:
        for c, a in zip(
            batch.column("customer_id").to_pylist(), batch.column("amount").to_pylist(), strict=True
        ):
            was = totals.get(c, (0, 0.0))
            totals[c] = (was[0] + 1, was[1] + a)
    return totals


def timed(fn, *args) -> tuple[float, dict]:
    t0 = time.perf_counter()
    out = fn(*args)
    return time.perf_counter() - t0, out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--orders", type=int, default=1_000_000)
    parser.add_argument("--customers", type=int, default=50_000)
    parser.add_argument("--batches", type=int, default=20)
    args = parser.parse_args()
    print(f"{args.orders} orders of {args.customers} customers in {args.batches} batches")
    print(
        f"{'keys':<8}{'core s':>9}{'direct s':>10}{'loop s':>9}{'core/direct':>13}{'loop/core':>11}"
    )
    for strings, processor in ((False, RunningTotals()), (True, StringTotals())):
        table = orders(args.orders, args.customers, strings)
        size = -(-table.num_rows // args.batches)
        batches = [table.slice(i, size) for i in range(0, table.num_rows, size)]
        t_core, got = timed(core, processor, batches)
        t_direct, want = timed(direct, batches)
        t_loop, again = timed(loop, batches)
        assert got == want == again, "the three ways disagree"
        print(
            f"{'string' if strings else 'int64':<8}{t_core:>9.2f}{t_direct:>10.2f}"
            f"{t_loop:>9.2f}{t_core / t_direct:>13.2f}{t_loop / t_core:>11.2f}"
        )


if __name__ == "__main__":
    main()
