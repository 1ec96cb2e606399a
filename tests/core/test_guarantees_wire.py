"""C9 wire format (any Redis client can publish and consume) and C11 bad input (clear
errors at publish, undecodable entries become dead letters, nothing crashes)."""

from __future__ import annotations

import datetime as dt
import json
import socket
import subprocess
import time
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
from tests.core.guarantee_helpers import drain, fetch_nothing, ids

Q = "orders"
LOG = "redisq:{orders}:log"
DELAYED = "redisq:{orders}:delayed"


def direct(group: str) -> str:
    return f"redisq:{{orders}}:g:{group}:direct"


@pytest.fixture
def broker(redis_client: redis.Redis) -> Broker:
    return Broker(redis_client, CoreConfig(poll_interval_ms=20))


def raw_read(client: redis.Redis, group: str, consumer: str = "raw") -> dict[str, list[Any]]:
    """What a plain client reading as PROTOCOL.md says gets: {stream: [(id, fields)]}."""
    reply = client.execute_command(
        "XREADGROUP", "GROUP", group, consumer, "COUNT", 100,
        "STREAMS", LOG, direct(group), ">", ">",
    )  # fmt: skip
    out: dict[str, list[Any]] = {LOG: [], direct(group): []}
    for key, entries in reply or []:
        out[key.decode()] = [(eid.decode(), fields) for eid, fields in entries]
    return out


# -- C9: publishing with plain Redis commands ---------------------------------------------


def test_c9_message_published_with_raw_xadd_is_consumed(
    broker: Broker, redis_client: redis.Redis
) -> None:
    # Given a registered consumer
    broker.ensure_consumer(Q, "billing")
    # When another program publishes with plain XADD: payload only, with headers,
    # and with its own message id
    e1 = redis_client.execute_command("XADD", LOG, "*", "payload", '{"order":1}').decode()
    e2 = redis_client.execute_command(
        "XADD", LOG, "*", "payload", '["a",2,null]', "headers", '{"source":"php","n":3}'
    ).decode()
    e3 = redis_client.execute_command(
        "XADD", LOG, "*", "payload", '"text ü"', "id", "ext-42"
    ).decode()
    # Then our consumer receives all three, decoded
    got = drain(broker.subscribe(Q, "billing", "i1"), expected=3)
    assert [(m.id, m.payload, m.headers, m.attempts) for m in got] == [
        (e1, {"order": 1}, {}, 1),
        (e2, ["a", 2, None], {"source": "php", "n": 3}, 1),
        ("ext-42", "text ü", {}, 1),
    ]
    assert got[0].published_at.timestamp() == pytest.approx(int(e1.split("-")[0]) / 1000)
    assert got[2].entry_id.decode() == e3
    assert broker.stats(Q).consumers[0].in_flight == 0


def test_c9_message_published_with_redis_cli_is_consumed(
    broker: Broker, redis_server: Any, redis_cli_binary: str
) -> None:
    # Given a registered consumer
    broker.ensure_consumer(Q, "billing")
    # When a shell script publishes with redis-cli
    result = subprocess.run(
        [
            redis_cli_binary, "-h", "127.0.0.1", "-p", str(redis_server.port),
            "XADD", LOG, "*", "payload", '{"order": 7, "total": "9.50"}',
            "headers", '{"via": "redis-cli"}',
        ],
        capture_output=True, text=True, timeout=10, check=True,
    )  # fmt: skip
    entry_id = result.stdout.strip()
    # Then our consumer receives it with payload and headers
    [msg] = drain(broker.subscribe(Q, "billing", "i1"), expected=1)
    assert (msg.id, msg.payload, msg.headers) == (
        entry_id,
        {"order": 7, "total": "9.50"},
        {"via": "redis-cli"},
    )


def test_c9_delayed_message_published_with_raw_zadd_is_consumed_when_due(
    broker: Broker, redis_client: redis.Redis
) -> None:
    # Given a consumer, and a delayed message added by another program with ZADD
    broker.ensure_consumer(Q, "billing")
    due = int(time.time() * 1000) + 300
    member = json.dumps({"payload": json.dumps({"remind": 1}), "id": "rem-1"})
    redis_client.execute_command("ZADD", DELAYED, due, member)
    sub = broker.subscribe(Q, "billing", "i1")
    # When our consumer fetches: nothing before it is due, then the message
    assert fetch_nothing(sub, wait_ms=100) == []
    [msg] = drain(sub, expected=1, timeout_s=3)
    assert time.time() * 1000 >= due
    assert (msg.id, msg.payload, msg.headers, msg.attempts) == ("rem-1", {"remind": 1}, {}, 1)


