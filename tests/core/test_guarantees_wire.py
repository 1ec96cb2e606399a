"""C9 wire format (any Redis client can publish and consume) and C11 bad input (clear
errors at publish, undecodable entries become dead letters, nothing crashes)."""

from __future__ import annotations

import datetime as dt
import json
import re
import socket
import subprocess
import time
from dataclasses import dataclass
from typing import Any

import pytest
import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from redisq_django.core import (
    Broker,
    ConsumerNotFound,
    CoreConfig,
    InvalidName,
    PayloadNotSerializable,
    PayloadTooLarge,
    RedisUnavailable,
)
from redisq_django.core.hooks import PublishHook
from tests.core.guarantee_helpers import drain, fetch_nothing, ids


@dataclass(frozen=True)
class RawKeys:
    """Keys of one queue spelled out literally, as PROTOCOL.md documents them for other
    clients (these tests are about that format, so they do not use ``Broker.keys``)."""

    queue: str

    @property
    def log(self) -> str:
        return f"redisq:{{{self.queue}}}:log"

    @property
    def delayed(self) -> str:
        return f"redisq:{{{self.queue}}}:delayed"

    def direct(self, group: str) -> str:
        return f"redisq:{{{self.queue}}}:g:{group}:direct"


@pytest.fixture
def raw(queue_name: str) -> RawKeys:
    return RawKeys(queue_name)


pytestmark = pytest.mark.core_config(poll_interval_ms=20)


def raw_read(
    client: redis.Redis, raw: RawKeys, group: str, consumer: str = "raw"
) -> dict[str, list[Any]]:
    """What a plain client reading as PROTOCOL.md says gets: {stream: [(id, fields)]}."""
    reply = client.execute_command(
        "XREADGROUP", "GROUP", group, consumer, "COUNT", 100,
        "STREAMS", raw.log, raw.direct(group), ">", ">",
    )  # fmt: skip
    out: dict[str, list[Any]] = {raw.log: [], raw.direct(group): []}
    for key, entries in reply or []:
        out[key.decode()] = [(eid.decode(), fields) for eid, fields in entries]
    return out


# -- C9: publishing with plain Redis commands ---------------------------------------------


def test_c9_message_published_with_raw_xadd_is_consumed(
    queue_name: str, raw: RawKeys, broker: Broker, redis_client: redis.Redis
) -> None:
    # Given a registered consumer
    broker.consumers.ensure(queue_name, "billing")
    # When another program publishes with plain XADD: payload only, with headers,
    # and with its own message id
    e1 = redis_client.execute_command("XADD", raw.log, "*", "payload", '{"order":1}').decode()
    e2 = redis_client.execute_command(
        "XADD", raw.log, "*", "payload", '["a",2,null]', "headers", '{"source":"php","n":3}'
    ).decode()
    e3 = redis_client.execute_command(
        "XADD", raw.log, "*", "payload", '"text ü"', "id", "ext-42"
    ).decode()
    # Then our consumer receives all three, decoded
    got = drain(broker.subscribe(queue_name, "billing", "i1"), expected=3)
    assert [(m.id, m.payload, m.headers, m.attempts) for m in got] == [
        (e1, {"order": 1}, {}, 1),
        (e2, ["a", 2, None], {"source": "php", "n": 3}, 1),
        ("ext-42", "text ü", {}, 1),
    ]
    assert got[0].published_at.timestamp() == pytest.approx(int(e1.split("-")[0]) / 1000)
    assert got[2].entry_id.decode() == e3
    assert broker.stats(queue_name).consumers[0].in_flight == 0


def test_c9_message_published_with_redis_cli_is_consumed(
    queue_name: str, raw: RawKeys, broker: Broker, redis_server: Any, redis_cli_binary: str
) -> None:
    # Given a registered consumer
    broker.consumers.ensure(queue_name, "billing")
    # When a shell script publishes with redis-cli
    result = subprocess.run(
        [
            redis_cli_binary, "-h", "127.0.0.1", "-p", str(redis_server.port),
            "XADD", raw.log, "*", "payload", '{"order": 7, "total": "9.50"}',
            "headers", '{"via": "redis-cli"}',
        ],
        capture_output=True, text=True, timeout=10, check=True,
    )  # fmt: skip
    entry_id = result.stdout.strip()
    # Then our consumer receives it with payload and headers
    [msg] = drain(broker.subscribe(queue_name, "billing", "i1"), expected=1)
    assert (msg.id, msg.payload, msg.headers) == (
        entry_id,
        {"order": 7, "total": "9.50"},
        {"via": "redis-cli"},
    )


