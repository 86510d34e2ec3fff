"""Fresh state stores for the state tools' tests."""

from __future__ import annotations

import uuid

import pytest

from tests.state_params import _REMOTE


@pytest.fixture
def store(tmp_path):
    """store(kind) -> a fresh, empty state URI of `files`, `postgres`, `redis` or
    `dynamodb` (the remote ones dropped afterwards)."""
    drops = []

    def make(kind: str) -> str:
        if kind == "files":
            return f"files:{tmp_path / uuid.uuid4().hex[:8]}"
        uri, drop = _REMOTE[kind](f"t{uuid.uuid4().hex[:12]}")
        drops.append(drop)
        return uri

    yield make
    for drop in drops:
        drop()
