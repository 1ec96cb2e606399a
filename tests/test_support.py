"""The Redis test fixtures themselves work (real servers, cluster, restarts)."""

from __future__ import annotations

from typing import Any

import pytest
import redis
from django.conf import settings as django_settings

from tests.support.redis_server import RedisClusterHandle, RedisServer


def test_redis_client_set_get(redis_client: redis.Redis) -> None:
    assert redis_client.dbsize() == 0  # flushed before each test
    redis_client.set(b"greeting", b"hello")
    assert redis_client.get(b"greeting") == b"hello"


def test_redis_client_is_flushed_between_tests(redis_client: redis.Redis) -> None:
    assert redis_client.get(b"greeting") is None


def test_redis_url_points_at_session_server(redis_url: str, redis_server: RedisServer) -> None:
    assert redis_url == f"redis://127.0.0.1:{redis_server.port}/0"
    with redis.Redis.from_url(redis_url) as conn:
        assert conn.ping()
        assert conn.dbsize() == 0


def test_redis_server_version(redis_server: RedisServer) -> None:
    version = redis_server.version
    assert len(version) == 3
    assert version >= (6, 2, 0)


def test_redisq_settings(redisq_settings: Any, redis_url: str) -> None:
    assert {"URL": redis_url} == django_settings.REDISQ


def test_fresh_server_restart_keeps_data_and_port(fresh_redis_server: RedisServer) -> None:
    port = fresh_redis_server.port
    with fresh_redis_server.client() as conn:
        conn.set(b"durable", b"yes")
    fresh_redis_server.restart()
    assert fresh_redis_server.port == port
    with fresh_redis_server.client() as conn:
        assert conn.get(b"durable") == b"yes"


def test_fresh_server_kill_keeps_fsynced_data(fresh_redis_server: RedisServer) -> None:
    with fresh_redis_server.client() as conn:
        conn.set(b"durable", b"after-crash")
    fresh_redis_server.kill()
    assert not fresh_redis_server.running
    fresh_redis_server.start()
    with fresh_redis_server.client() as conn:
        assert conn.get(b"durable") == b"after-crash"


@pytest.mark.cluster
def test_cluster_accepts_writes_in_different_slots(redis_cluster: RedisClusterHandle) -> None:
    assert len(redis_cluster.nodes) == 3
    for node in redis_cluster.nodes:
        with node.client(decode_responses=True) as conn:
            assert "cluster_state:ok" in conn.execute_command("CLUSTER", "INFO")

    client = redis_cluster.client()
    try:
        keys = [f"key-{i}".encode() for i in range(30)]
        slots = {client.keyslot(key) for key in keys}  # type: ignore[no-untyped-call]
        owners = {
            client.get_node_from_key(key).port  # type: ignore[no-untyped-call]
            for key in keys
        }
        assert len(slots) > 1
        assert len(owners) == 3  # keys spread over all masters
        for key in keys:
            client.set(key, key)
        for key in keys:
            assert client.get(key) == key
    finally:
        client.close()
        redis_cluster.flushall()