def test_c9_delayed_message_published_with_raw_zadd_is_consumed_when_due(
    queue_name: str, raw: RawKeys, broker: Broker, redis_client: redis.Redis
) -> None:
    # Given a consumer, and a delayed message added by another program with ZADD
    broker.consumers.ensure(queue_name, "billing")
    due = int(time.time() * 1000) + 300
    member = json.dumps({"payload": json.dumps({"remind": 1}), "id": "rem-1"})
    redis_client.execute_command("ZADD", raw.delayed, due, member)
    sub = broker.subscribe(queue_name, "billing", "i1")
    # When our consumer fetches: nothing before it is due, then the message
    assert fetch_nothing(sub, wait_ms=100) == []
    [msg] = drain(sub, expected=1, timeout_s=3)
    assert time.time() * 1000 >= due
    assert (msg.id, msg.payload, msg.headers, msg.attempts) == ("rem-1", {"remind": 1}, {}, 1)


def test_c9_our_messages_read_with_raw_commands(
    queue_name: str, raw: RawKeys, broker: Broker, redis_client: redis.Redis
) -> None:
    # Given a consumer registered with plain commands, as another language would
    for key in (raw.log, raw.direct("php")):
        redis_client.execute_command("XGROUP", "CREATE", key, "php", "$", "MKSTREAM")
    assert broker.consumers.names(queue_name) == ["php"]
    # When we publish one message with headers and one delayed
    now = dt.datetime(2024, 5, 1, 12, 0, tzinfo=dt.UTC)
    mid = broker.publish(queue_name, {"at": now, "n": 1}, headers={"trace": "abc"})
    delayed_id = broker.publish(queue_name, {"n": 2}, delay=0.2)

    # Then the immediate one is a log entry: id = entry id, JSON payload and headers
    entries = raw_read(redis_client, raw, "php")
    assert entries[raw.direct("php")] == []
    [(entry_id, fields)] = entries[raw.log]
    assert entry_id == mid
    assert set(fields) == {b"payload", b"headers"}
    assert json.loads(fields[b"payload"]) == {"at": "2024-05-01T12:00:00Z", "n": 1}
    assert json.loads(fields[b"headers"]) == {"trace": "abc"}

    # And the delayed one waits in the zset as {"payload": "<json text>", "id": ...}
    [(member, score)] = redis_client.zrange(raw.delayed, 0, -1, withscores=True)
    envelope = json.loads(member)
    assert envelope["id"] == delayed_id
    assert json.loads(envelope["payload"]) == {"n": 2}
    assert set(envelope) <= {"payload", "headers", "id", "published_at", "due_at"}
    assert int(score) == int(envelope["due_at"])

    # When any of our instances promotes it once due, the raw consumer reads it too
    time.sleep(0.25)
    broker.consumers.ensure(queue_name, "promoter")
    broker.subscribe(queue_name, "promoter", "p").promote()
    [(promoted_entry, promoted)] = raw_read(redis_client, raw, "php")[raw.log]
    assert promoted[b"id"].decode() == delayed_id
    assert json.loads(promoted[b"payload"]) == {"n": 2}

    # And after the raw consumer acks with XACK, our stats show nothing in flight
    def php_stats() -> Any:
        return {c.name: c for c in broker.stats(queue_name).consumers}["php"]

    assert php_stats().in_flight == 2
    redis_client.execute_command("XACK", raw.log, "php", entry_id, promoted_entry)
    php = php_stats()
    assert (php.name, php.in_flight, php.lag) == ("php", 0, 0)


def test_c9_raw_consumer_reads_and_acks_its_direct_input(
    queue_name: str, raw: RawKeys, broker: Broker, redis_client: redis.Redis
) -> None:
    # Given a re-drive to a consumer that reads with plain commands
    broker.consumers.ensure(queue_name, "php")
    broker.dead_letters.redrive_envelope(
        queue_name, "php", {"payload": '{"again":true}', "id": "m-1"}
    )
    # When it reads: the message arrives on its direct stream
    entries = raw_read(redis_client, raw, "php")
    assert entries[raw.log] == []
    [(entry_id, fields)] = entries[raw.direct("php")]
    assert (fields[b"id"], json.loads(fields[b"payload"])) == (b"m-1", {"again": True})
    assert broker.stats(queue_name).consumers[0].in_flight == 1
    # And acking it as PROTOCOL.md says (XACK, then XDEL) leaves nothing behind
    redis_client.execute_command("XACK", raw.direct("php"), "php", entry_id)
    redis_client.execute_command("XDEL", raw.direct("php"), entry_id)
    php = broker.stats(queue_name).consumers[0]
    assert (php.in_flight, php.direct) == (0, 0)


# -- C11: bad input ---------------------------------------------------------------------


