"""The `redis` backend: the contract suite and the remote checks on a real server
(services/redis.sh), plus its key layout and URI rules."""

from __future__ import annotations

import pickle
import uuid

import pytest
import redis

from sessionize.errors import ConfigError, StateError
from sessionize.state import open_backend
from sessionize.state.backends import redis as redis_backend
from sessionize.state.backends.redis import RedisBackend

from .contract import StateBackendContract
from .remote_checks import CredentialChecks, RemoteBackendChecks
from .services_fixtures import redis_uri, restartable  # noqa: F401 - fixtures
from .workers import J, commit, expected, read_all, rows

pytestmark = pytest.mark.services


@pytest.fixture
def redis_prefix(redis_uri):  # noqa: F811
    prefix = f"t{uuid.uuid4().hex[:12]}"
    yield prefix
    client = redis.Redis.from_url(redis_uri)
    keys = list(client.scan_iter(f"{prefix}:*", count=1000))
    if keys:
        client.delete(*keys)
    client.close()


@pytest.fixture
def make_backend(redis_uri, redis_prefix):  # noqa: F811
    def make(spec=None, cache=True):
        return RedisBackend(f"{redis_uri}?prefix={redis_prefix}", spec=spec)

    return make


@pytest.fixture
def client(redis_uri):  # noqa: F811
    c = redis.Redis.from_url(redis_uri)
    yield c
    c.close()


class TestRedisContract(StateBackendContract):
    @pytest.fixture
    def unusable_backend(self):
        return open_backend("redis://127.0.0.1:1/0?connect_timeout=2")

    @pytest.fixture
    def leftovers(self, client, redis_prefix):
        def find(backend, job, partition):
            """Undo hashes and version entries of versions before the oldest restorable
            one (restoring a version reads the undo of the versions after it)."""
            oldest = min(backend.versions(job, partition), default=None)
            if oldest is None:
                return []
            tag = f"{redis_prefix}:{{{job}/{partition}}}"
            undo = [k.decode() for k in client.scan_iter(f"{tag}:undo:*")]
            found = [k for k in undo if int(k.rsplit(":", 1)[1]) < oldest]
            found += [
                f"versions {v.decode()}"
                for v in client.zrange(f"{tag}:versions", 0, -1)
                if int(v) < oldest
            ]
            found += [
                f"info {f.decode()}"
                for f in client.hkeys(f"{tag}:info")
                if f != b"fence" and int(f.split(b":")[1]) < oldest
            ]
            return sorted(found)

        return find


class TestRedisChecks(RemoteBackendChecks, CredentialChecks):
    service = "redis"

    def commit_trip_bound(self, keys: int) -> int:
        return 2  # open, then one pipeline: stage and apply

    def secret_uri(self) -> str:
        return "redis://:s3cret-pw@127.0.0.1:1/0?connect_timeout=2"


# ----- layout ----------------------------------------------------------------------------


def test_layout_head_index_undo(make_backend, client, redis_prefix):
    backend = make_backend()
    commit(backend, J, 0, -1, 0, {1: [10, 11], 2: [20]})
    commit(backend, J, 0, 0, 1, {1: [15]}, removes=[2], meta={"watermark": 7})
    t = f"{redis_prefix}:{{{J}/0}}"
    assert sorted(client.scan_iter(f"{redis_prefix}:*")) == sorted(
        f"{t}:{s}".encode() for s in ("head", "exp", "versions", "info", "undo:0", "undo:1")
    ) + [f"{redis_prefix}:{{{J}}}:parts".encode()]
    assert client.hkeys(f"{t}:head") == [b"1"]
    assert client.zrange(f"{t}:exp", 0, -1) == [(15 + 2**63).to_bytes(8, "big") + b"1"]
    assert client.zrange(f"{t}:versions", 0, -1) == [b"0", b"1"]
    assert client.hget(f"{t}:info", "m:1") == b'{"watermark": 7}'
    undo = client.hgetall(f"{t}:undo:1")
    assert set(undo) == {b"1", b"2"} and undo[b"1"][:8] == (10 + 2**63).to_bytes(8, "big")
    assert client.hgetall(f"{t}:undo:0") == {b"1": b"", b"2": b""}  # absent before 0
    commit(backend, J, 0, 1, 2, {3: [30]})
    backend.maintenance(J, 0, retain=2)  # versions 1 and 2 stay; undo:0 and undo:1 go
    assert not client.exists(f"{t}:undo:0") and not client.exists(f"{t}:undo:1")
    assert client.exists(f"{t}:undo:2")
    assert read_all(backend, J, 0, 1) == expected({1: [15]})
    assert read_all(backend, J, 0, 2) == expected({1: [15], 3: [30]})


