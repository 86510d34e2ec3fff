"""The local DynamoDB-API server (dynalite) answers boto3, batch calls included, and keeps its
tables across a restart."""

from __future__ import annotations

import uuid

import boto3  # the dev extra installs it
import pytest

pytestmark = pytest.mark.services


@pytest.fixture
def dynamodb(service_setting):
    return boto3.client(
        "dynamodb",
        endpoint_url=service_setting("SESSIONIZE_TEST_DYNAMODB"),
        region_name=service_setting("AWS_DEFAULT_REGION"),
        aws_access_key_id=service_setting("AWS_ACCESS_KEY_ID"),
        aws_secret_access_key=service_setting("AWS_SECRET_ACCESS_KEY"),
    )


@pytest.fixture
def table(dynamodb):
    name = f"services-smoke-{uuid.uuid4().hex[:12]}"
    dynamodb.create_table(
        TableName=name,
        KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
        AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}],
        BillingMode="PAY_PER_REQUEST",
    )
    dynamodb.get_waiter("table_exists").wait(TableName=name, WaiterConfig={"Delay": 1})
    yield name
    dynamodb.delete_table(TableName=name)


def test_round_trip(dynamodb, table):
    dynamodb.put_item(TableName=table, Item={"pk": {"S": "one"}, "v": {"B": b"\x00\xff"}})
    item = dynamodb.get_item(TableName=table, Key={"pk": {"S": "one"}}, ConsistentRead=True)
    assert item["Item"]["v"]["B"] == b"\x00\xff"


def test_batch_write_and_get(dynamodb, table):
    keys = [f"k{i}" for i in range(25)]  # 25 is BatchWriteItem's limit per call
    requests = [
        {"PutRequest": {"Item": {"pk": {"S": k}, "n": {"N": str(i)}}}} for i, k in enumerate(keys)
    ]
    written = dynamodb.batch_write_item(RequestItems={table: requests})
    assert not written["UnprocessedItems"]
    got = dynamodb.batch_get_item(
        RequestItems={table: {"Keys": [{"pk": {"S": k}} for k in keys], "ConsistentRead": True}}
    )
    assert not got["UnprocessedKeys"]
    assert sorted(int(item["n"]["N"]) for item in got["Responses"][table]) == list(range(25))


def test_data_survives_restart(dynamodb, table, restart_service):
    dynamodb.put_item(TableName=table, Item={"pk": {"S": "kept"}})
    restart_service("dynamodb")
    item = dynamodb.get_item(TableName=table, Key={"pk": {"S": "kept"}}, ConsistentRead=True)
    assert item["Item"] == {"pk": {"S": "kept"}}