def test_c11_undecodable_entries_become_dead_letters_and_valid_ones_still_flow(
    queue_name: str, raw: RawKeys, broker: Broker, redis_client: redis.Redis
) -> None:
    # Given garbage written straight into the log between valid messages
    broker.consumers.ensure(queue_name, "billing")
    before = broker.publish(queue_name, {"ok": 1})
    garbage = {
        redis_client.execute_command("XADD", raw.log, "*", "body", "hello").decode(): "payload",
        redis_client.execute_command("XADD", raw.log, "*", "payload", "{not json").decode(): "JSON",
        redis_client.execute_command(
            "XADD", raw.log, "*", "payload", "1", "headers", "[1,2]"
        ).decode(): "headers",
        redis_client.execute_command(
            "XADD", raw.log, "*", "payload", "1", "v", "99"
        ).decode(): "99",
        redis_client.execute_command(
            "XADD", raw.log, "*", "payload", b"\xff\xfe", "attempts", "x"
        ).decode(): "JSON",
    }
    after = broker.publish(queue_name, {"ok": 2})

    # When the consumer fetches
    sub = broker.subscribe(queue_name, "billing", "i1")
    got = drain(sub, expected=2)

    # Then the valid messages arrive; each garbage entry is a dead letter saying why
    assert ids(got) == [before, after]
    assert fetch_nothing(sub, wait_ms=50) == []
    dead = broker.dead_letters.read(queue_name, "billing")
    assert {d.id: d.reason for d in dead} == dict.fromkeys(garbage, "undecodable")
    for d in dead:
        assert d.error_class == "UndecodableEntry"
        assert garbage[d.id] in d.error_message, (d.id, d.error_message)
        assert d.fields[b"raw"]  # what the entry held is kept
    stats = broker.stats(queue_name).consumers[0]
    assert (stats.in_flight, stats.dead, stats.lag) == (0, 5, 0)


def test_c11_undecodable_delayed_member_becomes_dead_letter(
    queue_name: str, raw: RawKeys, broker: Broker, redis_client: redis.Redis
) -> None:
    # Given a delayed member that is not a JSON object, and a valid delayed one
    broker.consumers.ensure(queue_name, "billing")
    redis_client.zadd(raw.delayed, {b"not json at all": 1})
    good = broker.publish(queue_name, "fine", delay=0.05)
    # When consuming
    got = drain(broker.subscribe(queue_name, "billing", "i1"), expected=1, timeout_s=3)
    # Then the valid one arrives and the bad one is a dead letter
    assert ids(got) == [good]
    [dead] = broker.dead_letters.read(queue_name, "billing")
    assert dead.reason == "undecodable"
    assert b"not json at all" in dead.fields[b"raw"]
    assert broker.stats(queue_name).delayed == 0


def test_c11_oversized_payload_is_refused_with_size_and_limit(
    queue_name: str,
    raw: RawKeys,
    redis_client: redis.Redis,
) -> None:
    broker = Broker(redis_client, CoreConfig(max_payload_bytes=100))
    broker.consumers.ensure(queue_name, "billing")
    with pytest.raises(PayloadTooLarge) as info:
        broker.publish(queue_name, "x" * 200)
    assert (info.value.size, info.value.limit) == (202, 100)
    assert "202 bytes" in str(info.value) and "100 bytes" in str(info.value)
    assert f"'{queue_name}'" in str(info.value)
    # a batch with one oversized payload publishes nothing
    with pytest.raises(PayloadTooLarge):
        broker.publish_many(queue_name, ["small", "y" * 500, "small"])
    with pytest.raises(PayloadTooLarge):
        broker.publish(queue_name, "z" * 500, delay=10)
    assert (redis_client.xlen(raw.log), redis_client.zcard(raw.delayed)) == (0, 0)
    # exactly at the limit is fine
    broker.publish(queue_name, "x" * 98)
    assert redis_client.xlen(raw.log) == 1


def test_c11_a_queue_published_to_before_refuses_and_writes_alike(
    queue_name: str, raw: RawKeys, redis_client: redis.Redis
) -> None:
    # The first publish to a queue records it; later ones take the short path, which
    # must refuse what the first refuses and write what it writes.
    seen: list[str] = []

    class Tagging(PublishHook):
        def before_prepare(self, queue: str, headers: Any) -> Any:
            seen.append(queue)
            return {**(headers or {}), "tag": len(seen)}

    broker = Broker(redis_client, CoreConfig(max_payload_bytes=100), hooks=[Tagging()])
    first = broker.publish(queue_name, {"n": 1}, headers={"h": "x"})
    second = broker.publish(queue_name, {"n": 1}, headers={"h": "x"})
    entries = dict(redis_client.xrange(raw.log))
    fields = [entries[i.encode()] for i in (first, second)]
    assert fields[0] == {b"payload": b'{"n":1}', b"headers": b'{"h":"x","tag":1}'}
    assert fields[1] == {b"payload": b'{"n":1}', b"headers": b'{"h":"x","tag":2}'}
    assert seen == [queue_name, queue_name]
    with pytest.raises(PayloadTooLarge):
        broker.publish(queue_name, "x" * 200)
    with pytest.raises(PayloadNotSerializable, match="Opaque"):
        broker.publish(queue_name, {"when": Opaque()})
    with pytest.raises(PayloadNotSerializable, match="object"):
        broker.publish(queue_name, "fine", headers={"h": object()})
    assert redis_client.xlen(raw.log) == 2


