"""The console on a partitioned queue (``REDISQ["PARTITIONS"]``): ``redisq status`` adds
its partitions up, ``deliver-now`` finds a message in whichever partition holds it,
``held`` / ``release-key`` reach the key's partition, and purging one consumer skips its
backlog on every partition. Real Redis."""

from __future__ import annotations

from typing import Any

import pytest

from redisq_django.core import Place, partition_of
from tests.support.admin_pages import redisq

K = 3


pytestmark = [pytest.mark.django_db, pytest.mark.site_broker(queue_partitions=K)]


def row(text: str, first: str) -> list[str]:
    """The cells of the status table's row whose first cells start with ``first``."""
    return next(line.split() for line in text.splitlines() if line.split()[:1] == [first])


def test_status_deliver_now_and_purge_cover_every_partition(broker: Any, queue_name: str) -> None:
    # Given billing and audit on a queue of 3 partitions, 9 keyed messages, 3 delayed
    for name in ("billing", "audit"):
        broker.consumers.ensure(queue_name, name)
    for n in range(9):
        broker.publish(queue_name, {"n": n}, key=f"k{n}")
    later = [broker.publish(queue_name, {"d": n}, delay=3600, key=f"k{n}") for n in range(3)]

    # When status is asked for, the delayed messages delivered now and audit purged
    status = redisq("status", queue_name)
    delivered = redisq("deliver-now", queue_name, *later)
    purged = redisq("purge", queue_name, "--consumer", "audit", "--yes")

    # Then status shows the queue once, its figures added up (backlog 18, delayed 3, log 9)
    cells = row(status, queue_name)
    assert (cells[2], cells[4], cells[9]) == ("18", "3", "9")
    assert status.count(queue_name) == 1
    # and every delayed message was found in its partition and delivered
    assert "3" in delivered and broker.stats(queue_name).delayed == 0
    for mid, key in zip(later, ("k0", "k1", "k2"), strict=True):
        log = broker.keys(queue_name).partition(partition_of(key, K)).log
        assert any(f[b"id"].decode() == mid for _, f in broker.client.xrange(log) if b"id" in f)
    # and audit's backlog of 12 was skipped on every partition, billing's kept
    assert "skipped 12 message(s)" in purged
    backlog = {c.name: c.backlog for c in broker.stats(queue_name).consumers}
    assert backlog == {"audit": 0, "billing": 12}


def test_held_and_release_key_reach_the_key_partition(broker: Any, queue_name: str) -> None:
    # Given an ordered consumer on every partition, each of 3 keys holding one message back
    broker.consumers.ensure(queue_name, "ledger")
    ids = {k: broker.publish_many(queue_name, [{"n": 0}, {"n": 1}], key=k) for k in "abc"}
    subs = [
        broker.subscribe(Place(queue_name, i), "ledger", f"i{i}", ordered=True) for i in range(K)
    ]
    assert sorted(d.key for s in subs for d in s.fetch(count=10, block_ms=100)) == ["a", "b", "c"]

    # When the operator lists the held keys and releases "b"
    held = redisq("held", queue_name, "ledger")
    released = redisq("release-key", queue_name, "ledger", "b")

    # Then each key is listed, and "b"'s next message goes, in its own partition
    assert all(key in held for key in ("a", "b", "c"))
    assert "b" in released
    got = subs[partition_of("b", K)].fetch(count=10, block_ms=100)
    assert [m.id for m in got] == [ids["b"][1]]
