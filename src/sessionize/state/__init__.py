"""Our versioned, batched state store (DESIGN §5). See `base.py` for the contract."""

from sessionize.state.base import (
    EMPTY_VERSION,
    RowSpec,
    StateBackend,
    StateMetrics,
    StoredVersion,
)
from sessionize.state.registry import open_backend, register
from sessionize.state.transaction import PartitionState, TxState

__all__ = [
    "EMPTY_VERSION",
    "PartitionState",
    "RowSpec",
    "StateBackend",
    "StateMetrics",
    "StoredVersion",
    "TxState",
    "open_backend",
    "register",
]
