"""Declared consumers registered in Redis before their first worker runs: at ``migrate``
and at a process's first publish to their queue.

A consumer declared in code (``@consumer``) exists from the deploy that declared it, not
from its first worker's start. Its consumer group is created, at its ``start``, by
whichever comes first of:

- ``migrate`` (:func:`register_after_migrate`, from ``signal_handlers``): every declared
  consumer;
- the first message a process publishes to its queue through redisq_django
  (:class:`FirstPublishHook`, which loads the declarations): that queue's declared
  consumers, before the message is sent;
- the start of one of its workers (``Worker.run``), as before.

So with the default start, ``"latest"``, a consumer receives every message published
after the deploy that declared it, also when none of its workers ever ran; ``start``
still says where a *new* consumer begins, only the moment it becomes new moved to the
deploy (docs/howto/consumers.md, "When a consumer starts receiving").

What a process remembers (the queues whose consumers it registered) is a cache (C15):
a registration that failed is not remembered, and is tried again at a later publish.
After Redis lost its data under running processes, a running worker re-creates its own
group at the start of the log (``HandlerThread._register_again``); a consumer none of
whose workers runs is registered again by ``migrate``, by a new process's first publish
or by its worker's start, and what was published in between misses it, as it did before
this module.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Iterable, Mapping
from typing import Any

import redis
from redis.exceptions import RedisClusterException

from redisq_django.connection import get_broker, quick_broker
from redisq_django.consuming.declarations import ConsumerDeclaration, declarations
from redisq_django.core import Broker
from redisq_django.core.errors import ConfigurationError, RedisqError
from redisq_django.core.hooks import PublishHook

logger = logging.getLogger("redisq")

#: Seconds before a process tries again to register a queue's declared consumers after
#: Redis could not be reached or refused (the publish itself reports the outage), so that
#: an outage costs a publish path at most one extra try per queue in this time.
RETRY_AFTER_S = 10.0

#: Socket timeout of ``migrate``'s registration, seconds (no retries): a Redis that is
#: down or hung delays ``migrate`` by about this much, never fails or hangs it.
MIGRATE_TIMEOUT_S = 2.0

#: Socket timeout of a registration made on an event loop's thread (``apublish``),
#: seconds (no retries): it blocks the loop, so a hung Redis may stall it this long, once
#: per queue and :data:`RETRY_AFTER_S`, never more.
LOOP_TIMEOUT_S = 0.5


def register(broker: Broker, decls: Iterable[ConsumerDeclaration]) -> list[ConsumerDeclaration]:
    """Register each declared consumer unless it exists (``Broker.ensure_consumer`` at its
    ``start``, on every partition of a partitioned queue); an existing one keeps its
    position.

    Returns:
        The declarations whose consumer was created now.

    Raises:
        RedisUnavailable, RedisRefused: Redis cannot be reached, or refused.
        PartitionsMismatch: Redis records another number of partitions.
    """
    return [d for d in decls if broker.consumers.ensure(d.queue, d.name, d.start)]


def register_after_migrate() -> None:
    """Register every declared consumer, through a client whose calls give up after
    :data:`MIGRATE_TIMEOUT_S`; when Redis is away or ``REDISQ`` names none, log one
    warning and let ``migrate`` succeed (the first publish or the worker's start
    registers them then)."""
    try:
        decls = declarations()
    except ConfigurationError:
        return  # a consumers.py that does not import: sync_after_migrate reported it
    if not decls:
        return
    try:
        created = register(quick_broker(MIGRATE_TIMEOUT_S), decls)
    # migrate must not fail for Redis: settings naming no Redis (E005), an outage, a
    # refusal, a cluster with no node answering (not a RedisError) all end here.
    except Exception as exc:
        why = str(exc) if str(exc).endswith(".") else f"{exc}."
        logger.warning(
            "The %d declared consumer(s) are not registered in Redis yet: %s Each is "
            "registered by the first publish to its queue, or when its worker starts; "
            "what is published before that does not reach it.",
            len(decls),
            why,
        )
        return
    for d in created:
        logger.info("Registered consumer %s/%s in Redis (start: %s)", d.queue, d.name, d.start)


class FirstPublishHook(PublishHook):
    """Registers a queue's declared consumers before this process's first message to it.

    ``Broker.prepare`` (every path that publishes: ``publish``, ``publish_many``,
    ``publish_on_commit``, model events, the outbox, ``apublish``) asks
    :meth:`before_prepare` once per message: after the first, a set lookup. The first
    one per queue loads the declarations (the apps' ``consumers.py``, as ``runconsumer``
    does) and registers the queue's declared consumers, a round trip each, before the
    message is built. On an event loop's thread (``apublish``) that registration blocks
    the loop, once per queue and process, so it goes through a client that gives up
    after :data:`LOOP_TIMEOUT_S`. The task queues' consumers are left to the Tasks
    backend, which registers them with every enqueue.

    A failed registration (Redis away) is forgotten and tried again after
    :data:`RETRY_AFTER_S` at the next message; the message itself goes on as it would
    have (the publish reports the outage). One instance per broker: a broker rebuilt
    after a settings change starts with an empty memory.
    """

    def __init__(self) -> None:
        #: Queues whose declared consumers this process registered (or has none).
        self._ready: set[str] = set()
        #: Queue -> ``time.monotonic()`` before which a failed one is not tried again.
        self._not_before: dict[str, float] = {}
        # Re-entrant: loading the declarations imports apps' modules, which may publish.
        self._lock = threading.RLock()
        self._undiscoverable = False  # loading the declarations failed: not tried again

    def before_prepare(
        self, queue: str, headers: Mapping[str, Any] | None
    ) -> Mapping[str, Any] | None:
        if queue not in self._ready:
            self._register(queue)
        return headers

    def _register(self, queue: str) -> None:
        if time.monotonic() < self._not_before.get(queue, 0.0):
            return
        with self._lock:  # one thread registers; the others publish after it did
            if queue in self._ready:
                return
            decls = self._declared(queue)
            try:
                if decls:
                    register(_on_loop_thread() or get_broker(), decls)
            # Not RedisError: a cluster client finding no node while it is built.
            except (RedisqError, redis.RedisError, RedisClusterException) as exc:
                self._not_before[queue] = time.monotonic() + RETRY_AFTER_S
                logger.debug("Declared consumers of %r not registered yet: %s", queue, exc)
                return
            self._not_before.pop(queue, None)
            self._ready.add(queue)

    def _declared(self, queue: str) -> list[ConsumerDeclaration]:
        if self._undiscoverable:
            return []
        try:
            decls = declarations()
        except ConfigurationError as exc:  # DiscoveryError: E002 and runconsumer say so
            self._undiscoverable = True
            logger.warning("Declared consumers are not registered at publish: %s", exc)
            return []
        # A task queue's consumer (priority set) is the Tasks backend's to register.
        return [d for d in decls if d.queue == queue and d.priority is None]


def _on_loop_thread() -> Broker | None:
    """A broker that gives up after :data:`LOOP_TIMEOUT_S` when this thread runs an event
    loop (whose every other task a blocking call holds up), else None."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return None
    return quick_broker(LOOP_TIMEOUT_S)


def first_publish_hooks() -> list[PublishHook]:
    """The broker's publish hooks of this module (``apps.ready()`` hands them over): a
    new :class:`FirstPublishHook` per broker built."""
    return [FirstPublishHook()]
