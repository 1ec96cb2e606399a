"""The protocol version on the wire (PROTOCOL.md, "Versions and upgrades", issue 19): every
shipped script takes ``redisq/2`` as ``ARGV[1]`` and refuses anything else, before it
reads or writes anything, with an error naming itself and what the caller sent; every
way our code calls a script sends the token.

The script tests iterate over ``SCRIPT_NAMES``, so a script added later is held to the
same rule (the loader refuses a name without its ``.lua`` file, and a file without a
name is caught by ``test_every_shipped_file_is_a_named_script``).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
import redis.asyncio

import redisq_django
import redisq_django.core.scripts as shipped
from redisq_django.core import Broker, ProtocolMismatch
from redisq_django.core.batch import run_batch, run_script
from redisq_django.core.keys import QueueKeys, queue_keys
from redisq_django.core.scripts import SCRIPT_NAMES, AsyncScripts, ScriptName, Scripts
from redisq_django.core.tasks.pipe import TaskPipe
from tests.support.aio import run_async

SCRIPTS_DIR = Path(shipped.__file__).parent
PACKAGE_DIR = Path(redisq_django.__file__).parent
#: What every script says, after its name, when refusing a call (PROTOCOL.md).
REFUSAL = re.compile(
    r"REDISQ_PROTOCOL script (?P<name>\w+)\.lua speaks redisq/2, caller sent '(?P<sent>.*)': "
    r"load the scripts shipped with the redisq version your client implements$"
)


def some_keys(qk: QueueKeys) -> list[str]:
    """Seven keys of one queue (as many as any script takes), none of them existing."""
    gk = qk.group("billing")
    return [qk.log, gk.direct, gk.retry, gk.dead, qk.task_result("r1"), qk.task_results, qk.events]


@pytest.mark.parametrize("name", SCRIPT_NAMES)
@pytest.mark.parametrize(
    ("first", "shown"),
    [
        (None, ""),  # no argument at all
        ("billing", "billing"),  # a protocol-1 call: its first real argument
        ("redisq/1", "redisq/1"),
        ("redisq/2 ", "redisq/2 "),  # never trimmed
        ("redisq/" + "9" * 30, "redisq/" + "9" * 13),  # the first 20 characters
        ("a\r\nb", "a??b"),  # control characters cannot break the error reply
    ],
)
def test_every_script_refuses_another_protocol_version(
    redis_client: redis.Redis, qk: QueueKeys, name: ScriptName, first: str | None, shown: str
) -> None:
    # Given the shipped file, loaded as another language's client would (SCRIPT LOAD)
    sha = redis_client.script_load((SCRIPTS_DIR / f"{name}.lua").read_text())
    keys = some_keys(qk)
    args = [] if first is None else [first, "billing", "worker-1", "0", "+1000", "1", "x"]
    # When it is called without the protocol token
    with pytest.raises(redis.ResponseError) as refused:
        redis_client.evalsha(sha, len(keys), *keys, *args)
    # Then it refuses with the documented error, naming itself and what it got
    match = REFUSAL.match(str(refused.value))
    assert match is not None, str(refused.value)
    assert (match["name"], match["sent"]) == (name, shown)
    # And it read or wrote nothing
    assert redis_client.exists(*keys) == 0


def test_every_shipped_file_is_a_named_script() -> None:
    assert sorted(p.stem for p in SCRIPTS_DIR.glob("*.lua")) == sorted(SCRIPT_NAMES)


def test_no_call_path_builds_evalsha_outside_the_loader() -> None:
    # The token is added where scripts are called: Scripts / AsyncScripts. Any other code
    # sending EVALSHA (or registering a script, or reading its SHA to send one) would have
    # to add it again, and would be the one place that forgets.
    loader = SCRIPTS_DIR / "__init__.py"
    offenders = []
    for path in PACKAGE_DIR.rglob("*.py"):
        if path == loader:
            continue
        text = path.read_text()
        for needle in ('"EVALSHA"', "'EVALSHA'", "register_script(", ".sha(", "script_source("):
            if needle in text:
                offenders.append(f"{path.relative_to(PACKAGE_DIR)}: {needle}")
    assert offenders == []


# -- every generic way our code calls a script sends the token -----------------------------


@pytest.fixture
def throwaway(queue_name: str) -> QueueKeys:
    """Keys of a queue no other test reads: the calls below pass arguments no script
    expects, and may write junk there."""
    return queue_keys("redisq", f"{queue_name}.junk")


def passed_the_check(call: Any) -> bool:
    """Whether a script call got past the protocol check: it replied, or failed on its
    made-up arguments rather than on the version."""
    try:
        call()
    except redis.ResponseError as exc:
        return not str(exc).startswith("REDISQ_PROTOCOL")
    return True


PATHS = ["call", "pipeline", "run_script", "run_batch", "task_pipe"]


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("name", SCRIPT_NAMES)
def test_every_call_path_sends_the_protocol_version(
    redis_client: redis.Redis,
    throwaway: QueueKeys,
    name: ScriptName,
    path: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    scripts = Scripts(redis_client)
    keys, args = some_keys(throwaway), ["billing", "0"]

    def via_pipeline() -> Any:
        with redis_client.pipeline(transaction=False) as pipe:
            scripts(name, keys, args, client=pipe)
            return pipe.execute()[0]

    def via_task_pipe() -> None:
        pipe = TaskPipe(redis_client, scripts)
        pipe.write(name, keys, args)
        with caplog.at_level(logging.WARNING, "redisq.tasks"):
            pipe.close()  # reads the reply: an error is logged, not raised
        for record in caplog.records:
            if "REDISQ_PROTOCOL" in record.getMessage():
                raise redis.ResponseError(str(record.args[1]))

    calls = {
        "call": lambda: scripts(name, keys, args),
        "pipeline": via_pipeline,
        "run_script": lambda: run_script(redis_client, scripts, name, keys, args),
        "run_batch": lambda: run_batch(
            redis_client, [scripts.command(name, keys, args)], transaction=False
        ),
        "task_pipe": via_task_pipe,
    }
    scripts.load(name)  # run_batch and the task pipe call by SHA without loading
    assert passed_the_check(calls[path])


@pytest.mark.parametrize("name", SCRIPT_NAMES)
def test_the_asyncio_scripts_send_the_protocol_version(
    redis_url: str, throwaway: QueueKeys, name: ScriptName
) -> None:
    keys, args = some_keys(throwaway), ["billing", "0"]

    async def both() -> tuple[bool, bool]:
        conn = redis.asyncio.Redis.from_url(redis_url)
        try:
            scripts = AsyncScripts(conn)

            async def call() -> Any:
                return await scripts(name, keys, args)

            async def piped() -> Any:
                async with conn.pipeline(transaction=False) as pipe:
                    pipe.execute_command(*scripts.command(name, keys, args))
                    reply = (await pipe.execute(raise_on_error=False))[0]
                if isinstance(reply, Exception):
                    raise reply
                return reply

            return await passed(call), await passed(piped)
        finally:
            await conn.aclose()

    async def passed(call: Any) -> bool:
        try:
            await call()
        except redis.ResponseError as exc:
            return not str(exc).startswith("REDISQ_PROTOCOL")
        return True

    assert run_async(both()) == (True, True)


# -- a refusal reaches the caller as ProtocolMismatch ---------------------------------------


@pytest.fixture
def old_token(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Our calls send protocol 1's token (as a client that kept old calls would)."""
    monkeypatch.setattr(shipped, "PROTOCOL_TOKEN", b"redisq/1")
    yield


