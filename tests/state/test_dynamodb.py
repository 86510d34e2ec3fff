"""The `dynamodb` backend: the contract suite and the remote checks on a DynamoDB-API server
(dynalite, services/dynamodb.sh), plus its item layout, crash repair and URI rules."""

from __future__ import annotations

import contextlib
import math
import pickle
import uuid

import boto3
import pytest

from sessionize.errors import ConfigError, StateError
from sessionize.state import open_backend
from sessionize.state.backends import dynamodb_client, dynamodb_layout
from sessionize.state.backends.dynamodb import DynamoDBBackend
from sessionize.state.backends.dynamodb_client import BatchedClient

from .contract import StateBackendContract
from .remote_checks import RemoteBackendChecks
from .services_fixtures import (  # noqa: F401 - fixtures
    dynamodb_endpoint,
    restartable,
    running,
    start_service,
)
from .workers import J, commit, expected, read_all, rows

pytestmark = pytest.mark.services
REGION = "us-east-1"


@pytest.fixture
def table_prefix(dynamodb_endpoint):  # noqa: F811
    prefix = f"t{uuid.uuid4().hex[:12]}"
    yield prefix
    client = boto3.client("dynamodb", endpoint_url=dynamodb_endpoint, region_name=REGION)
    with contextlib.suppress(client.exceptions.ResourceNotFoundException):
        client.delete_table(TableName=f"{prefix}_state")


@pytest.fixture
def make_backend(dynamodb_endpoint, table_prefix):  # noqa: F811
    def make(spec=None, cache=True):
        return DynamoDBBackend(table_prefix, endpoint=dynamodb_endpoint, region=REGION, spec=spec)

    return make


@pytest.fixture
def items(dynamodb_endpoint, table_prefix):  # noqa: F811
    """items(pk_prefix) -> {(pk, sk): item} of the test's table, by a full scan."""
    client = boto3.client("dynamodb", endpoint_url=dynamodb_endpoint, region_name=REGION)

    def scan(prefix: str = "") -> dict:
        out = {}
        for page in client.get_paginator("scan").paginate(TableName=f"{table_prefix}_state"):
            for i in page["Items"]:
                if i["pk"]["S"].startswith(prefix):
                    out[(i["pk"]["S"], i["sk"]["S"])] = i
        return out

    return scan


class TestDynamoDBContract(StateBackendContract):
    @pytest.fixture
    def unusable_backend(self, table_prefix):
        return DynamoDBBackend(table_prefix, endpoint="http://127.0.0.1:1", region=REGION)

    @pytest.fixture
    def leftovers(self, items):
        def find(backend, job, partition):
            """Version records, intents and change items of versions before the oldest
            restorable one (a key item sheds old entries when the key is next written)."""
            oldest = min(backend.versions(job, partition), default=None)
            if oldest is None:
                return []
            return sorted(
                sk
                for pk, sk in items(f"{job}#{partition}")
                if pk == f"{job}#{partition}" and sk[0] in "vic" and int(sk[1:21]) < oldest
            )

        return find


class TestDynamoDBChecks(RemoteBackendChecks):
    service = "dynamodb"
    read_chunk = dynamodb_client.GET_BATCH

    def commit_trip_bound(self, keys: int) -> int:
        # open; records, intent, reads of the keys, writes (an item per key, a change item,
        # the partition record), publish, clean-up
        reads = math.ceil(keys / dynamodb_client.GET_BATCH)
        writes = math.ceil((keys + 2) / dynamodb_client.WRITE_BATCH)
        return 5 + reads + writes

    def before_kills(self, need) -> None:
        need("dynamodb")  # see after_kill

    def after_kill(self) -> None:
        # dynalite 4.0.0 dies when a client vanishes mid-request (its request 'error'
        # handler rethrows ECONNRESET): bring it back, as an operator would restart AWS...
        # which never goes down for that. The store's own behaviour is what is tested.
        if not running("dynamodb"):  # it died; before_kills made sure the scripts run it
            start_service("dynamodb")

    def expiring_trip_bound(self, keys: int) -> int:
        # the index shards and the recent change items, then the keys
        return dynamodb_layout.INDEX_SHARDS + 1 + self.read_trips(keys) + 1


