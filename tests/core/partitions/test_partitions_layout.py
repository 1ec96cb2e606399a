"""A partitioned queue's layout is Redis's record, checked where each write happens
(issue 32, points 1-3; PROTOCOL.md "Partitions: the layout every write checks"): Redis
losing its data under running processes, K changed under a forgotten publisher, a second
K after data loss, a record another client wrote badly, and each writer script's refusal.
"""

from __future__ import annotations

import asyncio
import datetime as dt
from collections.abc import Callable
from typing import Any

import pytest
import redis

from redisq_django.core import Broker, CoreConfig, Place, partition_of
from redisq_django.core.async_publish import apublish
from redisq_django.core.errors import ConfigurationError, LayoutRefused, PartitionsMismatch
from redisq_django.core.keys import QueueKeys, queue_keys
from redisq_django.core.repartition import repartition
from redisq_django.core.scripts import AsyncScripts, script_source, versioned
from redisq_django.core.wire import to_str
from tests.core.guarantee_helpers import drain
from tests.support.redis_server import RedisServer

LATER = dt.timedelta(minutes=5)


def config(**partitions: int) -> CoreConfig:
    return CoreConfig(poll_interval_ms=20, partitions=partitions)


def layout_keys(client: redis.Redis, queue: str) -> dict[str, bytes | None]:
    """Every record of the layout: the queue's and partitions 0-7's."""
    base = queue_keys("redisq", queue)
    metas = [base.meta] + [base.partition(i).meta for i in range(8)]
    return {m: client.hget(m, "partitions") for m in metas if client.hget(m, "partitions")}


def logged(client: redis.Redis, keys: QueueKeys) -> list[str]:
    """The ids of the messages in a place's log (a fence reads as none)."""
    if client.type(keys.log) != b"stream":
        return []
    return [to_str(f.get(b"id", i)) for i, f in client.xrange(keys.log)]


def every_place(client: redis.Redis, queue: str, k: int = 8) -> dict[str, list[str]]:
    base = queue_keys("redisq", queue)
    places = {"base": logged(client, base)}
    places.update({str(i): logged(client, base.partition(i)) for i in range(k)})
    return {p: ids for p, ids in places.items() if ids}


def wipe_messages(client: redis.Redis, queue: str) -> None:
    """Every key of ``queue`` but its records of the layout and its fences."""
    for pattern in (f"redisq:{{{queue}}}:*", f"redisq:{{{queue}#*}}:*"):
        for key in client.scan_iter(match=pattern, count=1000):
            if key.endswith(b":meta") or (
                client.type(key) == b"string" and key.endswith((b":log", b":delayed"))
            ):
                continue
            client.delete(key)


# -- 1. Redis restarted empty under running processes ----------------------------------------


def test_running_processes_record_the_layout_again_after_redis_lost_its_data(
    volatile_redis_server: RedisServer, queue_name: str
) -> None:
    client = volatile_redis_server.client()
    # Given a running publisher and a consumer of a queue of 4 partitions
    publisher = Broker(client, config(**{queue_name: 4}))
    worker = Broker(client, config(**{queue_name: 4}))
    worker.consumers.ensure(queue_name, "billing", "earliest")
    subs = [worker.subscribe(Place(queue_name, p), "billing", f"i{p}") for p in range(4)]
    publisher.publish(queue_name, {"n": 0}, key="k-0")
    assert sum(len(drain(s, expected=1, timeout_s=0.5)) for s in subs) == 1
    # When Redis restarts without persistence (every record gone) and both go on
    volatile_redis_server.restart()
    client = volatile_redis_server.client()
    assert client.dbsize() == 0
    sent = [publisher.publish(queue_name, {"n": n}, key=f"k-{n}") for n in range(1, 9)]
    # Then the publisher's first write recorded K again: the queue's record, each
    # partition's, and the fences
    base = queue_keys("redisq", queue_name)
    assert layout_keys(client, queue_name) == {
        base.meta: b"4",
        **{base.partition(i).meta: b"4" for i in range(4)},
    }
    assert client.type(base.log) == b"string"
    # And a process started afterwards (a deploy) is not refused
    fresh = Broker(client, config(**{queue_name: 4}))
    sent.append(fresh.publish(queue_name, {"n": 9}, key="k-9"))
    fresh.consumers.ensure(queue_name, "audit", "earliest")
    # And the running consumer, whose group is gone, registers it again and gets them all
    worker.consumers.ensure(queue_name, "billing", "earliest")  # what its threads do
    got = [m.id for s in subs for m in drain(s, expected=len(sent), timeout_s=0.5)]
    assert sorted(got) == sorted(sent)


