"""The in-memory form of a `files` version: a base plus runs reads like the one table it
stands for, whether or not its runs were folded."""

from __future__ import annotations

import random

import pyarrow as pa
import pytest

from sessionize.state import layered
from sessionize.state.layered import LayeredState
from sessionize.state.rows import RowSpec

from .workers import content, expected, rows


@pytest.mark.parametrize("settle", [False, True], ids=["runs", "folded"])
def test_reads_follow_the_newest_change_of_each_key(settle, monkeypatch):
    monkeypatch.setattr(layered, "FOLD_MIN_ROWS", 0)  # fold these few rows as a big state would
    rnd = random.Random(5)
    spec = RowSpec()
    model = {k: [rnd.randrange(100) for _ in range(rnd.randrange(1, 3))] for k in range(40)}
    state = LayeredState.of(rows(model), spec)
    for _ in range(12):
        # re-put some keys (expiring earlier or later than before), add new ones, remove some
        puts = {
            k: [rnd.randrange(100) for _ in range(rnd.randrange(1, 3))]
            for k in rnd.sample(range(60), 6)
        }
        removes = [k for k in rnd.sample(range(60), 4) if k not in puts]
        state = state.apply(rows(puts), pa.array(removes, pa.int64()), settle=settle)
        model = {k: e for k, e in (model | puts).items() if k not in removes}
        assert content(state.read(pa.array(range(70)).to_numpy())) == expected(model)
        for upto in (10, 50, 90):
            due = sorted(k for k, es in model.items() if min(es) < upto)
            assert state.expiring(upto).tolist() == due
        assert (state.rows, state.keys) == (sum(map(len, model.values())), len(model))
    assert len(state.runs) == 12 if not settle else len(state.runs) < 12
    assert content(state.fold().base.table) == expected(model)