def test_c9_our_messages_read_with_raw_commands(broker: Broker, redis_client: redis.Redis) -> None:
    # Given a consumer registered with plain commands, as another language would
    for key in (LOG, direct("php")):
        redis_client.execute_command("XGROUP", "CREATE", key, "php", "$", "MKSTREAM")
    assert broker.consumers(Q) == ["php"]
    # When we publish one message with headers and one delayed
    now = dt.datetime(2024, 5, 1, 12, 0, tzinfo=dt.UTC)
    mid = broker.publish(Q, {"at": now, "n": 1}, headers={"trace": "abc"})
    delayed_id = broker.publish(Q, {"n": 2}, delay=0.2)

    # Then the immediate one is a log entry: id = entry id, JSON payload and headers
    entries = raw_read(redis_client, "php")
    assert entries[direct("php")] == []
    [(entry_id, fields)] = entries[LOG]
    assert entry_id == mid
    assert set(fields) == {b"payload", b"headers"}
    assert json.loads(fields[b"payload"]) == {"at": "2024-05-01T12:00:00Z", "n": 1}
    assert json.loads(fields[b"headers"]) == {"trace": "abc"}

    # And the delayed one waits in the zset as {"payload": "<json text>", "id": ...}
    [(member, score)] = redis_client.zrange(DELAYED, 0, -1, withscores=True)
    envelope = json.loads(member)
    assert envelope["id"] == delayed_id
    assert json.loads(envelope["payload"]) == {"n": 2}
    assert set(envelope) <= {"payload", "headers", "id", "published_at", "due_at"}
    assert int(score) == int(envelope["due_at"])

    # When any of our instances promotes it once due, the raw consumer reads it too
    time.sleep(0.25)
    broker.ensure_consumer(Q, "promoter")
    broker.subscribe(Q, "promoter", "p").promote()
    [(promoted_entry, promoted)] = raw_read(redis_client, "php")[LOG]
    assert promoted[b"id"].decode() == delayed_id
    assert json.loads(promoted[b"payload"]) == {"n": 2}

    # And after the raw consumer acks with XACK, our stats show nothing in flight
    def php_stats() -> Any:
        return {c.name: c for c in broker.stats(Q).consumers}["php"]

    assert php_stats().in_flight == 2
    redis_client.execute_command("XACK", LOG, "php", entry_id, promoted_entry)
    php = php_stats()
    assert (php.name, php.in_flight, php.lag) == ("php", 0, 0)


def test_c9_raw_consumer_reads_and_acks_its_direct_input(
    broker: Broker, redis_client: redis.Redis
) -> None:
    # Given a re-drive to a consumer that reads with plain commands
    broker.ensure_consumer(Q, "php")
    broker.redrive_envelope(Q, "php", {"payload": '{"again":true}', "id": "m-1"})
    # When it reads: the message arrives on its direct stream
    entries = raw_read(redis_client, "php")
    assert entries[LOG] == []
    [(entry_id, fields)] = entries[direct("php")]
    assert (fields[b"id"], json.loads(fields[b"payload"])) == (b"m-1", {"again": True})
    assert broker.stats(Q).consumers[0].in_flight == 1
    # And acking it as PROTOCOL.md says (XACK, then XDEL) leaves nothing behind
    redis_client.execute_command("XACK", direct("php"), "php", entry_id)
    redis_client.execute_command("XDEL", direct("php"), entry_id)
    php = broker.stats(Q).consumers[0]
    assert (php.in_flight, php.direct) == (0, 0)


# -- C11: bad input ---------------------------------------------------------------------


def test_c11_undecodable_entries_become_dead_letters_and_valid_ones_still_flow(
    broker: Broker, redis_client: redis.Redis
) -> None:
    # Given garbage written straight into the log between valid messages
    broker.ensure_consumer(Q, "billing")
    before = broker.publish(Q, {"ok": 1})
    garbage = {
        redis_client.execute_command("XADD", LOG, "*", "body", "hello").decode(): "payload",
        redis_client.execute_command("XADD", LOG, "*", "payload", "{not json").decode(): "JSON",
        redis_client.execute_command(
            "XADD", LOG, "*", "payload", "1", "headers", "[1,2]"
        ).decode(): "headers",
        redis_client.execute_command("XADD", LOG, "*", "payload", "1", "v", "99").decode(): "99",
        redis_client.execute_command(
            "XADD", LOG, "*", "payload", b"\xff\xfe", "attempts", "x"
        ).decode(): "JSON",
    }
    after = broker.publish(Q, {"ok": 2})

    # When the consumer fetches
    sub = broker.subscribe(Q, "billing", "i1")
    got = drain(sub, expected=2)

    # Then the valid messages arrive; each garbage entry is a dead letter saying why
    assert ids(got) == [before, after]
    assert fetch_nothing(sub, wait_ms=50) == []
    dead = broker.dead_letters(Q, "billing")
    assert {d.id: d.reason for d in dead} == dict.fromkeys(garbage, "undecodable")
    for d in dead:
        assert d.error_class == "UndecodableEntry"
        assert garbage[d.id] in d.error_message, (d.id, d.error_message)
        assert d.fields[b"raw"]  # what the entry held is kept
    stats = broker.stats(Q).consumers[0]
    assert (stats.in_flight, stats.dead, stats.lag) == (0, 5, 0)