def test_a_worker_thread_registers_its_group_again_after_redis_lost_its_data(
    volatile_redis_server: RedisServer, queue_name: str
) -> None:
    # The worker's own path after NOGROUP: the partition's record is gone too, so the
    # script refuses; the thread records the layout again and registers the group.
    from redisq_django.core.groups import ensure_group
    from redisq_django.core.partitions import retried
    from redisq_django.core.start import StartPoint

    client = volatile_redis_server.client()
    broker = Broker(client, config(**{queue_name: 2}))
    broker.consumers.ensure(queue_name, "billing")
    sub = broker.subscribe(Place(queue_name, 1), "billing", "i1")
    volatile_redis_server.restart()
    client = volatile_redis_server.client()
    with pytest.raises(redis.ResponseError, match="REDISQ_LAYOUT"):
        ensure_group(sub.scripts, sub.gkeys, StartPoint.parse("earliest"))
    retried(
        sub.client,
        sub.scripts,
        sub.keys,
        lambda: ensure_group(sub.scripts, sub.gkeys, StartPoint.parse("earliest")),
    )
    assert client.hget(broker.keys(queue_name).meta, "partitions") == b"2"
    assert [g["name"] for g in client.xinfo_groups(sub.keys.log)] == [b"billing"]


def test_a_bulk_redrive_records_the_layout_again_after_redis_lost_its_data(
    volatile_redis_server: RedisServer, queue_name: str
) -> None:
    # Given an operator's process that re-drove a dead letter of a queue of 2 partitions
    client = volatile_redis_server.client()
    broker = Broker(client, config(**{queue_name: 2}))
    broker.consumers.ensure(queue_name, "billing")
    broker.dead_letters.redrive_envelopes([(Place(queue_name, 0), "billing", {"payload": "0"})])
    # When Redis restarts empty and it re-drives dead letters of both partitions at once
    volatile_redis_server.restart()
    client = volatile_redis_server.client()
    targets: list[tuple[str | Place, str, dict[str | bytes, Any]]] = [
        (Place(queue_name, p), "billing", {"payload": str(n), "id": f"m-{n}"})
        for n, p in enumerate((0, 1, 1))
    ]
    replies = broker.dead_letters.redrive_envelopes(targets)
    # Then the writes refused for the lost record were sent once more after recording it,
    # each to the partition it died in, once
    assert all(isinstance(r, str) for r in replies), replies
    base = queue_keys("redisq", queue_name)
    assert client.hget(base.meta, "partitions") == b"2"
    direct = [base.partition(p).group("billing").direct for p in (0, 1)]
    assert [[f[b"id"] for _, f in client.xrange(d)] for d in direct] == [
        [b"m-0"],
        [b"m-1", b"m-2"],
    ]


