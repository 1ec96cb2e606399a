"""The batch sender (core/batch.py): replies in order, errors as Redis gives them, and a
connection that is never handed back with unread replies."""

from __future__ import annotations

import pytest
import redis

from redisq_django.core.batch import run_batch


def test_a_transaction_returns_every_reply_in_order(redis_client: redis.Redis, queue_name: str):
    commands = [("XADD", queue_name, f"1-{i}", "n", str(i)) for i in range(1, 301)]
    replies = run_batch(redis_client, commands, transaction=True)
    assert replies == [f"1-{i}".encode() for i in range(1, 301)]
    assert [int(f[b"n"]) for _, f in redis_client.xrange(queue_name)] == list(range(1, 301))


def test_a_command_refused_while_queued_runs_nothing(redis_client: redis.Redis, queue_name: str):
    commands = [("XADD", queue_name, "*", "n", "1"), ("XADD", queue_name), ("SET", "x", "1")]
    with pytest.raises(redis.ResponseError, match="wrong number of arguments"):
        run_batch(redis_client, commands, transaction=True)
    assert redis_client.xlen(queue_name) == 0
    assert redis_client.ping()  # the connection went back to the pool in a clean state


def test_an_error_at_exec_is_raised_after_the_others_ran(
    redis_client: redis.Redis, queue_name: str
):
    redis_client.set(f"{queue_name}:str", "a string, not a stream")
    commands = [("XADD", queue_name, "*", "n", "1"), ("XADD", f"{queue_name}:str", "*", "n", "2")]
    with pytest.raises(redis.ResponseError, match="WRONGTYPE"):
        run_batch(redis_client, commands, transaction=True)
    assert redis_client.xlen(queue_name) == 1  # MULTI does not roll back: as in Redis
    assert redis_client.get(f"{queue_name}:str") == b"a string, not a stream"


def test_without_raising_errors_come_back_in_place(redis_client: redis.Redis, queue_name: str):
    redis_client.set(f"{queue_name}:str", "x")
    commands = [
        ("XADD", queue_name, "*", "n", "1"),
        ("XADD", f"{queue_name}:str", "*", "n", "2"),
        ("EVALSHA", "0" * 40, 0),
        ("XLEN", queue_name),
    ]
    replies = run_batch(redis_client, commands, transaction=False, raise_on_error=False)
    assert isinstance(replies[0], bytes)
    assert isinstance(replies[1], redis.ResponseError) and "WRONGTYPE" in str(replies[1])
    assert isinstance(replies[2], redis.exceptions.NoScriptError)
    assert replies[3] == 1
    with pytest.raises(redis.ResponseError, match="WRONGTYPE"):
        run_batch(redis_client, commands, transaction=False)
    assert redis_client.xlen(queue_name) == 2


def test_a_connection_lost_mid_batch_raises_and_is_not_reused(
    redis_client: redis.Redis, queue_name: str
):
    # QUIT makes the server answer +OK and close: the third reply never comes.
    commands = [("XADD", queue_name, "*", "n", "1"), ("QUIT",), ("XLEN", queue_name)]
    with pytest.raises(redis.ConnectionError):
        run_batch(redis_client, commands, transaction=False)
    assert run_batch(redis_client, [("XLEN", queue_name)] * 2, transaction=False) == [1, 1]