def test_a_commit_that_dies_before_its_script_leaves_an_invisible_stage(
    make_backend, client, redis_prefix, monkeypatch
):
    backend = make_backend()
    commit(backend, J, 0, -1, 0, {1: [1], 2: [2]})
    real = RedisBackend._eval

    def no_commit(self, pipe, name, keys, args):
        if name == "commit":
            pipe.execute_command("NO-SUCH-COMMAND")  # the pipeline fails after staging
            return
        real(self, pipe, name, keys, args)

    monkeypatch.setattr(RedisBackend, "_eval", no_commit)
    ps = backend.open(J, 0, 0)
    ps.put_many(rows({k: [k] for k in range(3, 500)}))
    ps.remove_many([1])
    with pytest.raises(StateError):
        ps.commit(1)
    monkeypatch.undo()
    assert backend.versions(J, 0) == [0]
    assert read_all(backend, J, 0, 0, range(500)) == expected({1: [1], 2: [2]})
    stages = list(client.scan_iter(f"{redis_prefix}:*:stage:*"))
    assert len(stages) == 1 and 0 < client.ttl(stages[0]) <= redis_backend.STAGE_TTL_S
    commit(backend, J, 0, 0, 1, {3: [3]})
    assert read_all(backend, J, 0, 1) == expected({1: [1], 2: [2], 3: [3]})


def test_scripts_are_reloaded_after_a_script_flush(make_backend, client):
    backend = make_backend()
    commit(backend, J, 0, -1, 0, {1: [1]})
    client.script_flush()
    assert read_all(backend, J, 0, 0) == expected({1: [1]})
    commit(backend, J, 0, 0, 1, {2: [2]})


def test_expiry_reads_only_the_index_range(make_backend, client, redis_prefix):
    backend = make_backend()
    commit(backend, J, 0, -1, 0, {k: [1000 + k] for k in range(5000)})
    with backend.open(J, 0, 0) as ps:
        assert ps.expiring(1003).to_pylist() == [0, 1, 2]
    # the expiring script asks Redis for a ZRANGEBYLEX range, never for the whole hash
    assert b"ZRANGEBYLEX" in redis_backend.script_source("expiring").encode()
    assert b"HGETALL', head" not in redis_backend.script_source("expiring").encode()


# ----- URIs ------------------------------------------------------------------------------


def test_uris():
    b = open_backend("redis://127.0.0.1:6379/2")
    assert isinstance(b, RedisBackend) and b.uri == "redis://127.0.0.1:6379/2"
    b = open_backend("rediss://user:pw@cache.example:6380/0?prefix=app.state&socket_timeout=5")
    assert b.uri == "rediss://user:pw@cache.example:6380/0?prefix=app.state&socket_timeout=5.0"
    assert "pw@" not in repr(b)
    assert pickle.loads(pickle.dumps(b)).uri == b.uri
    with pytest.raises(ConfigError, match="unknown option 'ttl'"):
        open_backend("redis://h/0?ttl=4")
    with pytest.raises(ConfigError, match="not a number"):
        open_backend("redis://h/zero")
