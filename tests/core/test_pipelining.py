"""The pipelining layer (core/pipelining.py): replies in order, each error in its place,
exactly the calls refused with NOSCRIPT sent again, a lost connection reported per reply
and never handed back to the pool, and the acknowledgements built on it."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from redis._parsers import _RESP2Parser, _RESP3Parser

from redisq_django.core import Broker, CoreConfig
from redisq_django.core.pipelining import Expect, Pipe, _hiredis_reader, packed, skipping_replies
from redisq_django.core.scripts import Scripts
from redisq_django.core.worker.acks import AckPipe
from tests.support.redis_server import HOST, RedisServer

#: The clients whose replies a pipe reads: redis-py 8's default (RESP3) and RESP2 read
#: from hiredis directly; text replies; redis-py's own parsers, read reply by reply.
READERS: dict[str, tuple[dict[str, Any], bool]] = {
    "hiredis-resp3": ({"protocol": 3}, True),
    "hiredis-resp2": ({"protocol": 2}, True),
    "hiredis-text": ({"protocol": 2, "decode_responses": True}, True),
    "python-resp2": ({"protocol": 2, "parser_class": _RESP2Parser}, False),
    "python-resp3": ({"protocol": 3, "parser_class": _RESP3Parser}, False),
}


@pytest.fixture(params=list(READERS))
def reader_client(request: pytest.FixtureRequest, _session_redis: RedisServer) -> Iterator[Any]:
    """A way to make clients with one of :data:`READERS`' parsers (more settings as
    keywords), and whether a pipe reads their replies from hiredis directly."""
    kwargs, direct = READERS[request.param]
    made: list[redis.Redis] = []

    def make(**more: Any) -> redis.Redis:
        pool = redis.ConnectionPool(host=HOST, port=_session_redis.port, **kwargs, **more)
        made.append(redis.Redis(connection_pool=pool))
        return made[-1]

    try:
        yield make, direct
    finally:
        for client in made:
            client.close()
            client.connection_pool.disconnect()


def _text(value: Any) -> Any:
    return value.decode() if isinstance(value, bytes) else value


def test_every_parser_gives_the_same_replies_errors_and_noscript_in_their_places(
    reader_client: tuple[Any, bool], queue_name: str
) -> None:
    # Given a client with one of the parsers, and writes of many commands: numbers,
    # texts, nulls, arrays, a transaction, an error reply, a script Redis does not hold
    make, direct = reader_client
    client = make()
    scripts = Scripts(client)
    client.script_flush()
    key = f"{queue_name}:n"
    keys = [f"{queue_name}:{k}" for k in ("log", "direct", "r", "d", "h", "b", "events")]
    ack = packed(scripts.command("ack", keys, ["g", "i", "", 0, 0]))
    pipe: Pipe[int] = Pipe(client, scripts)
    commands = [packed(("INCR", key)) for _ in range(300)]
    commands += [packed(("HSET", key, "f", "v")), packed(("GET", f"{key}:none"))]
    commands += [packed(("MULTI",)), packed(("XADD", f"{key}:s", "*", "a", "b")), packed(("EXEC",))]
    commands += [ack, packed(("LRANGE", f"{key}:none", 0, -1))]
    expect = [Expect(i, "ack", c) if c is ack else Expect(i) for i, c in enumerate(commands)]
    pipe.write(b"".join(commands[:150]), expect[:150])
    pipe.write(b"".join(commands[150:]), expect[150:])
    assert (_hiredis_reader(pipe._conn) is not None) is direct
    # When the replies are read
    replies = pipe.read()
    pipe.release()
    # Then they are the same whichever parser read them, each in its place
    assert [tag for tag, _ in replies] == list(range(len(commands)))
    assert [r for _, r in replies[:300]] == list(range(1, 301))
    wrong, none, ok, queued, executed, script, empty = (r for _, r in replies[300:])
    assert isinstance(wrong, redis.ResponseError) and "WRONGTYPE" in str(wrong)
    assert none is None
    assert _text(ok) == "OK" and _text(queued) == "QUEUED"
    assert len(executed) == 1 and _text(executed[0]).count("-") == 1
    assert script == 0  # refused with NOSCRIPT, loaded, sent again
    assert empty == []
    assert _text(client.get(key)) == "300"
    assert pipe.unread == 0


def test_a_timeout_while_reading_is_each_unread_reply_and_the_pipe_goes_on(
    reader_client: tuple[Any, bool], queue_name: str
) -> None:
    # Given a client that waits 0.3 s for a reply, and a write Redis answers in part
    # before a command that blocks for 2 s
    make, _ = reader_client
    impatient = make(socket_timeout=0.3)
    key = f"{queue_name}:n"
    pipe: Pipe[int] = Pipe(impatient)
    pipe.write(
        packed(("INCR", key)) + packed(("BLPOP", f"{queue_name}:never", 2)) + packed(("INCR", key)),
        [Expect(0), Expect(1), Expect(2)],
    )
    # When the replies are read
    started = time.monotonic()
    replies = pipe.read()
    # Then the first is its own, the blocked one and the one after it the timeout, read
    # in about the client's time and not Redis's 2 s
    assert replies[0] == (0, 1)
    assert [type(r) for _, r in replies[1:]] == [redis.TimeoutError] * 2
    assert time.monotonic() - started < 1.5
    # and the next write is read on a fresh connection, its reply its own
    pipe.write(packed(("GET", key)), [Expect(3)])
    assert [(t, _text(r)) for t, r in pipe.read()] == [(3, "1")]
    pipe.release()


def test_a_push_message_between_replies_goes_to_the_parser_not_into_the_replies(
    _session_redis: RedisServer, redis_client: redis.Redis, queue_name: str
) -> None:
    # Given a RESP3 client tracking a key for client-side caching (Redis pushes an
    # invalidation on the same connection when the key changes)
    client = _session_redis.client(protocol=3)
    key = f"{queue_name}:tracked"
    redis_client.set(key, "a")
    pipe: Pipe[int] = Pipe(client)
    pipe.write(packed(("CLIENT", "TRACKING", "ON")) + packed(("GET", key)), [Expect(0), Expect(1)])
    assert [(t, _text(r)) for t, r in pipe.read()] == [(0, "OK"), (1, "a")]
    assert _hiredis_reader(pipe._conn) is not None
    pushed: list[Any] = []
    pipe._conn._parser.pubsub_push_handler_func = pushed.append  # a push nobody else takes
    pipe._conn._parser.invalidation_push_handler_func = pushed.append
    redis_client.set(key, "b")  # Redis sends the invalidation to the pipe's connection
    time.sleep(0.1)
    # When commands are written and their replies read
    pipe.write(packed(("INCR", f"{key}:n")) + packed(("GET", key)), [Expect(2), Expect(3)])
    replies = pipe.read()
    pipe.write(packed(("CLIENT", "TRACKING", "OFF")), [Expect(4)])
    pipe.read()
    pipe.release()
    client.close()
    # Then the replies are the commands' own, and the invalidation went to its handler
    assert [(t, _text(r)) for t, r in replies] == [(2, 1), (3, "b")]
    assert len(pushed) == 1 and _text(pushed[0][0]) == "invalidate"


def test_replies_come_back_in_order_with_each_error_in_its_place(
    redis_client: redis.Redis, queue_name: str
) -> None:
    # Given two writes of three commands, the second refused by Redis
    pipe: Pipe[str] = Pipe(redis_client)
    key = f"{queue_name}:n"
    pipe.write(packed(("INCR", key)) + packed(("HSET", key, "f", "v")), [Expect("a"), Expect("b")])
    pipe.write(packed(("INCR", key)) + skipping_replies([("INCR", key)]), [Expect("c")])
    # When the replies are read
    replies = pipe.read()
    pipe.release()
    # Then each comes back with its tag, the refusal as its exception, the rest applied
    assert [tag for tag, _ in replies] == ["a", "b", "c"]
    assert replies[0][1] == 1
    assert isinstance(replies[1][1], redis.ResponseError)
    assert "WRONGTYPE" in str(replies[1][1])
    assert replies[2][1] == 2
    assert redis_client.get(key) == b"3"  # the skipped one ran too, unanswered
    assert pipe.unread == 0


def test_after_noscript_exactly_the_refused_calls_run_again(
    redis_client: redis.Redis, queue_name: str
) -> None:
    # Given a Redis that lost its scripts, and a write of a plain command between two
    # script calls: one marked to be sent again, one not
    scripts = Scripts(redis_client)
    redis_client.script_flush()
    key = f"{queue_name}:n"
    # ack.lua acknowledging no id: a call that answers 0 (the settle layout's seven keys)
    keys = [f"{queue_name}:{k}" for k in ("log", "direct", "r", "d", "h", "b", "events")]
    ack = scripts.command("ack", keys, ["g", "i", "", 0, 0])
    marked, unmarked = packed(ack), packed(ack)
    pipe: Pipe[str] = Pipe(redis_client, scripts)
    pipe.write(
        marked + packed(("INCR", key)) + unmarked,
        [Expect("marked", "ack", marked), Expect("incr"), Expect("unmarked")],
    )
    # When the replies are read
    replies = dict(pipe.read())
    pipe.release()
    # Then the marked call ran after the script was loaded, the plain command once, and
    # the unmarked call's refusal is its reply
    assert replies["marked"] == 0
    assert replies["incr"] == 1
    assert redis_client.get(key) == b"1"
    assert isinstance(replies["unmarked"], redis.exceptions.NoScriptError)
    assert redis_client.script_exists(ack[1]) == [True]


def test_a_lost_connection_is_each_unread_reply_and_never_goes_back_to_the_pool(
    redis_client: redis.Redis, queue_name: str
) -> None:
    # Given a write Redis is still answering (a blocked BLPOP, an INCR queued behind it)
    key = f"{queue_name}:n"
    pipe: Pipe[int] = Pipe(redis_client)
    name = f"victim-{queue_name}"[:60]
    pipe.write(
        skipping_replies([("CLIENT", "SETNAME", name)])
        + packed(("BLPOP", f"{queue_name}:never", 5))
        + packed(("INCR", key)),
        [Expect(0), Expect(1)],
    )
    assert pipe.tags() == [0, 1]
    victim = None
    for _ in range(200):  # bounded: 2 s
        victim = next((c for c in redis_client.client_list() if c["name"] == name), None)
        if victim is not None and victim["cmd"] == "blpop":
            break
        time.sleep(0.01)
    assert victim is not None
    # When Redis closes that connection before answering
    redis_client.client_kill_filter(_id=victim["id"])
    replies = pipe.read()
    # Then each unread reply is the connection's failure, and the pool serves new work
    # on a fresh connection, whose replies are its own
    assert [tag for tag, _ in replies] == [0, 1]
    assert all(isinstance(r, redis.ConnectionError) for _, r in replies)
    assert pipe.unread == 0
    pipe.write(packed(("INCR", key)), [Expect(2)])
    assert pipe.read() == [(2, 1)]
    pipe.release()
    assert redis_client.get(key) == b"1"


def test_a_connection_given_back_unread_is_closed_not_reused(
    redis_client: redis.Redis, queue_name: str
) -> None:
    # Given a write whose reply nobody read
    key = f"{queue_name}:n"
    redis_client.set(key, "mine")
    pipe: Pipe[None] = Pipe(redis_client)
    pipe.write(packed(("INCR", f"{key}:other")), [Expect(None)])
    # When the pipe gives its connection back
    pipe.release()
    # Then the client's next commands read their own replies, not that one
    for _ in range(3):
        assert redis_client.get(key) == b"mine"


def test_acknowledgements_flushed_after_redis_lost_its_scripts_are_all_applied(
    redis_client: redis.Redis, queue_name: str
) -> None:
    # Given handled messages acknowledged through ack.lua (history on) and a Redis that
    # lost its scripts (restarted) before the acknowledgements were written
    broker = Broker(redis_client, CoreConfig(history=True))
    broker.consumers.ensure(queue_name, "billing")
    broker.publish_many(queue_name, [{"n": i} for i in range(3)])
    sub = broker.subscribe(queue_name, "billing", "w1")
    fetched = sub.fetch(count=3, block_ms=500)
    acked: list[str] = []
    pipe = AckPipe(sub, lambda messages: acked.extend(m.id for m in messages))
    redis_client.script_flush()
    for m in fetched:
        pipe.add(m)
        pipe.send(mark=None)
    # When the batch is flushed
    pipe.flush()
    # Then every one is acknowledged when flush returns, each reported once
    log = broker.keys(queue_name).log
    assert redis_client.xpending(log, "billing")["pending"] == 0
    assert sorted(acked) == sorted(m.id for m in fetched)
    assert pipe.pending == 0
    pipe.close()


def test_publishing_once_after_redis_lost_its_scripts_sends_each_call_once(
    redis_client: redis.Redis, queue_name: str
) -> None:
    # Given a Redis that lost its scripts (restarted)
    broker = Broker(redis_client)
    broker.consumers.ensure(queue_name, "billing")
    redis_client.script_flush()
    # When a batch is published once per message id
    envelopes = [broker.prepare(queue_name, {"n": n}, id=f"m{n}") for n in range(3)]
    ids = broker.send(envelopes, once=True)
    # Then each message is in the log once
    assert ids == ["m0", "m1", "m2"]
    entries = redis_client.xrange(broker.keys(queue_name).log)
    assert [f[b"id"] for _, f in entries] == [b"m0", b"m1", b"m2"]
    assert broker.stats(queue_name).consumers[0].backlog == 3
