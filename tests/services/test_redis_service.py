"""The local Redis answers redis-py and keeps its data across a restart (append-only file)."""

from __future__ import annotations

import uuid

import pytest
import redis  # the dev extra installs it

pytestmark = pytest.mark.services


def test_round_trip(service_setting):
    client = redis.Redis.from_url(service_setting("SESSIONIZE_TEST_REDIS"), socket_timeout=10)
    key = f"services-smoke:{uuid.uuid4().hex}"
    with client.pipeline(transaction=True) as pipe:
        pipe.hset(key, mapping={"a": b"\x00\xff", "b": b"2"}).expire(key, 60)
        pipe.execute()
    assert client.hgetall(key) == {b"a": b"\x00\xff", b"b": b"2"}
    assert client.delete(key) == 1


def test_data_survives_restart(service_setting, restart_service):
    url = service_setting("SESSIONIZE_TEST_REDIS")
    key = f"services-smoke:{uuid.uuid4().hex}"
    redis.Redis.from_url(url, socket_timeout=10).set(key, b"kept", ex=600)
    restart_service("redis")
    client = redis.Redis.from_url(url, socket_timeout=10)
    assert client.get(key) == b"kept"
    client.delete(key)
