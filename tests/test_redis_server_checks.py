"""The Redis server the guarantees need (issue 8, point 8): ``check --deploy`` and a
``runconsumer`` start warn about an evicting Redis, one without AOF, and say once when
the configuration cannot be read; a noeviction + AOF server passes."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from django.core import checks

from tests.support.redis_server import RedisServer
from tests.support.workers import Workers

pytestmark = [pytest.mark.django_db, pytest.mark.servers]

StartServer = Callable[..., RedisServer]


@pytest.fixture
def start_server(redis_server_binary: str, tmp_path: Path) -> Iterator[StartServer]:
    """Starts private redis-servers with the given arguments; stops them all after."""
    servers: list[RedisServer] = []

    def start(*args: str) -> RedisServer:
        workdir = tmp_path / f"redis-{len(servers)}"
        server = RedisServer(redis_server_binary, workdir, extra_args=args)
        servers.append(server)
        server.start()
        return server

    try:
        yield start
    finally:
        for server in servers:
            server.stop()


def deploy_checks(settings: Any, server: RedisServer) -> list[checks.CheckMessage]:
    """redisq's messages of ``check --deploy`` with REDISQ pointing at ``server``."""
    settings.REDISQ = {"URL": server.url}
    found = checks.run_checks(include_deployment_checks=True)
    return [m for m in found if m.id and m.id.startswith("redisq_django.")]


def deploy_check_ids(settings: Any, server: RedisServer) -> set[str]:
    return {m.id for m in deploy_checks(settings, server) if m.id}


def test_an_evicting_redis_without_aof_is_reported_by_check_deploy(
    settings: Any, start_server: StartServer
) -> None:
    # Given the configuration of a Django cache: allkeys-lru, no AOF
    server = start_server("--maxmemory-policy", "allkeys-lru", "--appendonly", "no")
    # Then check --deploy names both (warnings: the check command still exits 0)
    found = {m.id: m for m in deploy_checks(settings, server)}
    assert set(found) == {"redisq_django.W010", "redisq_django.W011"}
    eviction = found["redisq_django.W010"]
    assert eviction.level == checks.WARNING
    assert "allkeys-lru" in eviction.msg and "noeviction" in eviction.hint


def test_a_noeviction_redis_with_aof_passes(settings: Any, start_server: StartServer) -> None:
    server = start_server(
        "--maxmemory-policy", "noeviction", "--appendonly", "yes", "--appendfsync", "everysec"
    )
    assert deploy_check_ids(settings, server) == set()


def test_aof_without_fsync_is_reported(settings: Any, start_server: StartServer) -> None:
    server = start_server(
        "--maxmemory-policy", "noeviction", "--appendonly", "yes", "--appendfsync", "no"
    )
    assert deploy_check_ids(settings, server) == {"redisq_django.W012"}


def test_a_redis_refusing_config_get_is_said_once_not_failed(
    settings: Any, start_server: StartServer
) -> None:
    # Given a managed-Redis-like server where CONFIG is not available
    server = start_server("--rename-command", "CONFIG", "")
    # Then one informational message says so, and nothing fails
    found = deploy_checks(settings, server)
    assert [(m.id, m.level) for m in found] == [("redisq_django.I014", checks.INFO)]
    assert "CONFIG GET" in found[0].msg


@pytest.mark.slow
def test_runconsumer_warns_at_start_about_an_evicting_redis(
    start_server: StartServer, tmp_path: Path
) -> None:
    # Given an evicting Redis without AOF
    server = start_server("--maxmemory-policy", "allkeys-lru")
    workers = Workers(server.url, tmp_path / "db.sqlite3", tmp_path / "logs")
    workers.migrate()
    # When a worker starts (and, with --burst, stops at once)
    done = workers.run("runconsumer", "together", "--burst", timeout=60)
    # Then it ran, and said what is wrong once each, as warnings
    assert done.returncode == 0, done.stderr
    assert done.stderr.count("WARNING Redis evicts keys") == 1
    assert done.stderr.count("WARNING Redis runs without an append-only file") == 1