def test_a_bulk_redrive_of_a_stale_process_is_refused_and_writes_nothing(
    redis_client: redis.Redis, queue_name: str
) -> None:
    # Given a process that knows the queue with 4 partitions, and the queue now has 2
    forgotten = Broker(redis_client, config(**{queue_name: 4}))
    forgotten.consumers.ensure(queue_name, "billing")
    wipe_messages(redis_client, queue_name)
    new = Broker(redis_client, config(**{queue_name: 2}))
    repartition(redis_client, new.scripts, new.keys(queue_name), 2)
    new.consumers.ensure(queue_name, "billing")
    # When it re-drives dead letters of partitions 0 and 3
    replies = forgotten.dead_letters.redrive_envelopes(
        [(Place(queue_name, p), "billing", {"payload": "1"}) for p in (0, 3)]
    )
    # Then each is answered with the mismatch, and no partition's input got anything
    assert [type(r) for r in replies] == [PartitionsMismatch, PartitionsMismatch]
    base = queue_keys("redisq", queue_name)
    directs = [base.partition(p).group("billing").direct for p in range(4)]
    assert sum(redis_client.xlen(d) for d in directs if redis_client.type(d) == b"stream") == 0


# -- 2. K changed under a forgotten publisher ------------------------------------------------


def forgotten_writes(broker: Broker, queue: str) -> dict[str, Callable[[], Any]]:
    """Every way a process adds a message to a queue (or creates a group there)."""

    async def publish_async() -> None:
        conn = broker.new_async_client()
        try:
            await apublish(broker, conn, AsyncScripts(conn), queue, {"w": "async"}, key="k-3")
        finally:
            await conn.aclose()

    env = broker.prepare(queue, {"w": "once"}, id="fixed-1")
    return {
        "publish": lambda: broker.publish(queue, {"w": "plain"}),
        "publish keyed": lambda: broker.publish(queue, {"w": "keyed"}, key="k-1"),
        "publish_many": lambda: broker.publish_many(queue, [1, 2, 3]),
        "delayed": lambda: broker.publish(queue, {"w": "later"}, delay=30),
        "eta": lambda: broker.publish(queue, {"w": "eta"}, eta=dt.datetime.now(dt.UTC) + LATER),
        "once": lambda: broker.send([env], once=True),
        "batch": lambda: broker.send([broker.prepare(queue, {"w": "b"})], batch="b-1"),
        "to one consumer": lambda: broker.consumers.deliver("billing", [env]),
        "to one consumer once": lambda: broker.consumers.deliver("billing", [env], once=True),
        "redrive": lambda: (
            broker.dead_letters.redrive_envelope(
                Place(queue, 0), "billing", {"payload": "1", "id": "r-1"}
            )
            if broker.partitions.count(queue) > 1
            else broker.dead_letters.redrive_envelope(
                queue, "billing", {"payload": "1", "id": "r-1"}
            )
        ),
        "ensure_consumer": lambda: broker.consumers.ensure(queue, "late"),
        "apublish": lambda: asyncio.run(publish_async()),
    }


@pytest.mark.parametrize(("before", "after"), [(4, 2), (1, 4), (4, 1), (2, 8)])
def test_a_forgotten_process_is_refused_after_k_changes_and_writes_nothing(
    redis_client: redis.Redis, queue_name: str, before: int, after: int
) -> None:
    # Given a process that used the queue with `before` partitions (every way of writing)
    forgotten = Broker(redis_client, config(**{queue_name: before}))
    forgotten.consumers.ensure(queue_name, "billing")
    for write in forgotten_writes(forgotten, queue_name).values():
        write()
    # And the queue drained (nothing left but its records and fences) and changed to
    # `after` (the documented command)
    wipe_messages(redis_client, queue_name)
    new = Broker(redis_client, config(**{queue_name: after}))
    repartition(redis_client, new.scripts, new.keys(queue_name), after)
    new.consumers.ensure(queue_name, "billing")
    before_writes = every_place(redis_client, queue_name)
    # When the forgotten process writes again, every way
    refused = {}
    for name, write in forgotten_writes(forgotten, queue_name).items():
        with pytest.raises(PartitionsMismatch) as caught:
            write()
        refused[name] = str(caught.value)
    # Then each write was refused, naming both numbers, and nothing was added anywhere
    assert all(f"has {after} partition" in text for text in refused.values()), refused
    assert all(f"configured with {before}" in text for text in refused.values()), refused
    assert every_place(redis_client, queue_name) == before_writes
    base = new.keys(queue_name)
    delayed = [base.delayed] + [base.partition(i).delayed for i in range(8)]
    assert sum(redis_client.zcard(d) for d in delayed if redis_client.type(d) == b"zset") == 0
    # And the process with the new number writes where the consumers read
    sent = new.publish(queue_name, {"n": 1}, key="k-1")
    subs = (
        [new.subscribe(Place(queue_name, p), "billing", f"i{p}") for p in range(after)]
        if after > 1
        else [new.subscribe(queue_name, "billing", "i")]
    )
    assert [m.id for s in subs for m in drain(s, expected=1, timeout_s=0.3)] == [sent]


