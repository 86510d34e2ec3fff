"""Per-customer sales totals: the number of orders and the sum of their amounts.

The classic example of why streaming state is checkpointed: the totals must continue after
any restart. No event time: no watermark, no late rows, no timers; every batch emits the new
totals of the customers it changed (as Spark's `groupBy(...).agg(count, sum)` in update
mode does).

On Spark, exactly once, with the state in the store: `python -m examples.running_totals
--input orders/ --output out/ --checkpoint chk/ [--state postgresql://...]` streams JSON
lines (`customer_id`, `amount`) from a directory, `kafka://HOST:PORT/TOPIC` or
`kinesis://STREAM` through `stateful.source`; a line that is no order goes to `out/invalid/`
with its reason. In memory (`stateful.run_local`): `python -m examples.running_totals
[FILE ...]`, one micro-batch per file, or a sample.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from sessionize import stateful

ORDERS = pa.schema([("customer_id", pa.int64()), ("amount", pa.float64())])
TOTALS = pa.schema(
    [
        pa.field("customer_id", pa.int64(), nullable=False),
        pa.field("orders", pa.int64(), nullable=False),
        pa.field("total", pa.float64(), nullable=False),
    ]
)


class RunningTotals(stateful.Processor):
    """Count and sum of `amount` per `customer_id` (a null amount counts, adding 0)."""

    key = "customer_id"
    event_time = None
    state_schema = TOTALS
    outputs = {"totals": TOTALS}
    gauges = ("customers",)  # the customers held: the engine keeps the running count

    def process(self, state: pa.Table, rows: pa.Table, ctx: stateful.Context) -> stateful.Update:
        amount = pc.fill_null(rows.column("amount").cast(pa.float64()), 0.0)
        batch = pa.table(
            {
                "customer_id": rows.column("customer_id"),
                "orders": pa.array(np.ones(rows.num_rows, np.int64)),
                "total": amount,
            }
        )
        both = pa.concat_tables([state.cast(batch.schema), batch])
        summed = both.group_by("customer_id").aggregate([("orders", "sum"), ("total", "sum")])
        new = summed.select(["customer_id", "orders_sum", "total_sum"])
        new = new.rename_columns(TOTALS.names).cast(self.state_schema)
        # one state row per customer: the new customers are the rows added
        counters = {"orders": len(batch), "customers": new.num_rows - state.num_rows}
        return stateful.Update(state=new, outputs={"totals": new}, counters=counters)


SAMPLE = [
    pa.table({"customer_id": [1, 2, 1], "amount": [10.0, 5.0, 2.5]}, schema=ORDERS),
    pa.table({"customer_id": [2, 3], "amount": [1.0, None]}, schema=ORDERS),
]


# The JSON lines as Spark reads them (stateful.source): one without a customer_id goes to
# the output `invalid`, with its reason.
SOURCE_SCHEMA = pa.schema(
    [pa.field("customer_id", pa.int64(), nullable=False), pa.field("amount", pa.float64())]
)


def main() -> None:
    from examples import _batches

    _batches.main(__doc__.splitlines()[0], RunningTotals(), SAMPLE, ORDERS, SOURCE_SCHEMA)


if __name__ == "__main__":
    main()
