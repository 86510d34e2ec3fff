"""The core's bookkeeping over many batches against a dict model: which keys are handed in
and due, what state they see, and the stored rows and timers after each update.

A processor whose decisions hypothesis draws (new rows, remove, nothing; set, clear or keep
a timer) runs through `run_local`; the model applies the contract's rules in plain Python.
"""

from __future__ import annotations

import pyarrow as pa
from hypothesis import given
from hypothesis import strategies as st

from sessionize import stateful
from sessionize.stateful import run_local

from .helpers import NEVER, TS
from .streams import SETTINGS

KEYS = st.sampled_from(["a", "b", "c", "d", "e"])


class Drawn(stateful.Processor):
    key = "k"
    event_time = "t"
    state_schema = pa.schema([("k", pa.string()), ("v", pa.int64())])

    def __init__(self, data, model: dict) -> None:
        self.data, self.model, self.batch_rows = data, model, []

    def process(self, state, rows, ctx):
        wa = ctx.watermark_after
        fired = {
            k for k, (_, at) in self.model.items() if at is not None and wa is not None and at < wa
        }
        given = fired | set(rows.column("k").to_pylist())
        assert set(ctx.due.to_pylist()) == fired
        seen = sorted(
            zip(state.column("k").to_pylist(), state.column("v").to_pylist(), strict=True)
        )
        assert seen == sorted((k, v) for k in given for v in self.model.get(k, ([], None))[0])
        puts, removes, timers = [], [], []
        for k in sorted(given):
            action = self.data.draw(st.sampled_from(["put", "remove", "none"]), label=k)
            had_rows, had_at = self.model.get(k, ([], None))
            if action == "put":
                values = self.data.draw(st.lists(st.integers(0, 9), min_size=1, max_size=3))
                puts += [(k, v) for v in values]
                rows_after = values
            elif action == "remove":
                removes.append(k)
                rows_after = []
            else:
                rows_after = had_rows
            at = None if k in fired else had_at
            if rows_after:
                timer = self.data.draw(st.sampled_from(["keep", "clear", "set"]), label=f"t{k}")
                if timer == "set":
                    at = self.data.draw(st.integers(0, 60))
                    timers.append((k, at))
                elif timer == "clear":
                    at = None
                    timers.append((k, None))
                self.model[k] = (rows_after, at)
            else:
                self.model.pop(k, None)
        return stateful.Update(
            state=pa.table(
                {"k": [k for k, _ in puts], "v": [v for _, v in puts]}, schema=self.state_schema
            ),
            remove=pa.array(removes, pa.string()),
            timers=pa.table(
                {
                    "k": pa.array([k for k, _ in timers], pa.string()),
                    "at": pa.array([a for _, a in timers], pa.int64()),
                }
            ),
        )


@SETTINGS
@given(
    data=st.data(),
    batches=st.lists(st.lists(st.tuples(KEYS, st.integers(0, 50)), max_size=5), max_size=6),
)
def test_state_and_timers_follow_the_model(data, batches):
    model: dict = {}
    tables = [
        pa.table(
            {
                "k": pa.array([k for k, _ in b], pa.string()),
                "t": pa.array([t for _, t in b], pa.int64()).cast(TS),
            }
        )
        for b in batches
    ]
    run = run_local(Drawn(data, model), tables, lateness_us=10)
    stored = {}
    timers = run.state.column("_timer").cast(pa.int64()).to_pylist()
    for k, v, at in zip(
        run.state.column("k").to_pylist(), run.state.column("v").to_pylist(), timers, strict=True
    ):
        rows, _ = stored.get(k, ([], None))
        stored[k] = ([*rows, v], None if at == NEVER else at)
    assert {k: (sorted(r), at) for k, (r, at) in stored.items()} == {
        k: (sorted(r), at) for k, (r, at) in model.items()
    }
