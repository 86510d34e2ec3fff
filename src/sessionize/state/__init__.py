"""Our versioned, batched state store (see docs/design.md, 'State store'). See `base.py`
for the contract."""

from sessionize.state.base import StateBackend
from sessionize.state.metrics import StateMetrics
from sessionize.state.registry import open_backend, register
from sessionize.state.rows import EMPTY_VERSION, RowSpec, layout_rows
from sessionize.state.stored import StoredVersion
from sessionize.state.transaction import PartitionState, TxState

__all__ = [
    "EMPTY_VERSION",
    "PartitionState",
    "RowSpec",
    "StateBackend",
    "StateMetrics",
    "StoredVersion",
    "TxState",
    "layout_rows",
    "open_backend",
    "register",
]
