"""The `redis` backend: the contract suite on a real server (services/redis.sh), plus its
layout, batching bounds, failure handling and URI rules."""

from __future__ import annotations

import uuid

import pytest
import redis

from sessionize.state.backends.redis import RedisBackend

from .contract import StateBackendContract
from .services_fixtures import redis_uri  # noqa: F401 - fixture


@pytest.fixture
def redis_prefix(redis_uri):  # noqa: F811
    prefix = f"t{uuid.uuid4().hex[:12]}"
    yield prefix
    client = redis.Redis.from_url(redis_uri)
    keys = list(client.scan_iter(f"{prefix}:*", count=1000))
    if keys:
        client.delete(*keys)
    client.close()


class TestRedisContract(StateBackendContract):
    @pytest.fixture
    def make_backend(self, redis_uri, redis_prefix):  # noqa: F811
        def make(spec=None, cache=True):
            return RedisBackend(f"{redis_uri}?prefix={redis_prefix}", spec=spec)

        return make
