"""Deliveries with a lease of their own (a Django task's ``visibility_timeout``).

A started delivery may have a visibility timeout of its own instead of its consumer's:
its handler records it when it starts (``task_start.lua`` for a task) in the group's
``leases`` zset and sets ``Message.lease_ms``; the worker's liveness thread renews it
every third of that length (``lease.lua``), and ``reclaim.lua`` takes the delivery over
once its lease has ended, and not before: neither an expired heartbeat of its instance
nor the consumer's visibility timeout applies to it. Its settle removes the lease.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from redisq_django.core.delivery import Delivery, Stream
from redisq_django.core.keys import GroupKeys
from redisq_django.core.types import RedisClient

#: What a started delivery's tag puts before its entry id, by stream.
TAG_PREFIX = {Stream.LOG: b"log:", Stream.DIRECT: b"direct:"}


def started_tag(delivery: Delivery) -> bytes:
    """How ``running`` and ``leases`` name a started delivery: ``log:<id>`` or
    ``direct:<id>``."""
    return TAG_PREFIX[delivery.stream] + delivery.entry_id


def renew_call(
    gkeys: GroupKeys, instance: str, deliveries: Sequence[Delivery]
) -> tuple[list[str], list[Any]]:
    """KEYS and ARGV of ``lease.lua``: the leases of ``deliveries`` (each with its
    ``lease_ms``) held by ``instance`` end that long after Redis's now."""
    args: list[Any] = [gkeys.group, instance]
    for m in deliveries:
        args += [m.stream.value, m.entry_id, int(m.lease_ms or 0)]
    return [gkeys.queue_keys.log, gkeys.direct, gkeys.leases], args


def end_own_leases(client: RedisClient, gkeys: GroupKeys, deliveries: Sequence[Delivery]) -> None:
    """The leases of their own of ``deliveries`` end now (their instance stops running
    them and expired its heartbeat: they are taken over at once, as its other messages)."""
    own = [started_tag(m) for m in deliveries if m.lease_ms]
    if own:
        client.zrem(gkeys.leases, *own)