class Opaque:
    pass


@pytest.mark.parametrize(
    ("payload", "headers", "type_name"),
    [
        ({"when": Opaque()}, None, "Opaque"),
        ([{1, 2}], None, "set"),
        (b"bytes", None, "bytes"),
        ("fine", {"h": object()}, "object"),
    ],
)
def test_c11_unserialisable_payload_is_refused_naming_the_type(
    queue_name: str,
    raw: RawKeys,
    broker: Broker,
    redis_client: redis.Redis,
    payload: Any,
    headers: Any,
    type_name: str,
) -> None:
    with pytest.raises(PayloadNotSerializable, match=type_name):
        broker.publish(queue_name, payload, headers=headers)
    with pytest.raises(PayloadNotSerializable, match=type_name):
        broker.publish_many(queue_name, ["ok", payload], headers=headers)
    assert redis_client.xlen(raw.log) == 0


def test_c11_nan_is_refused(queue_name: str, broker: Broker) -> None:
    with pytest.raises(PayloadNotSerializable, match="JSON"):
        broker.publish(queue_name, {"x": float("nan")})


@pytest.mark.parametrize("name", ["", "a b", "a{b}", "a:b", "x" * 101, "ü", None])
def test_c11_invalid_names_are_refused(queue_name: str, broker: Broker, name: Any) -> None:
    with pytest.raises(InvalidName, match="Invalid queue name"):
        broker.publish(name, 1)
    with pytest.raises(InvalidName, match="Invalid consumer name"):
        broker.consumers.ensure(queue_name, name)
    with pytest.raises(InvalidName):
        broker.subscribe(name, "billing")
    with pytest.raises(InvalidName):
        broker.stats(name)


def test_c11_fetch_for_an_unregistered_consumer_says_so(queue_name: str, broker: Broker) -> None:
    # on a queue that does not exist at all
    with pytest.raises(ConsumerNotFound, match=rf"'ghost'.*'{re.escape(queue_name)}'"):
        broker.subscribe(queue_name, "ghost", "i1").fetch(block_ms=0)
    # on a queue that has other consumers
    broker.consumers.ensure(queue_name, "billing")
    broker.publish(queue_name, 1)
    with pytest.raises(ConsumerNotFound, match="ensure_consumer"):
        broker.subscribe(queue_name, "ghost", "i1").fetch(block_ms=10)
    assert broker.consumers.names(queue_name) == ["billing"]


def test_c11_fetch_repairs_a_missing_direct_group(
    queue_name: str, raw: RawKeys, broker: Broker, redis_client: redis.Redis
) -> None:
    # Given a consumer registered on the log only (e.g. by a plain XGROUP CREATE)
    redis_client.execute_command("XGROUP", "CREATE", raw.log, "billing", "$", "MKSTREAM")
    mid = broker.publish(queue_name, 1)
    # When fetching: it works, and the direct group now exists
    assert ids(drain(broker.subscribe(queue_name, "billing", "i1"), expected=1)) == [mid]
    assert [g["name"] for g in redis_client.xinfo_groups(raw.direct("billing"))] == [b"billing"]


def _closed_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


def test_c11_unreachable_redis_is_reported_with_its_address(queue_name: str) -> None:
    port = _closed_port()
    # No client-side retries: redis-py 8 retries 3 times with backoff (~4 s per call).
    client = redis.Redis(
        host="127.0.0.1", port=port, socket_connect_timeout=1, retry=Retry(NoBackoff(), 0)
    )
    broker = Broker(client)
    address = f"127.0.0.1:{port}"
    calls = [
        lambda: broker.publish(queue_name, 1),
        lambda: broker.consumers.ensure(queue_name, "billing"),
        lambda: broker.stats(queue_name),
        lambda: broker.subscribe(queue_name, "billing", "i1").fetch(block_ms=0),
    ]
    for call in calls:
        with pytest.raises(RedisUnavailable) as info:
            call()
        assert address in str(info.value)
        assert info.value.address.startswith(address)
        assert "\n" not in str(info.value)
    client.close()
