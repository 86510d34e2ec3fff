"""Lease records on S3: created by a conditional PUT, so exactly one of racing drivers wins."""

from __future__ import annotations

from sessionize.fs import child
from sessionize.state.lease import ObjectLeaseRecords, lease_records
from tests.state.test_lease import _race


def test_exactly_one_of_racing_creators_wins_on_s3(bucket_uri):
    records = lease_records(child(bucket_uri, "_lease"))
    assert isinstance(records, ObjectLeaseRecords)
    _race(records)
