"""Fixtures shared by the state tests, defined once so that session-scoped ones run once."""

from tests.s3_fixtures import bucket_uri, s3_endpoint  # noqa: F401 - `files` state on S3

from .remote_checks import files_runs  # noqa: F401 - the `files` runs every backend must match
