"""Partitioned queues, the core: the key hash (PROTOCOL.md's vectors, in Python and in
Node), the keys of a partition, routing on publish, the number of partitions recorded in
Redis (mismatches refused), consumers on every partition, and a queue of one partition
exactly as before."""

from __future__ import annotations

import asyncio
import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import redis

from redisq_django.core import Broker, CoreConfig, Place, partition_of
from redisq_django.core.async_publish import apublish, apublish_many
from redisq_django.core.envelope import Envelope
from redisq_django.core.errors import (
    ConfigurationError,
    PartitionedQueueError,
    PartitionsMismatch,
)
from redisq_django.core.keys import queue_keys
from redisq_django.core.scripts import AsyncScripts
from redisq_django.core.wire import to_str
from tests.core.guarantee_helpers import drain

ROOT = Path(__file__).resolve().parents[3]

ROW = re.compile(
    r"^\| `?(\"[^|]*\")`?(?: \u00d7 (\d+))?[^|]*\| (\d+) \| `(0x[0-9a-f]{8})` \| (\d+) \| (\d+) \|$"
)


def vectors() -> list[tuple[str, int, int, int]]:
    """PROTOCOL.md's test vectors: (key, CRC-32, K, partition)."""
    text = (ROOT / "PROTOCOL.md").read_text(encoding="utf-8")
    section = text.split("## Partitions: the key hash", 1)[1].split("\n### ", 1)[0]
    found = []
    for line in section.splitlines():
        match = ROW.match(line)
        if match:
            key = json.loads(match[1]) * int(match[2] or 1)
            assert len(key.encode()) == int(match[3]), line
            found.append((key, int(match[4], 16), int(match[5]), int(match[6])))
    return found


def config(**partitions: int) -> CoreConfig:
    return CoreConfig(poll_interval_ms=20, partitions=partitions)


def partition_lengths(client: redis.Redis, queue: str, k: int) -> list[int]:
    base = queue_keys("redisq", queue)
    return [int(client.xlen(base.partition(i).log)) for i in range(k)]


# -- the hash ----------------------------------------------------------------------------


def test_the_protocol_vectors_hold_in_python() -> None:
    found = vectors()
    # The doc's table: ASCII, UTF-8 multibyte, emoji, a 256-byte key, a message id
    assert len(found) == 8
    assert {k for _, _, k, _ in found} == {2, 4, 8, 64}
    assert any(len(key.encode()) == 256 for key, *_ in found)
    for key, crc, k, partition in found:
        assert (partition_of(key, k), partition_of(key, k) == crc % k) == (partition, True), key


# A client in another language computes the same partitions from the doc's values alone.
NODE_SNIPPET = """
const zlib = require("zlib");
function crc32(buf) {
  if (zlib.crc32) return zlib.crc32(buf) >>> 0;
  let c, crc = 0xffffffff;  // the IEEE table, for a Node without zlib.crc32
  for (const b of buf) {
    c = (crc ^ b) & 0xff;
    for (let k = 0; k < 8; k++) c = c & 1 ? (c >>> 1) ^ 0xedb88320 : c >>> 1;
    crc = (crc >>> 8) ^ c;
  }
  return (crc ^ 0xffffffff) >>> 0;
}
const rows = JSON.parse(process.argv[1]);
console.log(JSON.stringify(rows.map(([key, k]) => {
  const c = crc32(Buffer.from(key, "utf8"));
  return [c, c % k];
})));
"""


def test_the_protocol_vectors_hold_in_node() -> None:
    node = shutil.which("node") or "/usr/bin/node"
    if not shutil.which(node):
        pytest.skip("node is not installed: the cross-language check needs it")
    found = vectors()
    rows = json.dumps([[key, k] for key, _, k, _ in found])
    done = subprocess.run(
        [node, "-e", NODE_SNIPPET, rows], capture_output=True, text=True, timeout=60, check=True
    )
    assert json.loads(done.stdout) == [[crc, partition] for _, crc, _, partition in found]


# -- keys --------------------------------------------------------------------------------


