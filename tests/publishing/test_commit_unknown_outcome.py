"""A transaction's messages are published exactly once after the commit even when the
reply of the send is lost after Redis executed it (issue 8, point 13).

Staged with a real redis-server kept busy by a slow script from another connection: the
publisher's send times out (its socket timeout is tiny) while Redis holds the command,
and Redis runs it once the script ends. ``publish_on_commit`` sends the batch again under
the same batch id; Redis publishes a batch id once.
"""

from __future__ import annotations

import collections
import logging
import socket
import threading
import time
from typing import Any

import pytest
from django.db import transaction

from redisq_django.connection import get_broker
from redisq_django.publishing import publish_on_commit
from tests.support.redis_server import RedisServer

#: A script that keeps Redis busy for ARGV[1] microseconds (Redis serves nobody meanwhile).
BUSY = """
local t = redis.call('TIME')
local start = t[1] * 1000000 + t[2]
for _ = 1, 100000000 do
  local n = redis.call('TIME')
  if n[1] * 1000000 + n[2] - start >= tonumber(ARGV[1]) then return 1 end
end
"""
BUSY_MS = 400


def keep_busy(server: RedisServer) -> threading.Thread:
    """Start the busy script from another connection; return once Redis stops answering."""
    busy = server.client()
    thread = threading.Thread(target=busy.eval, args=(BUSY, 0, BUSY_MS * 1000), daemon=True)
    thread.start()
    # A raw socket: redis-py's client would retry a timed-out PING until the script ends.
    with socket.create_connection(("127.0.0.1", server.port), timeout=1) as probe:
        probe.settimeout(0.02)
        for _ in range(100):  # bounded: at most ~3 s
            probe.sendall(b"PING\r\n")
            try:
                assert probe.recv(64) == b"+PONG\r\n"
            except TimeoutError:
                return thread  # Redis is inside the script
            time.sleep(0.01)
    raise AssertionError("Redis never got busy")


@pytest.mark.django_db(transaction=True)
def test_a_send_whose_reply_is_lost_is_retried_and_published_exactly_once(
    queue_name: str,
    settings: Any,
    volatile_redis_server: RedisServer,
    caplog: pytest.LogCaptureFixture,
) -> None:
    # Given a publisher whose socket timeout (0.1 s) is much shorter than Redis is busy
    settings.REDISQ = {"URL": f"{volatile_redis_server.url}?socket_timeout=0.1"}
    caplog.set_level(logging.WARNING, logger="redisq.publish")
    broker = get_broker()
    broker.client.ping()  # connected before Redis gets busy
    with transaction.atomic():
        ids = [publish_on_commit(queue_name, {"n": n}) for n in range(5)]
        thread = keep_busy(volatile_redis_server)
    # When the transaction commits: the first send times out, Redis runs it later
    thread.join(timeout=10)
    assert not thread.is_alive()
    # Then the send was tried again (the fault was staged) and no error was logged
    records = [r for r in caplog.records if r.name == "redisq.publish"]
    assert any("trying again" in r.getMessage() for r in records)
    assert [r.getMessage() for r in records if r.levelno >= logging.ERROR] == []
    # And each message is in the log exactly once
    client = volatile_redis_server.client()
    entries = client.xrange(broker.keys(queue_name).log)
    counts = collections.Counter(f[b"id"].decode() for _, f in entries)
    assert counts == {message_id: 1 for message_id in ids}
