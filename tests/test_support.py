"""The Redis test fixtures themselves work (real servers, cluster, restarts)."""

from __future__ import annotations

from typing import Any

import pytest
import redis
from django.conf import settings as django_settings

from redisq_django.core import CoreConfig
from redisq_django.core.keys import validate_name
from tests.support.redis_server import RedisClusterHandle, RedisServer


# Tests of the fixtures themselves: these check that empty_redis empties the server.
@pytest.mark.usefixtures("empty_redis")
def test_redis_client_set_get(redis_client: redis.Redis) -> None:
    assert redis_client.dbsize() == 0  # empty_redis flushed it
    redis_client.set(b"greeting", b"hello")
    assert redis_client.get(b"greeting") == b"hello"


# Tests of the fixtures themselves: runs after the test above, which left "greeting".
@pytest.mark.usefixtures("empty_redis")
def test_empty_redis_is_flushed_between_tests(redis_client: redis.Redis) -> None:
    assert redis_client.get(b"greeting") is None


def test_redis_client_does_not_flush(
    redis_server: RedisServer, queue_name: str, request: pytest.FixtureRequest
) -> None:
    # Given a key written to the session server before redis_client is set up
    with redis_server.client() as conn:
        conn.set(queue_name, b"kept")
    # Then redis_client (and redis_url) still see it: only empty_redis flushes
    client: redis.Redis = request.getfixturevalue("redis_client")
    assert client.get(queue_name) == b"kept"
    url: str = request.getfixturevalue("redis_url")
    with redis.Redis.from_url(url) as conn:
        assert conn.get(queue_name) == b"kept"
    client.delete(queue_name)


# Tests of the fixtures themselves: the URL reaches the server that empty_redis emptied.
@pytest.mark.usefixtures("empty_redis")
def test_redis_url_points_at_session_server(redis_url: str, redis_server: RedisServer) -> None:
    assert redis_url == f"redis://127.0.0.1:{redis_server.port}/0"
    with redis.Redis.from_url(redis_url) as conn:
        assert conn.ping()
        assert conn.dbsize() == 0


def test_queue_name_is_valid_and_unique_per_test(
    queue_name: str, request: pytest.FixtureRequest
) -> None:
    assert validate_name("queue", queue_name) == queue_name
    assert len(queue_name) <= 64  # leaves room for derived names like f"{queue_name}.mail"
    assert queue_name.startswith("queue-name-is-valid-and-unique-per-test-")
    assert queue_name not in _seen_queue_names
    _seen_queue_names.add(queue_name)


@pytest.mark.parametrize("n", range(3))
def test_queue_name_differs_between_parametrized_tests(queue_name: str, n: int) -> None:
    assert validate_name("queue", f"{queue_name}.{'x' * 30}")
    assert queue_name not in _seen_queue_names
    _seen_queue_names.add(queue_name)


_seen_queue_names: set[str] = set()


def test_redis_server_version(redis_server: RedisServer) -> None:
    version = redis_server.version
    assert len(version) == 3
    assert version >= (6, 2, 0)


def test_redisq_settings(redisq_settings: Any, redis_url: str) -> None:
    assert {"URL": redis_url, "ADMIN_REDIS_TIMEOUT": 2.0} == django_settings.REDISQ


def test_the_broker_is_a_core_one_on_the_session_server_by_default(
    broker: Any, redis_server: RedisServer
) -> None:
    assert broker.config == CoreConfig()
    assert broker.client.connection_pool.connection_kwargs["port"] == redis_server.port


@pytest.mark.core_config(poll_interval_ms=20, queue_partitions=3)
def test_the_broker_takes_the_closest_core_config(broker: Any, queue_name: str) -> None:
    assert broker.config.poll_interval_ms == 20
    assert broker.config.partitions == {queue_name: 3}


@pytest.mark.django_db
@pytest.mark.site_broker(REPLAY_WINDOW=0, queue_partitions=2)
def test_a_site_broker_is_the_sites_with_the_markers_settings(
    broker: Any, redis_url: str, queue_name: str
) -> None:
    from redisq_django.connection import get_broker

    assert broker is get_broker()
    assert {
        "URL": redis_url,
        "ADMIN_REDIS_TIMEOUT": 2.0,
        "REPLAY_WINDOW": 0,
        "PARTITIONS": {queue_name: 2},
    } == django_settings.REDISQ


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