def test_c11_undecodable_delayed_member_becomes_dead_letter(
    broker: Broker, redis_client: redis.Redis
) -> None:
    # Given a delayed member that is not a JSON object, and a valid delayed one
    broker.ensure_consumer(Q, "billing")
    redis_client.zadd(DELAYED, {b"not json at all": 1})
    good = broker.publish(Q, "fine", delay=0.05)
    # When consuming
    got = drain(broker.subscribe(Q, "billing", "i1"), expected=1, timeout_s=3)
    # Then the valid one arrives and the bad one is a dead letter
    assert ids(got) == [good]
    [dead] = broker.dead_letters(Q, "billing")
    assert dead.reason == "undecodable"
    assert b"not json at all" in dead.fields[b"raw"]
    assert broker.stats(Q).delayed == 0


def test_c11_oversized_payload_is_refused_with_size_and_limit(
    redis_client: redis.Redis,
) -> None:
    broker = Broker(redis_client, CoreConfig(max_payload_bytes=100))
    broker.ensure_consumer(Q, "billing")
    with pytest.raises(PayloadTooLarge) as info:
        broker.publish(Q, "x" * 200)
    assert (info.value.size, info.value.limit) == (202, 100)
    assert "202 bytes" in str(info.value) and "100 bytes" in str(info.value)
    assert "'orders'" in str(info.value)
    # a batch with one oversized payload publishes nothing
    with pytest.raises(PayloadTooLarge):
        broker.publish_many(Q, ["small", "y" * 500, "small"])
    with pytest.raises(PayloadTooLarge):
        broker.publish(Q, "z" * 500, delay=10)
    assert (redis_client.xlen(LOG), redis_client.zcard(DELAYED)) == (0, 0)
    # exactly at the limit is fine
    broker.publish(Q, "x" * 98)
    assert redis_client.xlen(LOG) == 1


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
    broker: Broker, redis_client: redis.Redis, payload: Any, headers: Any, type_name: str
) -> None:
    with pytest.raises(PayloadNotSerializable, match=type_name):
        broker.publish(Q, payload, headers=headers)
    with pytest.raises(PayloadNotSerializable, match=type_name):
        broker.publish_many(Q, ["ok", payload], headers=headers)
    assert redis_client.xlen(LOG) == 0


def test_c11_nan_is_refused(broker: Broker) -> None:
    with pytest.raises(PayloadNotSerializable, match="JSON"):
        broker.publish(Q, {"x": float("nan")})


@pytest.mark.parametrize("name", ["", "a b", "a{b}", "a:b", "x" * 101, "ü", None])
def test_c11_invalid_names_are_refused(broker: Broker, name: Any) -> None:
    with pytest.raises(InvalidName, match="Invalid queue name"):
        broker.publish(name, 1)
    with pytest.raises(InvalidName, match="Invalid consumer name"):
        broker.ensure_consumer(Q, name)
    with pytest.raises(InvalidName):
        broker.subscribe(name, "billing")
    with pytest.raises(InvalidName):
        broker.stats(name)


def test_c11_fetch_for_an_unregistered_consumer_says_so(broker: Broker) -> None:
    # on a queue that does not exist at all
    with pytest.raises(ConsumerNotFound, match=r"'ghost'.*'orders'"):
        broker.subscribe(Q, "ghost", "i1").fetch(block_ms=0)
    # on a queue that has other consumers
    broker.ensure_consumer(Q, "billing")
    broker.publish(Q, 1)
    with pytest.raises(ConsumerNotFound, match="ensure_consumer"):
        broker.subscribe(Q, "ghost", "i1").fetch(block_ms=10)
    assert broker.consumers(Q) == ["billing"]


def test_c11_fetch_repairs_a_missing_direct_group(
    broker: Broker, redis_client: redis.Redis
) -> None:
    # Given a consumer registered on the log only (e.g. by a plain XGROUP CREATE)
    redis_client.execute_command("XGROUP", "CREATE", LOG, "billing", "$", "MKSTREAM")
    mid = broker.publish(Q, 1)
    # When fetching: it works, and the direct group now exists
    assert ids(drain(broker.subscribe(Q, "billing", "i1"), expected=1)) == [mid]
    assert [g["name"] for g in redis_client.xinfo_groups(direct("billing"))] == [b"billing"]


def _closed_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


def test_c11_unreachable_redis_is_reported_with_its_address() -> None:
    port = _closed_port()
    # No client-side retries: redis-py 8 retries 3 times with backoff (~4 s per call).
    client = redis.Redis(
        host="127.0.0.1", port=port, socket_connect_timeout=1, retry=Retry(NoBackoff(), 0)
    )
    broker = Broker(client)
    address = f"127.0.0.1:{port}"
    calls = [
        lambda: broker.publish(Q, 1),
        lambda: broker.ensure_consumer(Q, "billing"),
        lambda: broker.stats(Q),
        lambda: broker.subscribe(Q, "billing", "i1").fetch(block_ms=0),
    ]
    for call in calls:
        with pytest.raises(RedisUnavailable) as info:
            call()
        assert address in str(info.value)
        assert info.value.address.startswith(address)
        assert "\n" not in str(info.value)
    client.close()
