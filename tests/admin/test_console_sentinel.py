"""The console on Redis behind Sentinel (django-redis's ``SentinelClient``): the admin
reads the master the sentinels name, with its own short timeouts for both, so that a
master that hangs or stops, or a sentinel that hangs, still gives every page an answer
within 2 s and a banner. Real redis-server and a real sentinel process."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.test import Client
from django.urls import reverse

from redisq_django.admin import live
from redisq_django.connection import get_broker
from tests.support.live_data import console_pages, live_consumer
from tests.support.redis_server import RedisServer
from tests.support.sentinel import SentinelProcess

pytestmark = [pytest.mark.django_db, pytest.mark.slow]


@pytest.fixture
def master(redis_server_binary: str, tmp_path: Path) -> Iterator[RedisServer]:
    server = RedisServer(redis_server_binary, tmp_path / "master").start()
    try:
        yield server
    finally:
        if server.pid is not None:
            os.kill(server.pid, signal.SIGCONT)  # in case a test left it stopped
        server.stop()


@pytest.fixture
def sentinel(redis_server_binary: str, tmp_path: Path, master: RedisServer) -> Iterator[Any]:
    process = SentinelProcess(redis_server_binary, tmp_path / "sentinel", master.port).start()
    try:
        yield process
    finally:
        process.stop()


@pytest.fixture
def on_sentinel(settings: Any, sentinel: SentinelProcess) -> None:
    """REDISQ on a django-redis cache that finds its master through the sentinel."""
    settings.CACHES = {**settings.CACHES, "queues": sentinel.cache()}
    settings.REDISQ = {"CONNECTION": "queues", "ADMIN_REDIS_TIMEOUT": 0.3}
    live.clear()


def test_the_console_reads_the_master_the_sentinels_name(
    on_sentinel: None, root: Client, master: RedisServer, queue_name: str
) -> None:
    # Given messages in every state, published through the Sentinel-backed client
    made = live_consumer(get_broker(), queue_name)
    with master.client() as direct:  # (they are on the master itself)
        assert direct.exists(f"redisq:{{{queue_name}}}:log")
    # When staff open the pages, then each answers with its figures and no banner
    for page in console_pages(queue_name):
        response = root.get(page)
        assert response.status_code == 200, page
        assert b'id="redisq-banner"' not in response.content, page
    data = reverse("admin:redisq_django_consumer_live_data", args=[made.queue, "billing"])
    figures = root.get(data).json()["figures"]
    assert (figures["backlog"], figures["delayed"], figures["dead"]) == (
        len(made.waiting),
        len(made.delayed),
        len(made.dead),
    )


@pytest.mark.parametrize("fault", ["master hung", "master stopped", "sentinel hung"])
def test_a_hung_or_stopped_master_or_sentinel_gives_every_page_a_banner_within_2s(
    on_sentinel: None,
    root: Client,
    master: RedisServer,
    sentinel: SentinelProcess,
    queue_name: str,
    fault: str,
) -> None:
    # Given a consumer with messages, then a master that hangs (SIGSTOP: it accepts
    # connections and never answers) or stops, or a sentinel that hangs
    live_consumer(get_broker(), queue_name)
    urls = console_pages(queue_name)
    hung = {"master hung": master.pid, "sentinel hung": sentinel.pid}.get(fault)
    if hung is not None:
        os.kill(hung, signal.SIGSTOP)
    else:
        master.stop()
    try:
        for page in urls:
            live.clear()  # each page on its own, not helped by a remembered outage
            started = time.monotonic()
            response = root.get(page)
            # Then each answers within 2 s, says the Sentinel service is unreachable
            assert time.monotonic() - started < 2.0, page
            assert response.status_code == 200, page
            assert b'id="redisq-banner"' in response.content, page
            said = f"Redis at Sentinel service {sentinel.service}/0 is unreachable"
            assert said.encode() in response.content, page
    finally:
        if hung is not None:
            os.kill(hung, signal.SIGCONT)
