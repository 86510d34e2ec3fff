"""The `dynamodb` backend: the contract suite on a real DynamoDB-API server (dynalite, from
services/dynamodb.sh), plus its layout, batching bounds, failure handling and URI rules."""

from __future__ import annotations

import contextlib
import uuid

import boto3
import pytest

from sessionize.state.backends.dynamodb import DynamoDBBackend

from .contract import StateBackendContract
from .services_fixtures import dynamodb_endpoint  # noqa: F401 - fixture

REGION = "us-east-1"


@pytest.fixture
def table_prefix(dynamodb_endpoint):  # noqa: F811
    prefix = f"t{uuid.uuid4().hex[:12]}"
    yield prefix
    client = boto3.client("dynamodb", endpoint_url=dynamodb_endpoint, region_name=REGION)
    with contextlib.suppress(client.exceptions.ResourceNotFoundException):
        client.delete_table(TableName=f"{prefix}_state")


class TestDynamoDBContract(StateBackendContract):
    @pytest.fixture
    def make_backend(self, dynamodb_endpoint, table_prefix):  # noqa: F811
        def make(spec=None, cache=True):
            return DynamoDBBackend(
                table_prefix, endpoint=dynamodb_endpoint, region=REGION, spec=spec
            )

        return make
