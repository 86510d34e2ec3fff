"""A partition's whole state in memory, kept so that a version's changes cost what they touch.

A `LayeredState` is a *base* (all rows of a state as of some version) plus the *runs*
committed on top of it since, oldest first: each run is one version's puts and the keys it
removed. The newest run that put or removed a key decides that key's rows; a key no run
touched has its rows in the base. Every layer keeps its rows sorted by key (so its key
column is its key index) and its keys ordered by earliest expiry; a *shadow* index (every
key some run decided, sorted, with the newest run that decided it) answers "which layer
holds this key" with one binary search.

So a commit is a new run (sort the puts, insert their keys into the shadow), a read of K
keys is K binary searches per layer, and expiry reads each layer's keys in expiry order up
to the time asked. Only `fold` touches every row (filter the base and the runs, merge them
by key, index again); it runs when the runs have grown to a fraction of the base, so its cost
amortizes over the versions that fill them. Every instance is immutable: a version opened
earlier keeps reading the layers it was opened on while later commits build new instances.

The base may also be *lazy* (any `BaseLayer`, e.g. the `files` store's snapshot read by row
group): it answers the same questions by reading only what they need, and then `fold`
merges the runs into one run instead of into the base, and `whole` loads it.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Protocol, cast

import numpy as np
import pyarrow as pa

from sessionize.state.metrics import StateMetrics
from sessionize.state.rows import RowSpec

FOLD_FRACTION = 0.25  # fold once the runs hold this share of the base's rows ...
FOLD_MIN_ROWS = 50_000  # ... and at least this many (a small state folds every few runs)
MAX_RUNS = 64  # ... or once there are more runs (a read searches each)

_EMPTY = np.array([], np.int64)


def _sorted_member(values: np.ndarray, sorted_set: np.ndarray) -> np.ndarray:
    """Which of `values` are in `sorted_set` (sorted, unique)."""
    if not len(sorted_set) or not len(values):
        return np.zeros(len(values), bool)
    pos = np.searchsorted(sorted_set, values)
    pos[pos == len(sorted_set)] = 0
    return cast(np.ndarray, sorted_set[pos] == values)


def _ranges(starts: np.ndarray, stops: np.ndarray) -> np.ndarray:
    """The concatenated row positions of [start, stop) ranges."""
    counts = stops - starts
    total = int(counts.sum())
    if not total:
        return _EMPTY
    offsets = np.cumsum(counts) - counts
    return cast(np.ndarray, np.arange(total, dtype=np.int64) + np.repeat(starts - offsets, counts))


def _int64(column: pa.ChunkedArray | pa.Array) -> np.ndarray:
    if isinstance(column, pa.ChunkedArray):
        column = column.combine_chunks()
    return cast(np.ndarray, column.cast(pa.int64()).to_numpy(zero_copy_only=False))


class BaseLayer(Protocol):
    """What a `LayeredState` asks of its base. `io` (if given) counts what a read cost."""

    @property
    def rows(self) -> int: ...

    @property
    def data_nbytes(self) -> int:
        """About the in-memory bytes of all its rows."""
        ...

    @property
    def nbytes(self) -> int:
        """The bytes it holds in memory."""
        ...

    def take(self, keys: np.ndarray, io: StateMetrics | None = None) -> pa.Table:
        """All rows of `keys` (sorted, unique), sorted by key."""
        ...

    def count(self, keys: np.ndarray, io: StateMetrics | None = None) -> tuple[int, int]:
        """(rows, keys) it holds of `keys` (sorted, unique)."""
        ...

    def expiring(self, upto_us: int, io: StateMetrics | None = None) -> np.ndarray:
        """The unique keys with a row expiring strictly before `upto_us`."""
        ...

    def whole(self, io: StateMetrics | None = None) -> Layer:
        """All of it in memory."""
        ...


@dataclass(frozen=True)
class Layer:
    """Rows sorted by key, with the indexes a read needs: the key column (a view of the
    table's, so sorted keys cost no memory of their own), its unique keys, and those keys
    ordered by their earliest expiry."""

    table: pa.Table
    keys: np.ndarray  # the key column (sorted, with repeats)
    unique: np.ndarray  # its unique keys (sorted)
    exp_min: np.ndarray  # earliest expiry of each unique key, ascending
    exp_keys: np.ndarray  # the unique keys in that order

    @classmethod
    def of(cls, table: pa.Table, spec: RowSpec) -> Layer:
        keys = _int64(table.column(spec.key))
        if len(keys) > 1 and not bool(np.all(keys[1:] >= keys[:-1])):
            order = np.argsort(keys, kind="stable")  # stable: a key's rows keep their order
            table = table.take(pa.array(order))
        table = table.combine_chunks()
        keys = _int64(table.column(spec.key))
        if not len(keys):
            return cls(table, keys, _EMPTY, _EMPTY, _EMPTY)
        starts = np.flatnonzero(np.r_[True, keys[1:] != keys[:-1]])
        unique = keys[starts]
        exp_min = np.minimum.reduceat(_int64(table.column(spec.expiry)), starts)
        by_exp = np.argsort(exp_min, kind="stable")
        return cls(table, keys, unique, exp_min[by_exp], unique[by_exp])

    def rows_of(self, keys: np.ndarray) -> np.ndarray:
        """Row positions of `keys` (sorted) in this layer."""
        lo = np.searchsorted(self.keys, keys, "left")
        hi = np.searchsorted(self.keys, keys, "right")
        return _ranges(lo, hi)

    def take(self, keys: np.ndarray, io: StateMetrics | None = None) -> pa.Table:
        rows = self.rows_of(keys)
        return self.table.take(pa.array(rows)) if len(rows) else self.table.slice(0, 0)

    def count(self, keys: np.ndarray, io: StateMetrics | None = None) -> tuple[int, int]:
        """(rows, keys) this layer holds of `keys` (sorted)."""
        held = np.searchsorted(self.keys, keys, "right") - np.searchsorted(self.keys, keys)
        return int(held.sum()), int(np.count_nonzero(held))

    def expiring(self, upto_us: int, io: StateMetrics | None = None) -> np.ndarray:
        return self.exp_keys[: np.searchsorted(self.exp_min, upto_us, "left")]

    def whole(self, io: StateMetrics | None = None) -> Layer:
        return self

    @property
    def rows(self) -> int:
        return len(self.keys)

    @property
    def data_nbytes(self) -> int:
        return int(self.table.nbytes)

    @property
    def nbytes(self) -> int:
        arrays = (self.unique, self.exp_min, self.exp_keys)  # `keys` is the table's column
        return int(self.table.nbytes + sum(a.nbytes for a in arrays))


@dataclass(frozen=True)
class LayeredState:
    """One version's whole state: a base and the runs since (see the module docstring)."""

    spec: RowSpec
    base: BaseLayer
    runs: tuple[Layer, ...]  # oldest first
    shadow: np.ndarray  # every key a run decided (sorted, unique) ...
    shadow_run: np.ndarray  # ... and the index in `runs` of the newest run that decided it
    rows: int  # live rows and keys
    keys: int

    @classmethod
    def of(cls, table: pa.Table, spec: RowSpec) -> LayeredState:
        base = Layer.of(table.cast(spec.schema), spec)
        return cls(spec, base, (), _EMPTY, _EMPTY, len(base.keys), len(base.unique))

    @classmethod
    def lazy(cls, base: BaseLayer, keys: int, spec: RowSpec) -> LayeredState:
        """The state of a lazy `base` holding `keys` unique keys."""
        return cls(spec, base, (), _EMPTY, _EMPTY, base.rows, keys)

    @property
    def is_lazy(self) -> bool:
        return not isinstance(self.base, Layer)

    @classmethod
    def empty(cls, spec: RowSpec) -> LayeredState:
        return cls.of(spec.empty(), spec)

    # ----- reads ------------------------------------------------------------------------

    def _locate(self, keys: np.ndarray) -> list[tuple[BaseLayer, np.ndarray]]:
        """(layer, the keys it decides) of `keys` (sorted, unique)."""
        found: list[tuple[BaseLayer, np.ndarray]] = []
        decided = _sorted_member(keys, self.shadow)
        if len(self.runs) and decided.any():
            hit = keys[decided]
            run_of = self.shadow_run[np.searchsorted(self.shadow, hit)]
            for i in np.unique(run_of):
                found.append((self.runs[int(i)], hit[run_of == i]))
        found.append((self.base, keys[~decided]))
        return found

    def read(self, keys: np.ndarray, io: StateMetrics | None = None) -> pa.Table:
        """All rows of `keys` (unique; any order)."""
        pieces = []
        for layer, held in self._locate(np.sort(keys)):
            if len(held):
                piece = layer.take(held, io)
                if piece.num_rows:
                    pieces.append(piece)
        return pa.concat_tables(pieces) if pieces else self.spec.empty()

    def expiring(self, upto_us: int, io: StateMetrics | None = None) -> np.ndarray:
        """The unique keys with a live row expiring strictly before `upto_us`."""
        out = [self.base.expiring(upto_us, io)]
        out[0] = out[0][~_sorted_member(out[0], self.shadow)]
        for i, run in enumerate(self.runs):
            cand = run.expiring(upto_us)
            if len(cand):  # live only where this run is still the newest to decide the key
                out.append(cand[self.shadow_run[np.searchsorted(self.shadow, cand)] == i])
        return np.unique(np.concatenate(out))

    @property
    def nbytes(self) -> int:
        arrays = self.shadow.nbytes + self.shadow_run.nbytes
        return self.base.nbytes + sum(r.nbytes for r in self.runs) + arrays

    @property
    def state_bytes(self) -> int:
        """About the bytes of the live rows (the layers' bytes per row times the live rows)."""
        held = self.base.rows + sum(len(run.keys) for run in self.runs)
        total = self.base.data_nbytes + sum(run.table.nbytes for run in self.runs)
        return round(total * self.rows / held) if held else 0

    # ----- changes ----------------------------------------------------------------------

    def apply(
        self,
        puts: pa.Table,
        removes: pa.Array,
        settle: bool = True,
        io: StateMetrics | None = None,
        counted: bool = True,
    ) -> LayeredState:
        """This state with the keys of `puts` replaced by `puts` and `removes` deleted
        (then folded if the runs have grown enough, unless `settle` is False: a chain of
        deltas being loaded folds once, at its end). Unless `counted`, the live rows and
        keys are left wrong (a load sets them from the commit record: `with_counts`) and
        a lazy base reads nothing."""
        if puts.num_rows == 0 and len(removes) == 0:
            return self
        run = Layer.of(puts.cast(self.spec.schema), self.spec)
        changed = np.unique(np.concatenate([run.unique, _int64(removes)]))  # sorted
        gone_rows = gone_keys = 0
        located = self._locate(changed) if counted else []  # what `changed` replaces
        for layer, held in located:
            rows, keys = layer.count(held, io) if len(held) else (0, 0)
            gone_rows, gone_keys = gone_rows + rows, gone_keys + keys
        index = len(self.runs)
        # insert the new keys into the shadow, and point every changed key at the new run
        pos = np.searchsorted(self.shadow, changed)
        known = _sorted_member(changed, self.shadow)
        shadow = np.insert(self.shadow, pos[~known], changed[~known])
        shadow_run = np.insert(self.shadow_run, pos[~known], index)
        shadow_run[np.searchsorted(shadow, changed)] = index
        state = LayeredState(
            self.spec,
            self.base,
            (*self.runs, run),
            shadow,
            shadow_run,
            self.rows - gone_rows + len(run.keys),
            self.keys - gone_keys + len(run.unique),
        )
        return state.settled() if settle else state

    def with_counts(self, rows: int, keys: int) -> LayeredState:
        return replace(self, rows=rows, keys=keys)

    def settled(self) -> LayeredState:
        """This state, folded if its runs hold more than FOLD_FRACTION of the base's rows
        (and FOLD_MIN_ROWS) or number more than MAX_RUNS."""
        held = sum(len(r.keys) for r in self.runs)
        bound = max(FOLD_FRACTION * self.base.rows, FOLD_MIN_ROWS)
        if held > bound or len(self.runs) > MAX_RUNS:
            return self.fold()
        return self

    def fold(self) -> LayeredState:
        """The same state with every run merged into a new base (a lazy base stays: its
        runs are merged into one run)."""
        if not self.runs:
            return self
        pieces = [run.table.filter(pa.array(self._live(i))) for i, run in enumerate(self.runs)]
        base = self.base
        if not isinstance(base, Layer):
            if len(self.runs) == 1:
                return self
            run = Layer.of(pa.concat_tables(pieces), self.spec)
            zero = np.zeros(len(self.shadow), self.shadow_run.dtype)
            return LayeredState(self.spec, base, (run,), self.shadow, zero, self.rows, self.keys)
        kept = base.table.filter(pa.array(~_sorted_member(base.keys, self.shadow)))
        return LayeredState.of(pa.concat_tables([kept, *pieces]), self.spec)

    def _live(self, i: int) -> np.ndarray:
        """Which rows of run `i` are still live (no later run decided their key)."""
        return cast(
            np.ndarray, self.shadow_run[np.searchsorted(self.shadow, self.runs[i].keys)] == i
        )

    def whole(self, io: StateMetrics | None = None) -> LayeredState:
        """The same state with every row in memory, folded into one base."""
        if isinstance(self.base, Layer):
            return self.fold()
        base = self.base.whole(io)
        return LayeredState(
            self.spec, base, self.runs, self.shadow, self.shadow_run, self.rows, self.keys
        ).fold()