@pytest.mark.usefixtures("old_token")
def test_a_refused_call_raises_protocol_mismatch_saying_what_to_do(
    redis_client: redis.Redis, queue_name: str
) -> None:
    broker = Broker(redis_client)
    with pytest.raises(ProtocolMismatch) as refused:
        broker.consumers.ensure(queue_name, "billing")
    text = str(refused.value)
    assert "script ensure_consumer.lua speaks redisq/2, caller sent 'redisq/1'" in text
    assert "run every client with the scripts shipped with the redisq version" in text
    assert redis_client.exists(broker.keys(queue_name).log) == 0


# -- the protocol recorded with the data ---------------------------------------------------


def test_registering_a_consumer_records_the_protocol_and_writers_check_it(
    redis_client: redis.Redis, queue_name: str
) -> None:
    # Given a consumer registered by us: the queue's meta records the protocol
    broker = Broker(redis_client)
    broker.consumers.ensure(queue_name, "billing")
    qk = broker.keys(queue_name)
    assert redis_client.hget(qk.meta, "protocol") == b"2"
    # When a client of another protocol has registered one (its data may mean another
    # thing), every script that adds messages or groups refuses, naming it
    redis_client.hset(qk.meta, "protocol", "3")
    env = broker.prepare(queue_name, {"n": 1}, id="m-1")
    writes = {
        "once": lambda: broker.send([env], once=True),
        "batch": lambda: broker.send([env], batch="b-1"),
        "delayed": lambda: broker.publish(queue_name, {"n": 2}, delay=5),
        "ensure_consumer": lambda: Broker(redis_client).consumers.ensure(queue_name, "audit"),
        "redrive": lambda: broker.dead_letters.redrive_envelope(
            queue_name, "billing", {"payload": "1"}
        ),
        "to one consumer": lambda: broker.consumers.deliver("billing", [env]),
    }
    before = redis_client.xlen(qk.log)
    for name, write in writes.items():
        with pytest.raises(ProtocolMismatch, match="records data of protocol '3'"):
            write()
        assert redis_client.xlen(qk.log) == before, name
    assert redis_client.xlen(qk.group("billing").direct) == 0
    assert redis_client.hget(qk.meta, "protocol") == b"3"
