"""Fixtures of the engine tests: the S3 server and a bucket per test (tests/s3_fixtures.py),
and the revising stream the `--revise-within` tests on Parquet share (revising.py)."""

import pytest

from sessionize.commands.stream import run_stream
from tests.engines.revising import batch_of_every_event, revising_input, revising_stream
from tests.s3_fixtures import bucket_uri, s3_endpoint  # noqa: F401


@pytest.fixture(scope="session")
def revised_parquet(spark, tmp_path_factory):
    """The revising input (two hours, held-back files, one flush event after them) under
    ROOT/in, its uninterrupted stream with the window to local Parquet (ROOT/clean/out) and
    its batch run (ROOT/batch/out): (ROOT, the input)."""
    root = tmp_path_factory.mktemp("revisions")
    inp = revising_input(root / "in")
    run_stream(revising_stream(inp, root / "clean"), spark, on_batch=lambda _: None)
    batch_of_every_event(spark, inp, root / "batch" / "out")
    return root, inp