# ----- layout ----------------------------------------------------------------------------


def test_layout_items(make_backend, items):
    backend = make_backend()
    commit(backend, J, 0, -1, 0, {1: [10, 11], 2: [20]})
    commit(backend, J, 0, 0, 1, {1: [15]}, removes=[2], meta={"watermark": 7})
    got = items(J)
    keys = sorted(got)
    assert (f"{J}#0", f"v{0:020d}") in keys and (f"{J}#0", f"v{1:020d}") in keys
    assert (J, f"p{0:010d}") in keys
    key1 = got[(f"{J}#0#1", "k")]
    h = [e.split(".") for e in key1["h"]["S"].split(";")]
    lengths = [int(n) for _, _, _, n, _ in h]
    assert [(int(v), int(x)) for v, _, x, _, _ in h] == [(0, 10), (1, 15)]
    assert len(key1["b"]["B"]) == sum(lengths) > 0  # both values inline, end to end
    assert h[1][1] == got[(f"{J}#0", f"v{1:020d}")]["tok"]["S"]
    # the index attributes: the shard, and the lowest expiry the item holds
    assert (key1["xs"]["S"], key1["xe"]["S"]) == (f"{J}#0#x1", f"{10 + 2**63:020d}")
    key2 = got[(f"{J}#0#2", "k")]
    assert (key2["xs"]["S"], key2["xe"]["S"]) == (f"{J}#0#x2", f"{20 + 2**63:020d}")
    changes = {
        int(sk[1:21]): dynamodb_layout.parse_change(i)[2:]
        for (pk, sk), i in got.items()
        if pk == f"{J}#0" and sk.startswith("c")
    }
    # version 0 brought both keys into the index; version 1 lowered none and removed 2
    assert changes == {0: ({1: 10, 2: 20}, []), 1: ({}, [2])}
    assert got[(f"{J}#0", f"v{1:020d}")]["meta"]["S"] == '{"watermark": 7}'
    # maintenance: version 0 goes, so do key 2 (removed at 1) and the entries only 0 needed
    commit(backend, J, 0, 1, 2, {1: [16]})
    backend.maintenance(J, 0, retain=2)
    got = items(J)
    assert (f"{J}#0#2", "k") not in got and (f"{J}#0", f"v{0:020d}") not in got
    assert sorted(int(sk[1:21]) for _, sk in got if sk.startswith("c")) == [1]
    intents = sorted(int(sk[1:21]) for _, sk in got if sk.startswith("i"))
    assert intents == [1, 2]  # those of the retained versions only
    assert read_all(backend, J, 0, 1) == expected({1: [15]})
    assert read_all(backend, J, 0, 2) == expected({1: [16]})