def test_a_partition_has_keys_of_its_own_and_keeps_the_queue_name() -> None:
    base = queue_keys("redisq", "orders")
    part = base.partition(3)
    assert (base.log, base.meta) == ("redisq:{orders}:log", "redisq:{orders}:meta")
    assert (part.log, part.delayed) == ("redisq:{orders#3}:log", "redisq:{orders#3}:delayed")
    assert part.group("billing").direct == "redisq:{orders#3}:g:billing:direct"
    assert (part.queue, part.part, base.part) == ("orders", 3, None)
    assert part != base and base.partition(3) == part


# -- routing -----------------------------------------------------------------------------


def test_a_key_always_lands_in_its_partition_and_the_rest_take_turns(
    redis_client: redis.Redis, queue_name: str
) -> None:
    broker = Broker(redis_client, config(**{queue_name: 4}))
    # When keyed messages and 8 unkeyed ones are published
    for n in range(3):
        broker.publish(queue_name, {"n": n}, key="order-42")
    for n in range(8):
        broker.publish(queue_name, {"n": n})
    # Then the key's three share its partition, and the others spread evenly
    lengths = partition_lengths(redis_client, queue_name, 4)
    mine = partition_of("order-42", 4)
    assert lengths[mine] == 3 + 2 and sum(lengths) == 11
    assert [n for i, n in enumerate(lengths) if i != mine] == [2, 2, 2]
    # And the queue's base log and delayed set are fences, never written
    base = broker.keys(queue_name)
    for fenced in (base.log, base.delayed):
        assert redis_client.type(fenced) == b"string"
        assert redis_client.get(fenced).startswith(b"redisq fence:")


def test_messages_with_ids_land_in_their_ids_partition(
    redis_client: redis.Redis, queue_name: str
) -> None:
    broker = Broker(redis_client, config(**{queue_name: 8}))
    parts = [broker.keys(queue_name).partition(i) for i in range(8)]
    # Publish-once: each id's partition, and sending again is a no-op there
    envelopes = [broker.prepare(queue_name, {"n": n}, id=f"once-{n}") for n in range(16)]
    assert broker.send(envelopes, once=True) == [f"once-{n}" for n in range(16)]
    assert broker.send(envelopes, once=True) == [f"once-{n}" for n in range(16)]
    where = {
        to_str(fields[b"id"]): i
        for i, p in enumerate(parts)
        for _, fields in redis_client.xrange(p.log, "-", "+")
    }
    assert where == {f"once-{n}": partition_of(f"once-{n}", 8) for n in range(16)}
    # A delayed message: its id's partition's delayed set
    delayed = broker.publish(queue_name, {"later": 1}, delay=60)
    assert redis_client.zcard(parts[partition_of(delayed, 8)].delayed) == 1
    # A batch sent at most once: whole, to its batch id's partition, once
    batch = [broker.prepare(queue_name, {"b": n}) for n in range(5)]
    broker.send(batch, batch="tx-1")
    broker.send(batch, batch="tx-1")
    assert sum(partition_lengths(redis_client, queue_name, 8)) == 16 + 5
    assert redis_client.exists(parts[partition_of("tx-1", 8)].batch_marker("tx-1")) == 1


def test_publish_many_sends_a_batch_to_one_partition(
    redis_client: redis.Redis, queue_name: str
) -> None:
    broker = Broker(redis_client, config(**{queue_name: 4}))
    broker.publish_many(queue_name, range(6))
    assert sorted(partition_lengths(redis_client, queue_name, 4)) == [0, 0, 0, 6]
    broker.publish_many(queue_name, range(6))  # the next batch: the next partition
    assert sorted(partition_lengths(redis_client, queue_name, 4)) == [0, 0, 6, 6]
    broker.publish_many(queue_name, range(3), key="k-1")
    assert partition_lengths(redis_client, queue_name, 4)[partition_of("k-1", 4)] in (3, 9)


def test_the_asyncio_client_routes_as_the_synchronous_one(
    redis_client: redis.Redis, queue_name: str
) -> None:
    broker = Broker(redis_client, config(**{queue_name: 4}))

    async def publish() -> None:
        conn = broker.new_async_client()
        try:
            scripts = AsyncScripts(conn)
            for _ in range(4):
                await apublish(broker, conn, scripts, queue_name, {"a": 1}, key="k-7")
            await apublish_many(broker, conn, scripts, queue_name, range(3))
        finally:
            await conn.aclose()

    asyncio.run(publish())
    lengths = partition_lengths(redis_client, queue_name, 4)
    assert lengths[partition_of("k-7", 4)] >= 4 and sum(lengths) == 7
    meta = redis_client.hget(broker.keys(queue_name).meta, "partitions")
    assert meta == b"4"


