"""The data source's patience with Redis: transient faults are recognised, waited out on
a new connection (logged once per outage) and given up after option ``retryTimeout``."""

from __future__ import annotations

import logging
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import redis
from redis.exceptions import (
    AuthenticationError,
    BusyLoadingError,
    ClusterDownError,
    MasterDownError,
    ReadOnlyError,
    ResponseError,
)

from redisq_django.core.errors import RedisRefused, RedisUnavailable
from redisq_django.pipeline.options import OptionError
from redisq_django.pipeline.outages import Link, RedisOutage, transient
from redisq_django.pipeline.source_options import SourceOptions
from tests.support.hung_server import HungServer
from tests.support.redis_server import RedisServer, free_port


def _translated(cause: Exception) -> RedisUnavailable:
    """``cause`` as the core raises it (``translate_errors``: ``raise ... from``)."""
    try:
        raise RedisUnavailable("127.0.0.1:1/0", cause) from cause
    except RedisUnavailable as exc:
        return exc


def test_which_faults_are_waited_out() -> None:
    lost = redis.ConnectionError("Connection closed by server.")
    assert transient(lost) == "unreachable"
    assert transient(redis.TimeoutError("Timeout reading from socket")) == "unreachable"
    assert transient(BusyLoadingError("Redis is loading the dataset in memory")) == "loading"
    assert transient(ReadOnlyError("You can't write against a read only replica.")) == "readonly"
    assert transient(MasterDownError("Link with MASTER is down")) == "masterdown"
    assert transient(ClusterDownError("The cluster is down")) == "clusterdown"
    assert transient(_translated(lost)) == "unreachable"
    refused = ResponseError("NOREPLICAS Not enough good replicas to write.")
    assert transient(RedisRefused("127.0.0.1:1/0", "noreplicas", refused)) == "noreplicas"
    # Not transient: a wrong password, an error reply, a bug, and giving up itself
    assert transient(AuthenticationError("invalid username-password pair")) is None
    assert transient(_translated(AuthenticationError("WRONGPASS"))) is None
    assert transient(ResponseError("WRONGTYPE Operation against a key")) is None
    assert transient(ValueError("bad")) is None
    assert transient(RedisOutage("gave up")) is None


def test_the_new_options_and_their_defaults() -> None:
    default = SourceOptions.parse({"url": "redis://h"})
    assert (default.retry_timeout, default.socket_timeout) == (600.0, 10.0)
    assert default.max_records_per_trigger is None
    assert default.max_entries_per_slice == 100_000
    given = SourceOptions.parse(
        {
            "url": "redis://h",
            "retryTimeout": "0",
            "socketTimeout": "2.5",
            "maxRecordsPerTrigger": "500",
            "maxEntriesPerSlice": "1000",
        }
    )
    assert (given.retry_timeout, given.socket_timeout) == (0.0, 2.5)
    assert (given.max_records_per_trigger, given.max_entries_per_slice) == (500, 1000)
    for bad in ({"socketTimeout": "0"}, {"retryTimeout": "-1"}, {"retryTimeout": "soon"}):
        with pytest.raises(OptionError, match=next(iter(bad))):
            SourceOptions.parse({"url": "redis://h", **bad})


def _warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "redisq.pipeline"]


@pytest.mark.slow
def test_a_restarted_redis_is_waited_for_and_logged_once(
    redis_server_binary: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # Given a link to a Redis that is stopped, and started again (same port) 2 s later
    server = RedisServer(redis_server_binary, tmp_path / "redis", port=free_port()).start()
    link = Link(SourceOptions.parse({"url": server.url, "socketTimeout": "1"}))
    assert link.run(lambda: link.client.set("k", "v"), "writing k")
    server.stop()
    caplog.set_level(logging.INFO, "redisq.pipeline")
    got: list[bytes] = []

    # When a call is made meanwhile (in a thread: the server must be started from this
    # one, which it dies with)
    def nested_then_echo() -> bytes:
        link.run(lambda: None, "a nested call")  # no Redis: it cannot end the outage
        return bytes(link.client.echo("back"))

    def echo() -> None:
        got.append(link.run(nested_then_echo, "echoing"))

    call = threading.Thread(target=echo)
    call.start()
    try:
        time.sleep(2.0)
        server.start()
        call.join(timeout=60)
    finally:
        link.close()
        server.stop()
    # Then it returns once Redis is back, with one line when the outage began and one
    # when it ended, however many tries it took
    assert got == [b"back"]
    lines = _warnings(caplog)
    assert len(lines) == 2, lines
    assert "is unreachable" in lines[0] and "while echoing" in lines[0]
    assert "answers again" in lines[1]


@pytest.mark.slow
def test_an_outage_longer_than_retry_timeout_fails_with_one_clear_line(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # Given a "Redis" that accepts connections and never answers (a stalled server)
    with HungServer() as hung:
        options = {"url": hung.url, "socketTimeout": "0.3", "retryTimeout": "1.5"}
        link = Link(SourceOptions.parse(options))
        started = time.monotonic()
        # When the data source asks it something
        with pytest.raises(RedisOutage) as failure:
            link.run(lambda: link.client.get("k"), "listing queues")
        elapsed = time.monotonic() - started
        tries = hung.accepted
    # Then it tried again on new connections and gave up after retryTimeout, saying why
    assert tries >= 2
    assert 1.5 <= elapsed < 10
    message = str(failure.value)
    assert "retryTimeout (1.5 s)" in message and "while listing queues" in message
    assert len(_warnings(caplog)) == 1  # the outage's start; not a line per try


def test_a_batch_reads_first_contact_with_nothing_listening_fails_at_once(
    redis_server_binary: str, tmp_path: Path
) -> None:
    # Given a batch read's link to a port where nothing listens (a wrong port)
    options = {"url": f"redis://127.0.0.1:{free_port()}/0", "retryTimeout": "600"}
    link = Link(SourceOptions.parse(options), first_contact="fail fast")
    started = time.monotonic()
    # Then its first call fails at once, saying it is the address, not an outage
    with pytest.raises(RedisOutage) as failure:
        link.run(lambda: link.client.ping(), "planning the read")
    assert time.monotonic() - started < 5
    assert "Nothing answers at that address" in str(failure.value)
    # While the same link after a first answer waits an outage out (here 1.5 s)
    server = RedisServer(redis_server_binary, tmp_path / "redis", port=free_port()).start()
    options = {"url": server.url, "socketTimeout": "1", "retryTimeout": "1.5"}
    answered = Link(SourceOptions.parse(options), first_contact="fail fast")
    assert answered.run(lambda: answered.client.ping(), "pinging")
    server.stop()
    started = time.monotonic()
    with pytest.raises(RedisOutage) as waited:
        answered.run(lambda: answered.client.ping(), "pinging")
    assert time.monotonic() - started >= 1.4
    assert "retryTimeout (1.5 s)" in str(waited.value)
    # And a default link (a stream's, a write's) waits at first contact too
    patient = Link(SourceOptions.parse({"url": server.url, "retryTimeout": "1"}))
    with pytest.raises(RedisOutage, match="retryTimeout"):
        patient.run(lambda: patient.client.ping(), "pinging")


@pytest.mark.spark
def test_a_spark_batch_read_of_a_wrong_port_fails_in_seconds(spark: Any) -> None:
    frame = (
        spark.read.format("redisq")
        .options(url=f"redis://127.0.0.1:{free_port()}/0", queue="orders")
        .load()
    )
    started = time.monotonic()
    with pytest.raises(Exception, match="Nothing answers at that address"):
        frame.count()
    assert time.monotonic() - started < 60