def test_a_failed_attempt_never_counts_even_after_maintenance(make_backend, items, monkeypatch):
    """An attempt writes its key items, then dies before publishing its version record.
    Its entries are ignored (token mismatch) while its version is retained, and removed by
    maintenance before its version ages out, so they can never count later."""
    backend = make_backend()
    commit(backend, J, 0, -1, 0, {1: [1], 2: [2]})
    real = BatchedClient.call

    def no_publish(self, what, work):
        names = work.__code__.co_names  # the publish is a (conditional) put_item
        if what.startswith("committing") and {"put_item", "_unless_condition_fails"} & set(names):
            raise StateError("lost the server before publishing")
        return real(self, what, work)

    monkeypatch.setattr(BatchedClient, "call", no_publish)
    ps = backend.open(J, 0, 0)
    ps.put_many(rows({2: [22], 3: [33], 4: [44]}))
    ps.remove_many([1])
    with pytest.raises(StateError, match="publishing"):
        ps.commit(1)
    monkeypatch.undo()
    assert backend.versions(J, 0) == [0]
    assert read_all(backend, J, 0, 0) == expected({1: [1], 2: [2]})
    # the retried batch touches other keys only
    commit(backend, J, 0, 0, 1, {5: [5]})
    assert read_all(backend, J, 0, 1) == expected({1: [1], 2: [2], 5: [5]})
    with backend.open(J, 0, 1) as ps:
        assert ps.expiring(100).to_pylist() == [1, 2, 5]
    for v in range(2, 6):
        commit(backend, J, 0, v - 1, v, {10 + v: [v]})
    backend.maintenance(J, 0, retain=2)  # versions 0..3 leave: 1 is no longer checked
    assert backend.versions(J, 0) == [4, 5]
    assert read_all(backend, J, 0, 5, range(20)) == expected(
        {1: [1], 2: [2], 5: [5]} | {10 + v: [v] for v in range(2, 6)}
    )
    with backend.open(J, 0, 5) as ps:
        assert ps.expiring(100).to_pylist() == [1, 2, 5, 12, 13, 14, 15]
    assert (f"{J}#0#3", "k") not in items(J)  # only the failed attempt had written it


def test_big_values_go_to_chunk_items(make_backend, items, monkeypatch):
    monkeypatch.setattr(dynamodb_layout, "INLINE_LIMIT", 2_000)
    monkeypatch.setattr(dynamodb_layout, "CHUNK_BYTES", 1_500)
    backend = make_backend()
    big = {1: list(range(100))}  # a hundred rows: several KB
    commit(backend, J, 0, -1, 0, big)
    commit(backend, J, 0, 0, 1, {1: list(range(101))})
    chunks = [sk for pk, sk in items(f"{J}#0#1") if sk != "k"]
    assert chunks and all(sk.startswith("v") for sk in chunks)
    assert read_all(backend, J, 0, 0) == expected(big)
    assert read_all(backend, J, 0, 1) == expected({1: list(range(101))})


def test_expiry_reads_only_the_index_range(make_backend):
    backend = make_backend()
    commit(backend, J, 0, -1, 0, {k: [1000 + k] for k in range(2000)})
    with backend.open(J, 0, 0) as ps:
        before = ps.metrics()
        assert ps.expiring(1003).to_pylist() == [0, 1, 2]
        m = ps.metrics()
        # the index shards and the change items, then the three candidates' items: not the
        # 2000 keys
        assert m.round_trips - before.round_trips == dynamodb_layout.INDEX_SHARDS + 2
        assert m.bytes_read < 3 * 1000


def test_a_changed_key_costs_one_item_write(make_backend, items):
    """Put, changed and removed keys: one item write each, plus the attempt's intent and
    change items; and the table holds one item per key, nothing else per key."""
    backend = make_backend()
    commit(backend, J, 0, -1, 0, {k: [1000 + k] for k in range(300)})
    ps = backend.open(J, 0, 0)
    ps.get_many(list(range(400)))
    ps.put_many(rows({k: [10 + k] for k in range(100, 350)}))  # 200 changed, 50 new
    ps.remove_many(list(range(50)))  # 50 removed
    ps.commit(1)
    assert ps.metrics().extra["items_written"] == 300 + 2
    per_key = [pk for pk, sk in items(f"{J}#0#")]
    assert len(per_key) == len(set(per_key)) == 350
    assert read_all(backend, J, 0, 1, range(400)) == expected(
        {k: [1000 + k] for k in range(50, 100)} | {k: [10 + k] for k in range(100, 350)}
    )


