"""examples/running_totals.py against a plain loop over the orders, for any micro-batch
split (each batch emits the new totals of the customers it changed)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from examples.running_totals import ORDERS, SAMPLE, RunningTotals
from sessionize.stateful import run_local

from .streams import SETTINGS, batches, cuts

orders_st = st.lists(
    st.fixed_dictionaries(
        {
            "customer_id": st.integers(-3, 5),
            "amount": st.one_of(st.none(), st.integers(-40, 400).map(lambda c: c / 4)),
        }
    ),
    max_size=40,
)


def reference(split: list[list[dict]]) -> list[set[tuple]]:
    """Per batch: (customer, orders, total) of every customer of the batch, after it."""
    totals: dict[int, tuple[int, float]] = {}
    emitted = []
    for batch in split:
        for order in batch:
            n, total = totals.get(order["customer_id"], (0, 0.0))
            totals[order["customer_id"]] = (n + 1, total + (order["amount"] or 0.0))
        emitted.append({(c, *totals[c]) for c in {o["customer_id"] for o in batch}})
    return emitted


@SETTINGS
@given(data=st.data(), orders=orders_st)
def test_totals_per_batch_equal_the_loop_for_any_split(data, orders):
    at = data.draw(cuts(len(orders)))
    split = batches(orders, at, ORDERS)
    run = run_local(RunningTotals(), split)
    got = [{tuple(r.values()) for r in t.to_pylist()} for t in run.outputs["totals"]]
    assert got == reference([b.to_pylist() for b in split])
    # batch-split invariance: the state is the totals of all orders, however they were cut
    (final,) = reference([orders]) if orders else [set()]
    assert {
        tuple(r.values()) for r in run.state.select(["customer_id", "orders", "total"]).to_pylist()
    } == final
    assert run.counters.get("orders", 0) == len(orders)
    assert run.counters.get("customers", 0) == len({o["customer_id"] for o in orders})
    assert "late" not in run.outputs


def test_the_sample_runs():
    run = run_local(RunningTotals(), SAMPLE)
    assert {r["customer_id"]: r["total"] for r in run.output("totals").to_pylist()} == {
        1: 12.5,
        2: 6.0,
        3: 0.0,
    }