# -- the number recorded in Redis --------------------------------------------------------


def test_the_first_use_records_k_and_other_numbers_are_refused(
    redis_client: redis.Redis, queue_name: str
) -> None:
    four = Broker(redis_client, config(**{queue_name: 4}))
    four.publish(queue_name, {"n": 1})
    assert redis_client.hget(four.keys(queue_name).meta, "partitions") == b"4"
    before = sorted(redis_client.keys(f"*{queue_name}*"))
    # A process configured with 2 partitions, or none, is refused, saying both numbers
    for other in (Broker(redis_client, config(**{queue_name: 2})), Broker(redis_client)):
        k = other.partitions.count(queue_name)
        with pytest.raises(PartitionsMismatch, match=f"has 4 partition.*configured with {k}"):
            other.publish(queue_name, {"n": 2})
        with pytest.raises(PartitionsMismatch, match=f"redisq partitions {queue_name} {k}"):
            other.consumers.ensure(queue_name, "billing")
        with pytest.raises(PartitionsMismatch):
            other.subscribe(Place(queue_name, 0 if k > 1 else None), "billing")
    assert isinstance(PartitionsMismatch(queue_name, 4, 2), ConfigurationError)
    # And nothing was written by them
    assert sorted(redis_client.keys(f"*{queue_name}*")) == before


def test_a_queue_used_unpartitioned_is_not_partitioned_silently(
    redis_client: redis.Redis, queue_name: str
) -> None:
    Broker(redis_client).publish(queue_name, {"n": 1})
    with pytest.raises(PartitionsMismatch, match="has 1 partition"):
        Broker(redis_client, config(**{queue_name: 4})).publish(queue_name, {"n": 2})
    # A delayed message alone counts as use too
    other = f"{queue_name}.d"
    Broker(redis_client).publish(other, {"n": 1}, delay=60)
    with pytest.raises(PartitionsMismatch):
        Broker(redis_client, config(**{other: 4})).consumers.ensure(other, "billing")


def test_a_lost_record_of_the_queue_is_recorded_again_from_its_partitions(
    redis_client: redis.Redis, queue_name: str
) -> None:
    # Given a queue of 4 partitions whose base record is lost (one master of a cluster
    # came back empty), its partitions' own records kept
    Broker(redis_client, config(**{queue_name: 4})).publish(queue_name, {"n": 1})
    base = queue_keys("redisq", queue_name)
    redis_client.delete(base.meta, base.log, base.delayed)
    # When a new process with 4 publishes, K is recorded again, fences too
    Broker(redis_client, config(**{queue_name: 4})).publish(queue_name, {"n": 2})
    assert redis_client.hget(base.meta, "partitions") == b"4"
    assert redis_client.type(base.log) == b"string"
    # And one with another number is refused by what the partitions record
    redis_client.delete(base.meta)
    with pytest.raises(PartitionsMismatch, match=r"has 4 partition.*configured with 2"):
        Broker(redis_client, config(**{queue_name: 2})).publish(queue_name, {"n": 3})
    assert sum(partition_lengths(redis_client, queue_name, 4)) == 2


def test_partition_logs_without_any_record_are_refused(
    redis_client: redis.Redis, queue_name: str
) -> None:
    # Given partition logs with no record anywhere (written by a version before the
    # partitions kept their own)
    Broker(redis_client, config(**{queue_name: 4})).publish(queue_name, {"n": 1})
    base = queue_keys("redisq", queue_name)
    redis_client.delete(base.meta, *(base.partition(i).meta for i in range(4)))
    with pytest.raises(ConfigurationError, match=r"partition logs .* no number of partitions"):
        Broker(redis_client, config(**{queue_name: 4})).publish(queue_name, {"n": 2})


def test_the_setting_is_bounded() -> None:
    for bad in (0, 65, "4", True):
        with pytest.raises(ConfigurationError, match="partitions of 'q' must be 1 to 64"):
            CoreConfig(partitions={"q": bad})


