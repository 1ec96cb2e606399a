"""The console on a Redis Cluster that is sick: the admin builds its own cluster client
with short timeouts, so a cluster unreachable when the admin first looks gives every page
a banner, never an error page, and a hung node gives a banner after some timeouts rather
than a page that never answers. Real redis-servers (a private 3-master cluster: a hung
node must not disturb other tests)."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse

from redisq_django.admin import live
from redisq_django.connection import get_broker
from tests.support.live_data import console_pages, live_consumer
from tests.support.redis_server import RedisClusterHandle, free_port, start_cluster

pytestmark = pytest.mark.django_db


@pytest.fixture
def root() -> Client:
    client = Client(raise_request_exception=False)  # an error page is an outcome here
    client.force_login(User.objects.create_superuser("root", password="pw"))
    return client


def test_a_cluster_unreachable_at_the_first_look_gives_a_banner_not_an_error(
    settings: Any, root: Client
) -> None:
    # Given REDISQ on a cluster whose only node is not there (no client can be built)
    port = free_port()
    settings.REDISQ = {"URL": f"redis://:secret@127.0.0.1:{port}/0", "CLUSTER": True}
    live.clear()
    # When staff open the overview and the queue list
    for page in ("overview_changelist", "queue_changelist"):
        response = root.get(reverse(f"admin:redisq_django_{page}"))
        # Then each answers with the banner naming the cluster, never its password
        assert response.status_code == 200, page
        assert b'id="redisq-banner"' in response.content, page
        assert f"Redis at cluster 127.0.0.1:{port} is unreachable".encode() in response.content
        assert b"secret" not in response.content


@pytest.fixture
def private_cluster(
    redis_server_binary: str, redis_cli_binary: str, tmp_path: Path
) -> Iterator[RedisClusterHandle]:
    cluster = start_cluster(redis_server_binary, redis_cli_binary, tmp_path / "cluster")
    try:
        yield cluster
    finally:
        for node in cluster.nodes:
            if node.pid is not None:
                os.kill(node.pid, signal.SIGCONT)  # in case the test left one stopped
        cluster.stop()


@pytest.fixture
def only_this_queue() -> Iterator[None]:
    """No consumer declared by other test modules: the pages read this test's queue only."""
    from redisq_django.consuming.declarations import registry

    saved = dict(registry._declarations)
    registry._declarations.clear()
    try:
        yield
    finally:
        registry._declarations.update(saved)


@pytest.mark.cluster
@pytest.mark.slow
def test_a_hung_cluster_node_gives_every_page_a_banner_not_a_hang(
    settings: Any,
    root: Client,
    private_cluster: RedisClusterHandle,
    queue_name: str,
    only_this_queue: None,
) -> None:
    # Given a consumer with messages on a 3-master cluster
    settings.REDISQ = {
        "URL": private_cluster.nodes[0].url,
        "CLUSTER": True,
        "ADMIN_REDIS_TIMEOUT": 0.3,
    }
    live.clear()
    broker = get_broker()
    made = live_consumer(broker, queue_name)
    urls = console_pages(queue_name)
    assert root.get(urls[0]).status_code == 200
    # ...whose queue's node then hangs (SIGSTOP: it accepts and never answers)
    owner = broker.client.get_node_from_key(broker.keys(made.queue).log)
    node = next(n for n in private_cluster.nodes if n.port == owner.port)
    assert node.pid is not None
    os.kill(node.pid, signal.SIGSTOP)
    try:
        live.clear()
        started = time.monotonic()
        response = root.get(urls[0])
        # Then the overview answers with the banner. Not within 2 s: redis-py's cluster
        # pipeline resends each command that failed on its own, one timeout each, so it
        # takes one admin timeout per command sent to the node (seconds with a few
        # queues); the application's client, with no timeout, never answers.
        assert time.monotonic() - started < 30.0
        assert response.status_code == 200
        assert b'id="redisq-banner"' in response.content
    finally:
        os.kill(node.pid, signal.SIGCONT)
