"""Fixtures of the engine tests: the S3 server and a bucket per test (tests/s3_fixtures.py)."""

from tests.s3_fixtures import bucket_uri, s3_endpoint  # noqa: F401
