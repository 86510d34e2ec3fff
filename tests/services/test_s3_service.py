"""The local S3-API server (moto) answers boto3 and pyarrow, enforces conditional PUTs, and
keeps its objects across a restart (saved on stop, loaded at start)."""

from __future__ import annotations

import uuid

import boto3  # the dev extra installs it
import pyarrow.fs as pafs
import pytest
from botocore.exceptions import ClientError

pytestmark = pytest.mark.services


def _client(endpoint: str):
    return boto3.client(
        "s3",
        endpoint_url=endpoint,
        region_name="us-east-1",
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
    )


def test_round_trip_and_conditional_put(service_setting):
    endpoint = service_setting("SESSIONIZE_TEST_S3")
    client, bucket = _client(endpoint), f"smoke-{uuid.uuid4().hex[:12]}"
    client.create_bucket(Bucket=bucket)
    client.put_object(Bucket=bucket, Key="k", Body=b"\x00\xff", IfNoneMatch="*")
    with pytest.raises(ClientError, match="PreconditionFailed"):
        client.put_object(Bucket=bucket, Key="k", Body=b"again", IfNoneMatch="*")
    fs = pafs.S3FileSystem(
        endpoint_override=endpoint.removeprefix("http://"),
        scheme="http",
        access_key="testing",
        secret_key="testing",
    )
    with fs.open_input_stream(f"{bucket}/k") as f:
        assert f.read() == b"\x00\xff"


def test_data_survives_restart(service_setting, restart_service):
    endpoint = service_setting("SESSIONIZE_TEST_S3")
    bucket = f"smoke-{uuid.uuid4().hex[:12]}"
    _client(endpoint).create_bucket(Bucket=bucket)
    _client(endpoint).put_object(Bucket=bucket, Key="k", Body=b"kept")
    restart_service("s3")
    assert _client(endpoint).get_object(Bucket=bucket, Key="k")["Body"].read() == b"kept"
