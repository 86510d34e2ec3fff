"""Fixtures shared by the state tests, defined once so that session-scoped ones run once."""

from .remote_checks import files_runs  # noqa: F401 - the `files` runs every backend must match