def test_repartition_fences_the_partitions_before_it_checks_the_drain(
    redis_client: redis.Redis, queue_name: str
) -> None:
    # Given a queue of 4 that is not drained (a message nobody read)
    four = Broker(redis_client, config(**{queue_name: 4}))
    four.consumers.ensure(queue_name, "billing")
    four.publish(queue_name, {"n": 1})
    # When it is asked to become 2, it is refused, and every record is as before
    before = layout_keys(redis_client, queue_name)
    with pytest.raises(ValueError, match="not drained"):
        repartition(redis_client, four.scripts, four.keys(queue_name), 2)
    assert layout_keys(redis_client, queue_name) == before
    four.publish(queue_name, {"n": 2})  # the 4 still write


# -- 2b. another K after data loss: the first to write wins, the other is refused -------------


@pytest.mark.parametrize("first", [4, 8])
def test_after_data_loss_one_layout_wins_and_no_key_spans_two(
    volatile_redis_server: RedisServer, queue_name: str, first: int
) -> None:
    client = volatile_redis_server.client()
    # Given a process with 4 partitions, running
    four = Broker(client, config(**{queue_name: 4}))
    four.publish(queue_name, {"n": 0}, key="k")
    # When Redis loses its data and a process with 8 starts too
    volatile_redis_server.restart()
    client = volatile_redis_server.client()
    eight = Broker(client, config(**{queue_name: 8}))
    winner, loser = (four, eight) if first == 4 else (eight, four)
    # Then whichever writes first records its number, and the other is refused
    sent = [winner.publish(queue_name, {"n": n}, key="k") for n in range(5)]
    for _ in range(3):
        with pytest.raises(PartitionsMismatch, match=f"has {first} partition"):
            loser.publish(queue_name, {"n": 99}, key="k")
    # And the key's messages are in one partition of one layout, all of them
    places = every_place(client, queue_name)
    assert places == {str(partition_of("k", first)): sent}


# -- 3. a record that is not a clean number ---------------------------------------------------


BAD_RECORDS = ["4.5", "04", "x", "65", "0", "-4", " 4", "4\n", "\u0664", ""]


@pytest.mark.parametrize("bad", BAD_RECORDS)
def test_a_record_that_is_no_clean_number_is_refused_everywhere(
    redis_client: redis.Redis, queue_name: str, bad: str
) -> None:
    base = queue_keys("redisq", queue_name)
    redis_client.hset(base.meta, "partitions", bad)
    shown = repr(bad.encode("unicode_escape").decode()[:20])
    # A process with 4 partitions, one with 1, the repartition, and the pipeline's reader
    for k in (4, 1):
        with pytest.raises(ConfigurationError, match="not a whole number from 1 to 64") as e:
            Broker(redis_client, config(**{queue_name: k})).publish(queue_name, {"n": 1})
        assert base.meta in str(e.value)
        if k == 1:
            assert shown in str(e.value)
    with pytest.raises(ConfigurationError, match="not a whole number from 1 to 64"):
        repartition(redis_client, Broker(redis_client).scripts, base, 2)
    from redisq_django.pipeline.places import counts

    with pytest.raises(ConfigurationError, match="not a whole number from 1 to 64"):
        counts(redis_client, "redisq", [queue_name])
    # And nothing was written
    assert redis_client.exists(base.log, *(base.partition(i).log for i in range(4))) == 0


