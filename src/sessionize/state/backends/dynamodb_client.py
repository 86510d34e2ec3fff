"""A DynamoDB client for one table, batched: BatchGetItem and BatchWriteItem in parallel
chunks, unprocessed (throttled) keys and items retried with backoff, paged queries, and
every failure as one StateError line."""

from __future__ import annotations

import os
import random
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import boto3
import botocore.config
import botocore.exceptions

from sessionize.errors import StateError
from sessionize.state.metrics import StateMetrics

GET_BATCH = 100  # BatchGetItem limit
WRITE_BATCH = 25  # BatchWriteItem limit
MAX_ATTEMPTS = 12  # for unprocessed items, with exponential backoff


class BatchedClient:
    """The table `table` through `workers` threads. The boto3 client and the threads are
    made on first use in each process (a forked child makes its own). `where` names the
    store in messages; `create` creates a missing table (on demand billing) with the global
    secondary index `index` = (hash, range) string attributes, keys only; an existing table
    without that index is refused."""

    def __init__(
        self,
        table: str,
        *,
        region: str | None,
        endpoint: str | None,
        create: bool,
        workers: int,
        where: str,
        index: tuple[str, str, str],
    ):
        self.table = table
        self.index = index
        self.region = region
        self.endpoint = endpoint
        self.create = create
        self.workers = workers
        self.where = where
        self._client_pid: int | None = None
        self._client = None
        self._executor: ThreadPoolExecutor | None = None
        self._ready = False
        self._lock = threading.Lock()

    @property
    def client(self) -> Any:  # a boto3 DynamoDB client
        pid = os.getpid()
        if self._client is None or self._client_pid != pid:
            with self._lock:
                if self._client is None or self._client_pid != pid:
                    config = botocore.config.Config(
                        connect_timeout=5,
                        read_timeout=60,
                        retries={"max_attempts": 3, "mode": "standard"},
                        max_pool_connections=2 * self.workers,
                        parameter_validation=False,
                    )
                    session = boto3.session.Session()
                    self._client = session.client(
                        "dynamodb",
                        region_name=self.region,
                        endpoint_url=self.endpoint,
                        config=config,
                    )
                    self._executor = ThreadPoolExecutor(self.workers, "sessionize-dynamodb")
                    self._client_pid = pid
        return self._client

    def call(self, what: str, work: Callable[[Any], Any]) -> Any:
        """`work(boto3 client)`, its failures as StateErrors saying `what` failed."""
        try:
            return work(self.client)
        except botocore.exceptions.NoRegionError:
            raise StateError(
                f"DynamoDB state store {self.where}: {what} failed: no AWS region"
                " (add ?region=... to the URI or set AWS_DEFAULT_REGION)"
            ) from None
        except botocore.exceptions.NoCredentialsError:
            raise StateError(
                f"DynamoDB state store {self.where}: {what} failed: no AWS credentials found"
                " in the credential chain"
            ) from None
        except (botocore.exceptions.BotoCoreError, botocore.exceptions.ClientError) as e:
            text = " ".join(str(e).split())
            raise StateError(f"DynamoDB state store {self.where}: {what} failed: {text}") from None

    def ensure_table(self) -> None:
        """Wait until the table is active, creating it if it is missing (and `create`)."""
        if self._ready:
            return

        def ensure(client: Any) -> None:
            # Errors are told apart by code: the classes under client.exceptions are built
            # lazily and may differ between threads that raced to build them.
            name, hash_key, range_key = self.index
            try:
                table = client.describe_table(TableName=self.table)["Table"]
                status = table["TableStatus"]
                if name not in {i["IndexName"] for i in table.get("GlobalSecondaryIndexes", [])}:
                    raise StateError(
                        f"DynamoDB state store {self.where}: table {self.table} has the layout"
                        f" of an older sessionize (no index '{name}'): with that version,"
                        " `sessionize state migrate` the state to another store, then with"
                        " this one to a new table prefix"
                    )
            except botocore.exceptions.ClientError as e:
                if _error_code(e) != "ResourceNotFoundException":
                    raise
                if not self.create:
                    raise StateError(
                        f"DynamoDB state store {self.where}: table {self.table} does not exist"
                        " (and create=false)"
                    ) from None
                try:
                    client.create_table(
                        TableName=self.table,
                        BillingMode="PAY_PER_REQUEST",
                        AttributeDefinitions=[
                            {"AttributeName": a, "AttributeType": "S"}
                            for a in ("pk", "sk", hash_key, range_key)
                        ],
                        KeySchema=[
                            {"AttributeName": "pk", "KeyType": "HASH"},
                            {"AttributeName": "sk", "KeyType": "RANGE"},
                        ],
                        GlobalSecondaryIndexes=[
                            {
                                "IndexName": name,
                                "KeySchema": [
                                    {"AttributeName": hash_key, "KeyType": "HASH"},
                                    {"AttributeName": range_key, "KeyType": "RANGE"},
                                ],
                                "Projection": {"ProjectionType": "KEYS_ONLY"},
                            }
                        ],
                    )
                except botocore.exceptions.ClientError as created:
                    if _error_code(created) != "ResourceInUseException":  # another worker won
                        raise
                status = "CREATING"
            if status != "ACTIVE":
                client.get_waiter("table_exists").wait(
                    TableName=self.table, WaiterConfig={"Delay": 1, "MaxAttempts": 120}
                )

        self.call(f"opening table {self.table}", ensure)
        self._ready = True

    def parallel(self, work: Callable[[Any], Any], chunks: list[Any]) -> list[Any]:
        """[work(chunk) for chunk in chunks], on the worker threads."""
        if len(chunks) <= 1:
            return [work(c) for c in chunks]
        self.client  # noqa: B018 - a forked child gets its own client and threads first
        assert self._executor is not None  # made above for more than one chunk
        return list(self._executor.map(work, chunks))

    def get_items(
        self, keys: list[tuple[str, str]], metrics: StateMetrics | None, what: str
    ) -> dict[tuple[str, str], dict[str, Any]]:
        """Items by (pk, sk), read consistently, 100 per BatchGetItem, retrying unprocessed
        keys with backoff."""
        self.ensure_table()
        chunks = [keys[i : i + GET_BATCH] for i in range(0, len(keys), GET_BATCH)]

        def get(chunk: list[tuple[str, str]]) -> tuple[list[dict[str, Any]], int]:
            request = {
                self.table: {
                    "Keys": [{"pk": {"S": pk}, "sk": {"S": sk}} for pk, sk in chunk],
                    "ConsistentRead": True,
                }
            }
            found: list[dict[str, Any]] = []
            for attempt in range(MAX_ATTEMPTS):

                def get(c: Any, r: dict[str, Any] = request) -> Any:
                    return c.batch_get_item(RequestItems=r)

                reply = self.call(what, get)
                found += reply.get("Responses", {}).get(self.table, [])
                request = reply.get("UnprocessedKeys") or {}
                if not request:
                    return found, attempt + 1
                _backoff(attempt)
            raise StateError(f"DynamoDB state store {self.where}: {what}: keys stayed unprocessed")

        out: dict[tuple[str, str], dict[str, Any]] = {}
        for found, trips in self.parallel(get, chunks):
            if metrics is not None:
                metrics.round_trips += trips
                count(metrics, "items_read", len(found))
            for item in found:
                out[(item["pk"]["S"], item["sk"]["S"])] = item
        return out

    def write(
        self, requests: list[dict[str, Any]], metrics: StateMetrics | None, what: str
    ) -> None:
        """PutRequest/DeleteRequest entries, 25 per BatchWriteItem (in parallel), retrying
        unprocessed items with backoff. Order among them is not kept."""
        if not requests:
            return
        self.ensure_table()
        chunks = [requests[i : i + WRITE_BATCH] for i in range(0, len(requests), WRITE_BATCH)]

        def write(chunk: list[dict[str, Any]]) -> int:
            pending = {self.table: chunk}
            for attempt in range(MAX_ATTEMPTS):

                def put(c: Any, r: dict[str, Any] = pending) -> Any:
                    return c.batch_write_item(RequestItems=r)

                reply = self.call(what, put)
                pending = reply.get("UnprocessedItems") or {}
                if not pending:
                    return attempt + 1
                _backoff(attempt)
            raise StateError(f"DynamoDB state store {self.where}: {what}: items stayed unprocessed")

        trips = sum(self.parallel(write, chunks))
        if metrics is not None:
            metrics.round_trips += trips
            count(metrics, "items_written", len(requests))
            count(metrics, "item_bytes_written", sum(map(request_bytes, requests)))

    def query(
        self,
        pk: str,
        metrics: StateMetrics | None,
        what: str,
        *,
        below: str | None = None,
        prefix: str | None = None,
        projection: str | None = None,
        on_index: bool = False,
        where: tuple[str, dict[str, Any]] | None = None,
    ) -> list[dict[str, Any]]:
        """All items of `pk` (with sk < `below`, or sk beginning with `prefix`; those the
        filter `where` = (expression, its values) keeps), consistently; `on_index`: of the
        index, by its hash and range key (eventually consistent: the only reads an index
        allows)."""
        self.ensure_table()
        hash_key, range_key = self.index[1:] if on_index else ("pk", "sk")
        condition = f"{hash_key} = :pk"
        values: dict[str, dict[str, Any]] = {":pk": {"S": pk}}
        if below is not None and prefix is not None:
            condition += f" AND {range_key} BETWEEN :lo AND :sk"  # `below` itself is no key
            values[":lo"] = {"S": prefix}
            values[":sk"] = {"S": below}
        elif below is not None:
            condition += f" AND {range_key} < :sk"
            values[":sk"] = {"S": below}
        elif prefix is not None:
            condition += f" AND begins_with({range_key}, :sk)"
            values[":sk"] = {"S": prefix}
        request: dict[str, Any] = {
            "TableName": self.table,
            "KeyConditionExpression": condition,
            "ExpressionAttributeValues": values,
            "ConsistentRead": not on_index,
        }
        if on_index:
            request["IndexName"] = self.index[0]
        if where is not None:
            request["FilterExpression"] = where[0]
            values.update(where[1])
        if projection:
            request["ProjectionExpression"] = projection
        items: list[dict[str, Any]] = []
        while True:
            reply = self.call(what, lambda c: c.query(**request))
            if metrics is not None:
                metrics.round_trips += 1
            items += reply.get("Items", [])
            if "LastEvaluatedKey" not in reply:
                return items
            request["ExclusiveStartKey"] = reply["LastEvaluatedKey"]

    def put_one(
        self,
        item: dict[str, Any],
        what: str,
        *,
        condition: str | None = None,
        values: dict[str, Any] | None = None,
    ) -> bool:
        """PutItem of an item in the wire format ({"pk": {"S": ...}, ...}); with a
        `condition` (and its `values`), False and nothing written where it does not hold."""
        self.ensure_table()
        request: dict[str, Any] = {"TableName": self.table, "Item": item}
        if condition is not None:
            request.update(ConditionExpression=condition, ExpressionAttributeValues=values or {})
        put = self.call(what, lambda c: _unless_condition_fails(lambda: c.put_item(**request)))
        return bool(put)

    def raise_number(self, pk: str, sk: str, attribute: str, value: int, what: str) -> int:
        """Set a number attribute to max(its value, `value`) in one conditional update; the
        value afterwards."""
        self.ensure_table()
        key = {"pk": {"S": pk}, "sk": {"S": sk}}
        raised = self.call(
            what,
            lambda c: _unless_condition_fails(
                lambda: c.update_item(
                    TableName=self.table,
                    Key=key,
                    UpdateExpression=f"SET {attribute} = :v",
                    ConditionExpression=f"attribute_not_exists({attribute}) OR {attribute} < :v",
                    ExpressionAttributeValues={":v": {"N": str(value)}},
                )
            ),
        )
        return value if raised else self.read_number(pk, sk, attribute, None, what)

    def read_number(
        self, pk: str, sk: str, attribute: str, metrics: StateMetrics | None, what: str
    ) -> int:
        """A number attribute of one item, read consistently (0 if item or attribute is
        missing)."""
        item = self.get_items([(pk, sk)], metrics, what).get((pk, sk), {})
        return int(item.get(attribute, {}).get("N", 0))

    def delete_one(self, pk: str, sk: str, what: str) -> None:
        self.ensure_table()
        self.call(
            what,
            lambda c: c.delete_item(TableName=self.table, Key={"pk": {"S": pk}, "sk": {"S": sk}}),
        )


def count(metrics: StateMetrics, name: str, n: int) -> None:
    metrics.extra[name] = metrics.extra.get(name, 0) + n


def request_bytes(request: dict[str, Any]) -> int:
    """The size DynamoDB bills for the item a Put or Delete request writes: attribute names
    and values (numbers counted by their digits)."""
    put = request.get("PutRequest")
    item = put["Item"] if put else request["DeleteRequest"]["Key"]
    size = 0
    for name, value in item.items():
        ((kind, v),) = value.items()
        size += len(name.encode()) + (len(v) if kind == "B" else len(str(v).encode()))
    return size


def _unless_condition_fails(request: Callable[[], Any]) -> bool:
    """Run a conditional request: True if written, False if its condition did not hold."""
    try:
        request()
    except botocore.exceptions.ClientError as e:
        if _error_code(e) != "ConditionalCheckFailedException":
            raise
        return False
    return True


def _error_code(e: botocore.exceptions.ClientError) -> str:
    return str(e.response.get("Error", {}).get("Code", ""))


def _backoff(attempt: int) -> None:
    time.sleep(min(1.0, 0.02 * 2**attempt) * (0.5 + random.random() / 2))