def test_expiring_finds_lowered_keys_the_index_does_not_show_yet(
    make_backend,
    items,
    dynamodb_endpoint,  # noqa: F811
):
    """The index is eventually consistent: it may still show a key's xe from before a
    commit lowered it, or not show a new key at all. Put the index attributes of two keys
    back where a lagging index has them; `expiring` still finds both, through the change
    items, and only at the versions where they expire."""
    backend = make_backend()
    commit(backend, J, 0, -1, 0, {1: [1000], 2: [1000]})
    commit(backend, J, 0, 0, 1, {1: [50], 3: [60]})  # 1 moves earlier, 3 is new
    client = boto3.client("dynamodb", endpoint_url=dynamodb_endpoint, region_name=REGION)
    table = f"{backend.table_prefix}_state"

    def lag(key: int, update: str, values: dict | None = None) -> None:
        extra = {"ExpressionAttributeValues": values} if values else {}
        client.update_item(
            TableName=table,
            Key={"pk": {"S": f"{J}#0#{key}"}, "sk": {"S": "k"}},
            UpdateExpression=update,
            **extra,
        )

    lag(1, "SET xe = :x", {":x": {"S": dynamodb_layout.expiry_text(1000)}})
    lag(3, "REMOVE xs, xe")
    with backend.open(J, 0, 1) as ps:
        assert ps.expiring(100).to_pylist() == [1, 3]
    with backend.open(J, 0, 0) as ps:
        assert ps.expiring(100).to_pylist() == []
    with backend.open(J, 0, 1) as ps:
        assert ps.expiring(55).to_pylist() == [1]


def test_a_table_of_the_older_layout_is_refused(make_backend, dynamodb_endpoint):  # noqa: F811
    backend = make_backend()
    client = boto3.client("dynamodb", endpoint_url=dynamodb_endpoint, region_name=REGION)
    client.create_table(
        TableName=backend.table,
        BillingMode="PAY_PER_REQUEST",
        AttributeDefinitions=[{"AttributeName": a, "AttributeType": "S"} for a in ("pk", "sk")],
        KeySchema=[
            {"AttributeName": "pk", "KeyType": "HASH"},
            {"AttributeName": "sk", "KeyType": "RANGE"},
        ],
    )
    with pytest.raises(StateError, match="older sessionize.*migrate.*new table prefix") as info:
        backend.check()
    assert "\n" not in str(info.value)


# ----- URIs ------------------------------------------------------------------------------


def test_uris():
    b = open_backend("dynamodb://sessions?region=eu-west-1")
    assert isinstance(b, DynamoDBBackend) and b.table == "sessions_state"
    assert b.uri == "dynamodb://sessions?region=eu-west-1"
    b = open_backend("dynamodb://app.state?endpoint=http://127.0.0.1:8000&region=x&workers=4")
    assert (b.endpoint, b.region, b.workers) == ("http://127.0.0.1:8000", "x", 4)
    assert pickle.loads(pickle.dumps(b)).uri == b.uri
    with pytest.raises(ConfigError, match="credential chain"):
        open_backend("dynamodb://AKIAXXXX:secret@sessions")
    with pytest.raises(ConfigError, match="unknown option 'secret_key'"):
        open_backend("dynamodb://sessions?secret_key=x")
    with pytest.raises(ConfigError, match="table prefix"):
        open_backend("dynamodb://a")


def test_no_region_is_one_clear_line(monkeypatch):
    monkeypatch.delenv("AWS_DEFAULT_REGION", raising=False)
    monkeypatch.delenv("AWS_REGION", raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", "/nonexistent")
    with pytest.raises(StateError, match="no AWS region"):
        DynamoDBBackend("sessions", endpoint="http://127.0.0.1:1").check()


def test_secret_key_never_in_errors(monkeypatch):
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "s3cret-pw")
    backend = DynamoDBBackend("sessions", endpoint="http://127.0.0.1:1", region=REGION)
    with pytest.raises(StateError) as info:
        backend.check()
    assert "s3cret-pw" not in str(info.value) and "\n" not in str(info.value)