def test_a_partition_record_that_is_no_clean_number_refuses_writes_there(
    redis_client: redis.Redis, queue_name: str
) -> None:
    broker = Broker(redis_client, config(**{queue_name: 2}))
    broker.publish(queue_name, {"n": 1}, key="k")
    part = broker.keys(queue_name).partition(partition_of("k", 2))
    redis_client.hset(part.meta, "partitions", "2.0")
    with pytest.raises(ConfigurationError, match=f"{part.meta}.*not a whole number"):
        Broker(redis_client, config(**{queue_name: 2})).publish(queue_name, {"n": 2}, key="k")
    assert redis_client.xlen(part.log) == 1


# -- the scripts' contract ---------------------------------------------------------------------


WRITERS: dict[str, Callable[[QueueKeys], tuple[list[str], list[Any]]]] = {
    "publish_once": lambda k: (
        [k.meta, k.log, k.delayed, k.sent_marker("m")],
        [86_400_000, 0, "", "payload", "1", "id", "m"],
    ),
    "publish_delayed": lambda k: ([k.meta, k.delayed, k.log], [1, "0", 1, "payload", "1"]),
    "publish_batch_once": lambda k: (
        [k.meta, k.log, k.delayed, k.batch_marker("b")],
        [600_000, 1, "0", 2, "payload", "1", "id", "m"],
    ),
    "ensure_consumer": lambda k: ([k.meta, k.log, k.group("g").direct], ["g", "$"]),
    "redrive": lambda k: ([k.meta, k.group("g").dead, k.group("g").direct], ["", "payload", "1"]),
}


@pytest.mark.parametrize("script", sorted(WRITERS))
@pytest.mark.parametrize(
    ("recorded", "caller", "ok"),
    [
        (None, "1", True),  # a queue's own keys, nothing recorded
        ("1", "1", True),
        ("4", "1", False),  # partitioned since: an unpartitioned caller is refused
        (None, "4", False),  # a partition that records nothing (Redis lost it)
        ("4", "4", True),
        ("2", "4", False),  # repartitioned since
        ("4.0", "4", False),
    ],
)
def test_every_writer_script_checks_the_layout_first(
    redis_client: redis.Redis,
    queue_name: str,
    script: str,
    recorded: str | None,
    caller: str,
    ok: bool,
) -> None:
    # Given the shipped file, loaded as another language's client would
    sha = redis_client.script_load(script_source(script))
    place = queue_keys("redisq", queue_name)
    if caller != "1":
        place = place.partition(0, of=int(caller))
    if recorded is not None:
        redis_client.hset(place.meta, "partitions", recorded)
    keys, args = WRITERS[script](place)
    before = sorted(redis_client.keys(f"*{queue_name}*"))
    # When it is called with the caller's number
    call = lambda: redis_client.evalsha(sha, len(keys), *keys, *versioned([caller, *args]))  # noqa: E731
    if ok:
        call()
        assert sorted(redis_client.keys(f"*{queue_name}*")) != before
        return
    # Then a mismatch is refused with REDISQ_LAYOUT naming the record, nothing written
    with pytest.raises(redis.ResponseError) as refused:
        call()
    text = str(refused.value)
    assert text.startswith(f"REDISQ_LAYOUT {place.meta} records ")
    assert f"the caller routes by '{caller}'" in text
    assert sorted(redis_client.keys(f"*{queue_name}*")) == before
    assert isinstance(LayoutRefused(refused.value), ConfigurationError)