# -- consumers on every partition --------------------------------------------------------


def test_consumers_are_registered_moved_and_removed_on_every_partition(
    redis_client: redis.Redis, queue_name: str
) -> None:
    broker = Broker(redis_client, config(**{queue_name: 3}))
    assert broker.consumers.ensure(queue_name, "billing", "earliest") is True
    assert broker.consumers.ensure(queue_name, "billing") is False
    parts = broker.partitions.layout(queue_name)
    assert [[to_str(g["name"]) for g in redis_client.xinfo_groups(p.log)] for p in parts] == [
        ["billing"]
    ] * 3
    assert broker.consumers.names(queue_name) == ["billing"]
    # Reset: a time or earliest moves every partition; a message id is refused
    for n in range(6):
        broker.publish(queue_name, {"n": n})
    subs = [broker.subscribe(Place(queue_name, p), "billing", f"i{p}") for p in range(3)]
    assert sum(len(drain(s, expected=2, timeout_s=3)) for s in subs) == 6
    broker.consumers.reset(queue_name, "billing", "earliest")
    assert sum(len(drain(s, expected=2, timeout_s=3)) for s in subs) == 6
    with pytest.raises(PartitionedQueueError, match="message id"):
        broker.consumers.reset(queue_name, "billing", "1700000000000-0")
    with pytest.raises(PartitionedQueueError, match="message id"):
        broker.consumers.ensure(queue_name, "audit", "1700000000000-0")
    # Remove: gone from every partition
    broker.consumers.remove(queue_name, "billing")
    assert broker.consumers.names(queue_name) == []


def test_an_instance_consumes_one_partition_which_must_be_named(
    redis_client: redis.Redis, queue_name: str
) -> None:
    broker = Broker(redis_client, config(**{queue_name: 2}))
    broker.consumers.ensure(queue_name, "billing")
    for bad in (None, 2, -1, True):
        with pytest.raises(PartitionedQueueError, match=r"Place\(.*, 0\) to Place\(.*, 1\)"):
            broker.subscribe(Place(queue_name, bad), "billing")
    with pytest.raises(PartitionedQueueError, match="not partitioned"):
        Broker(redis_client).subscribe(Place(f"{queue_name}.flat", 0), "billing")
    # A message read from a partition belongs to the queue
    sent = broker.publish(queue_name, {"n": 1}, key="k")
    sub = broker.subscribe(Place(queue_name, partition_of("k", 2)), "billing", "i")
    [message] = drain(sub, expected=1)
    assert (message.id, message.queue, message.key) == (sent, queue_name, "k")


# -- one partition: as before ------------------------------------------------------------


def _writes(client: redis.Redis, broker: Broker, queue: str) -> dict[str, Any]:
    """Publish one of each kind to ``queue`` and return what Redis holds, the queue's
    name replaced, ids and times left out."""
    broker.consumers.ensure(queue, "billing", "earliest")
    broker.publish(queue, {"a": 1})
    broker.publish(queue, {"a": 2}, key="k")
    broker.publish(queue, {"a": 3}, delay=60)
    broker.publish_many(queue, [1, 2])
    broker.send([Envelope.build(queue, "fixed", b"{}", None, None, None)], once=True)
    keys = sorted(to_str(k).replace(queue, "Q") for k in client.keys(f"*{{{queue}}}*"))
    log = [
        sorted(to_str(f) for f in fields) for _, fields in client.xrange(f"redisq:{{{queue}}}:log")
    ]
    meta = {to_str(k) for k in client.hkeys(f"redisq:{{{queue}}}:meta")}
    return {"keys": keys, "log": log, "meta": meta}


def test_one_partition_writes_what_it_wrote_before(
    redis_client: redis.Redis, queue_name: str
) -> None:
    plain = _writes(redis_client, Broker(redis_client), f"{queue_name}.a")
    one = Broker(redis_client, config(**{f"{queue_name}.b": 1, "elsewhere": 4}))
    assert _writes(redis_client, one, f"{queue_name}.b") == plain
    assert "partitions" not in plain["meta"]
    assert all("{Q}" in k for k in plain["keys"])
