"""Random sequences of put/remove/read/commit/abort/open/maintenance/truncate against a dict.

The model is the list of committed versions (version -> {key: rows}) plus the open
transaction's staged writes, where a removed key is a sentinel distinct from "not staged".
The store under test is `files` with a short snapshot interval and the process cache on;
every committed version is also re-read through an instance without a cache.
"""

from __future__ import annotations

import shutil
import tempfile

import hypothesis.strategies as st
from hypothesis import HealthCheck, settings
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from sessionize.state.backends.files import FilesBackend

from .workers import J, content, expected, rows

KEYS = st.integers(0, 4)
EXPIRIES = st.lists(st.integers(0, 20), min_size=1, max_size=3)
REMOVED = object()  # sentinel: staged removal, unlike a key that is simply not staged
ALL_KEYS = list(range(5))


class StateStoreMachine(RuleBasedStateMachine):
    def __init__(self):
        super().__init__()
        self.root = tempfile.mkdtemp(prefix="state-machine-")
        self.backend = FilesBackend(self.root, snapshot_every=3)
        self.fresh = FilesBackend(self.root, snapshot_every=3, cache_mb=0)
        self.committed: dict[int, dict[int, list]] = {}
        self.metas: dict[int, dict] = {}
        self.step = 0
        self._open(-1)

    def teardown(self):
        if self.tx.state.value == "open":
            self.tx.abort()
        shutil.rmtree(self.root, ignore_errors=True)

    # ----- model helpers --------------------------------------------------------------

    def _open(self, version: int) -> None:
        self.tx = self.backend.open(J, 0, version)
        self.loaded = version
        self.staged: dict[int, object] = {}

    def _base(self) -> dict[int, list]:
        return self.committed.get(self.loaded, {}) if self.loaded >= 0 else {}

    def _view(self) -> dict[int, list]:
        view = dict(self._base())
        for k, v in self.staged.items():
            if v is REMOVED:
                view.pop(k, None)
            else:
                view[k] = v
        return view

    # ----- rules ----------------------------------------------------------------------

    @rule(key=KEYS, exps=EXPIRIES)
    def put(self, key, exps):
        self.step += 1
        page = f"s{self.step}-"
        self.tx.put_many(rows({key: exps}, page))
        self.staged[key] = expected({key: exps}, page)[key]

    @rule(keys=st.lists(KEYS, max_size=3))
    def remove(self, keys):
        self.tx.remove_many(keys)
        for k in keys:
            self.staged[k] = REMOVED

    @rule(keys=st.lists(KEYS, max_size=5))
    def get(self, keys):
        view = self._view()
        want = {k: view[k] for k in set(keys) if k in view}
        assert content(self.tx.get_many(keys)) == want

    @rule(upto=st.integers(0, 22))
    def expiring(self, upto):
        want = sorted(k for k, rs in self._view().items() if min(e for _, e in rs) < upto)
        assert self.tx.expiring(upto).to_pylist() == want

    @rule(gap=st.integers(1, 2))
    def commit(self, gap):
        version = self.loaded + gap
        self.step += 1
        meta = {"step": self.step}
        view = self._view()
        self.tx.commit(version, meta)
        self.committed = {v: s for v, s in self.committed.items() if v <= self.loaded}
        self.committed[version] = view
        self.metas[version] = meta
        self._open(version)

    @rule(data=st.data())
    def abort_and_open(self, data):
        version = data.draw(st.sampled_from([-1, *sorted(self.committed)]))
        self.tx.abort()
        self._open(version)

    @precondition(lambda self: self.committed)
    @rule(data=st.data())
    def reload_elsewhere(self, data):
        version = data.draw(st.sampled_from(sorted(self.committed)))
        with self.fresh.open(J, 0, version) as ps:
            assert content(ps.get_many(ALL_KEYS)) == self.committed[version]
            assert ps.meta == self.metas[version]

    @precondition(lambda self: self.committed)
    @rule(retain=st.integers(1, 4))
    def maintenance(self, retain):
        self.tx.abort()
        self.backend.maintenance(J, 0, retain)
        kept = self.backend.versions(J, 0)
        assert kept[-retain:] == sorted(self.committed)[-retain:]
        assert set(kept) <= set(self.committed)
        self.committed = {v: s for v, s in self.committed.items() if v in kept}
        self._open(kept[-1])

    @rule(data=st.data())
    def truncate_after(self, data):
        version = data.draw(st.sampled_from([-1, *sorted(self.committed)]))
        self.tx.abort()
        self.backend.truncate_after(J, version)
        self.committed = {v: s for v, s in self.committed.items() if v <= version}
        self._open(version)

    @invariant()
    def versions_match(self):
        assert self.backend.versions(J, 0) == sorted(self.committed)

    @invariant()
    def transaction_sees_the_model(self):
        assert content(self.tx.get_many(ALL_KEYS)) == self._view()


TestStateStoreMachine = StateStoreMachine.TestCase
TestStateStoreMachine.settings = settings(
    max_examples=30,
    stateful_step_count=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
