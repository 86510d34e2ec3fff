"""A pytest plugin for tests/test_serial_part.py: every test is skipped before its fixtures
are set up, its reason the pytest-xdist worker it was sent to."""

from __future__ import annotations

import os

import pytest


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item) -> None:
    pytest.skip(f"worker {os.environ.get('PYTEST_XDIST_WORKER')} {item.nodeid}")
