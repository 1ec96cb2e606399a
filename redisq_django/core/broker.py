"""The broker: build a message once and send it anywhere, subscribe instances, and hand
out what callers do to the rest: ``consumers`` (``core/logical_consumers.py``),
``dead_letters`` (``core/dead_letters.py``), ``partitions`` (``core/layouts.py``), the
``operator``, ``task_results``, ``archives`` and the ``schedule_ledger``."""

from __future__ import annotations

import datetime as dt
import functools
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from redisq_django.core import ordered
from redisq_django.core.archives import Archives, purge_place, trim_log
from redisq_django.core.asyncio_client import new_client
from redisq_django.core.config import CoreConfig
from redisq_django.core.dead_letters import DeadLetters
from redisq_django.core.envelope import Delay, Due, Envelope, check_key, due_of
from redisq_django.core.errors import ConfigurationError, describe_client, translate_errors
from redisq_django.core.groups import default_instance_name
from redisq_django.core.hooks import PublishHook, sending
from redisq_django.core.json import JsonCodec
from redisq_django.core.keys import QueueKeys, queue_keys, registry_key
from redisq_django.core.layouts import PartitionLayouts
from redisq_django.core.logical_consumers import Consumers
from redisq_django.core.operator import QueueOperator
from redisq_django.core.partition_stats import read_layouts
from redisq_django.core.partitions import Place, place_of, retried, route
from redisq_django.core.renamed import moved_methods
from redisq_django.core.replica_wait import ReplicaWait
from redisq_django.core.retry import RetryPolicy
from redisq_django.core.schedule_ledger import ScheduleLedger
from redisq_django.core.scripts import Scripts
from redisq_django.core.sending import QueueSend, plan_immediate, plan_queue, run_send
from redisq_django.core.stats import QueueStats
from redisq_django.core.subscription import Subscription
from redisq_django.core.tasks import TaskResultStore
from redisq_django.core.types import AsyncRedisClient, RedisClient
from redisq_django.core.wire import to_str


class Broker:
    """Talks to Redis for one application; thread-safe, share one per process.

    Publishing and subscribing are its methods; the rest goes through the objects it
    holds: :attr:`consumers` (register, move, list, remove, deliver to one),
    :attr:`dead_letters` (read, remove, deliver again), :attr:`partitions` (how many,
    where, what Redis records, changing it), :attr:`operator` (what an operator reads
    and does), :attr:`task_results`, :attr:`archives` and :attr:`schedule_ledger`.
    A queue's messages live in one place, or in each partition of a partitioned queue
    (:class:`~redisq_django.core.partitions.place.Place`).

    Args:
        client: a redis-py ``Redis`` or ``RedisCluster`` client (bytes responses, i.e.
            ``decode_responses=False``, the default).
        config: settings; defaults when omitted.
        hooks: called around publishing (e.g. tracing), in this order.
    """

    def __init__(
        self,
        client: RedisClient,
        config: CoreConfig | None = None,
        hooks: Sequence[PublishHook] = (),
    ) -> None:
        self.client = client
        self.config = config or CoreConfig()
        self.scripts = Scripts(client)
        self.hooks = list(hooks)
        self.codec = JsonCodec(self.config.json_encoder)
        self._keys: dict[str, QueueKeys] = {}
        #: Queues whose name this process recorded in Redis's registry.
        self._registered: set[str] = set()
        #: How many partitions each queue has, where its messages live, Redis's record.
        self.partitions = PartitionLayouts(client, self.scripts, self.config, self.keys)
        #: The logical consumers: register, move (replay), list, remove, deliver to one.
        self.consumers = Consumers(
            client,
            self.scripts,
            self.config,
            self.keys,
            self.partitions,
            self._record_queue,
            self._record,
        )
        #: The dead letters still in Redis: read, remove, deliver again.
        self.dead_letters = DeadLetters(client, self.scripts, self.config, self.partitions)

    def __repr__(self) -> str:
        return f"<Broker {self.where} prefix={self.config.prefix!r}>"

    @property
    def where(self) -> str:
        """Where its Redis is, for messages (``host:port/db``, never a password)."""
        return describe_client(self.client)

    def new_async_client(self) -> AsyncRedisClient:
        """A new ``redis.asyncio`` client of its Redis, with its client's connection
        settings (``core/asyncio_client.py``); the caller closes it."""
        return new_client(self.client)

    def keys(self, queue: str) -> QueueKeys:
        """The keys of ``queue`` (validates the name once)."""
        keys = self._keys.get(queue)
        if keys is None:
            keys = self._keys[queue] = queue_keys(self.config.prefix, queue)
        return keys

    # -- what it hands out -------------------------------------------------------------

    @property
    def archives(self) -> Archives:
        """The queues' named archives: register, commit, list, remove, per partition of
        a partitioned queue (:class:`~redisq_django.core.archives.named.Archives`)."""
        return Archives(self.client, self.scripts, self.keys, self.partitions.layout)

    @functools.cached_property
    def operator(self) -> QueueOperator:
        """An operator's reads and actions: the lists of a queue, one message, instances,
        figures and trends, the server's shortcomings, delivering now, purging
        (:class:`~redisq_django.core.operator.queue_operator.QueueOperator`)."""
        return QueueOperator(
            self.client, self.scripts, self.config, self.keys, self.partitions.layout
        )

    @functools.cached_property
    def task_results(self) -> TaskResultStore:
        """The task queues' results (:class:`~redisq_django.core.tasks.store.TaskResultStore`),
        with this broker's history and trends settings."""
        return TaskResultStore(
            self.client,
            self.scripts,
            self.keys,
            history=self.config.history,
            trends_on=self.config.trends,
        )

    @functools.cached_property
    def schedule_ledger(self) -> ScheduleLedger:
        """The schedules' claimed and sent ticks, and Redis's clock
        (:class:`~redisq_django.core.schedule_ledger.ScheduleLedger`)."""
        return ScheduleLedger(self.client, self.scripts, self.config.prefix)

    # -- queues --------------------------------------------------------------------------

    def _record_queue(self, queue: str) -> None:
        """Record ``queue``'s name in Redis's registry (once per process): the operator
        views list the queues from it. (A send records it in its own round trip.)"""
        if queue not in self._registered:
            self.client.sadd(registry_key(self.config.prefix), queue)
            self._registered.add(queue)

    def _record(self, queue: str) -> tuple[str, str, str]:
        return ("SADD", registry_key(self.config.prefix), queue)

    def recorded(self, queue: str) -> None:
        """A send to ``queue`` went through: its name is in Redis's registry and its
        number of partitions matched Redis's record (:meth:`plan_send`)."""
        self._registered.add(queue)
        self.partitions.mark_checked(queue)

    @translate_errors
    def queues(self) -> list[str]:
        """Every queue name published to or consumed from (sorted)."""
        return sorted(to_str(q) for q in self.client.smembers(registry_key(self.config.prefix)))

    @translate_errors
    def stats(self, queue: str) -> QueueStats:
        """Length, delayed, drops, archive lag, and per-consumer figures of ``queue`` (a
        partitioned queue's added up over its partitions: ``core/partition_stats.py``)."""
        layouts = [self.partitions.layout(queue)]
        return read_layouts(self.client, layouts, history=self.config.history)[0]

    @translate_errors
    def trim(self, queue: str, *, now: int | None = None) -> tuple[int, int]:
        """Apply retention to ``queue``'s log (bounded work: call it periodically).

        Removes entries every logical consumer has acknowledged and that are outside
        the replay window; never one a consumer still needs, unless a hard cap
        (``max_len`` / ``max_age_ms``) is set, in which case the drops are counted.

        Returns:
            ``(removed, dropped)``: removed safely, and unacknowledged ones dropped by a
            cap (over every partition of a partitioned queue).
        """
        removed = dropped = 0
        for keys in self.partitions.layout(queue):
            r, d = trim_log(self.scripts, keys, self.config, now=now)
            removed, dropped = removed + r, dropped + d
        return removed, dropped

    @translate_errors
    def purge(self, queue: str) -> None:
        """Delete every message of ``queue`` (log, delayed, retries, dead letters in Redis)
        while keeping its logical consumers registered at the end of the (empty) log (of
        every partition of a partitioned queue, each in one step).

        What a registered archive had not stored yet is lost to it: it is recorded in the
        archive's gap record as a purge's (its next run stops with ``failOnDataLoss``,
        else reports the gap); :meth:`Archives.unarchived` says beforehand how much."""
        for keys in self.partitions.layout(queue):
            purged = purge_place(self.client, self.scripts, keys)
            for group in purged.groups:  # ordered: no key stays held by a deleted message
                ordered.after_purge(self.scripts, keys.group(group))

    # -- publishing --------------------------------------------------------------------

    def prepare(
        self,
        queue: str,
        payload: Any,
        *,
        headers: Mapping[str, Any] | None = None,
        delay: Delay = None,
        eta: dt.datetime | None = None,
        id: str | None = None,
        key: str | None = None,
    ) -> Envelope:
        """Validate and encode a message now; :meth:`send` it later (or at once).

        Args:
            queue: the queue (topic) name.
            payload: any JSON-serialisable value (datetime, date, time, timedelta,
                Decimal and UUID are converted as Django's JSON encoder does).
            headers: optional JSON-serialisable string-keyed metadata.
            delay: seconds (or a timedelta) before it may be delivered.
            eta: an aware datetime before which it is not delivered.
            id: a message id of your choosing (default: the log entry id for immediate
                messages, 32 hex characters for delayed ones).
            key: the ordering key, the entity the message is about (``"order-42"``): a
                non-empty str of at most 256 bytes in UTF-8, carried with the message
                (``message.key``); an ordered consumer handles one key's in order.

        Raises:
            InvalidName: the queue name is not allowed.
            PayloadTooLarge: the encoded payload and headers are over ``max_payload_bytes``.
            PayloadNotSerializable: payload or headers hold a non-JSON value.
            InvalidKey: ``key`` is not a str, is empty or is over 256 bytes.
            ValueError: both ``delay`` and ``eta``, a negative delay or a naive ``eta``.
        """
        return self.prepare_due(queue, payload, headers, due_of(delay, eta), id, key)

    def prepare_many(
        self,
        queue: str,
        payloads: Iterable[Any],
        *,
        headers: Mapping[str, Any] | None = None,
        delay: Delay = None,
        eta: dt.datetime | None = None,
        key: str | None = None,
    ) -> list[Envelope]:
        """:meth:`prepare` of each payload, with one due time for the whole batch (what
        :meth:`publish_many` sends, on either client)."""
        due = due_of(delay, eta)
        return [self.prepare_due(queue, p, headers, due, None, key) for p in payloads]

    def prepare_due(
        self,
        queue: str,
        payload: Any,
        headers: Mapping[str, Any] | None,
        due: Due | None,
        id: str | None = None,
        key: str | None = None,
    ) -> Envelope:
        """:meth:`prepare` with the due time computed (``envelope.due_of``): a batch's
        messages share one."""
        self.keys(queue)
        if key is not None:
            check_key(key)
        for hook in self.hooks:
            headers = hook.before_prepare(queue, headers)
        payload_json, headers_json = self.codec.encode_message(
            payload, headers, queue=queue, limit=self.config.max_payload_bytes
        )
        return Envelope.build(queue, id, payload_json, headers_json, due, key)

    @translate_errors
    def send(
        self, envelopes: Sequence[Envelope], *, once: bool = False, batch: str | None = None
    ) -> list[str]:
        """Send prepared messages: one round trip per queue, all or none per queue.

        Immediate messages are appended to the queue's log, delayed ones to its delayed
        set. With ``once``, each message is published at most once per message id
        (envelopes without an id get one): a repeated id within a day is a no-op, so a
        sender that is unsure whether a send went through can always send again. With
        ``batch`` (an id of your choosing), each queue's messages are published at most
        once per batch id (for 10 minutes): the cheap way to send a batch again safely.

        Returns:
            The message ids, in the order of ``envelopes``.

        Raises:
            RedisUnavailable: Redis cannot be reached (with ``once`` or ``batch``, sending
                again is safe; without, some queues' messages may have been published).
        """
        ids, plans = self.plan_send(envelopes, once=once, batch=batch)
        for indexes, plan in plans:
            replies = self._run_send(plan)
            self._record_queue(plan.keys.queue)
            self.partitions.mark_checked(plan.keys.queue)
            for i, reply in zip(indexes, replies, strict=True):
                ids[i] = ids[i] or to_str(reply)
        return ids

    def plan_send(
        self,
        envelopes: Sequence[Envelope],
        *,
        once: bool = False,
        batch: str | None = None,
        register: bool = False,
    ) -> tuple[list[str], list[tuple[list[int], QueueSend]]]:
        """What :meth:`send` sends, for either client to run (``run_send`` of
        ``core.sending`` or of ``core.asyncio_client``): the ids known now ("" for those
        the replies give) and, per queue (per partition of a partitioned one), the
        indexes of its envelopes and its send. A queue this process has not sent to yet
        has its number of partitions compared with Redis's record first
        (``QueueSend.check``); with ``register``, its name is recorded in Redis's registry
        in the same round trip (a quiet ``SADD``: :meth:`send` records it with a call of
        its own, which a Cluster client cannot put in one transaction with the queue's
        keys). :meth:`recorded` says the send went through."""
        counted = self.config.trends  # the queue's `published` trend, same write
        if len(envelopes) == 1 and not (once or batch):  # one publish: no grouping
            e = envelopes[0]
            record, check = self._first_use(e.queue, register)
            parts = self.partitions.of(e.queue)
            keys = self.keys(e.queue) if parts is None else route(parts, [e])[0][0]
            if parts is not None:
                e = e.with_id()  # entry ids repeat across partitions: an id of its own
            plan = plan_queue(keys, [e], trends_on=counted, quiet=record)
            plan.check = check
            return [e.id or ""], [([0], plan)]
        prepared = [e.with_id() for e in envelopes] if once or batch else list(envelopes)
        ids = [e.id or "" for e in prepared]
        plans = []
        for queue, indexes in _by_queue(prepared).items():
            record, check = self._first_use(queue, register)
            parts = self.partitions.of(queue)
            if parts is None:  # as before partitions: one send for the queue
                mine = [prepared[i] for i in indexes]
                plan = plan_queue(
                    self.keys(queue), mine, once=once, batch=batch, trends_on=counted, quiet=record
                )
                plan.check = check
                plans.append((indexes, plan))
                continue
            for keys, routed in route(
                parts, [prepared[i] for i in indexes], once=once, batch=batch
            ):
                chosen = [indexes[i] for i in routed]
                # Entry ids repeat across partitions: every message gets an id of its own.
                group = [prepared[i].with_id() for i in chosen]
                for i, e in zip(chosen, group, strict=True):
                    ids[i] = e.id or ""
                plan = plan_queue(
                    keys, group, once=once, batch=batch, trends_on=counted, quiet=record
                )
                plan.check = check
                plans.append((chosen, plan))
                record, check = [], None  # once per queue
        return ids, plans

    def _first_use(
        self, queue: str, register: bool
    ) -> tuple[list[Any], tuple[QueueKeys, int] | None]:
        """The layout check (and with ``register`` the registry's ``SADD``) of a queue
        this process has not sent to yet; nothing for one it has."""
        if queue in self._registered:
            return [], None
        record = [self._record(queue)] if register else []
        return record, (self.keys(queue), self.partitions.count(queue))

    def _run_send(self, plan: QueueSend) -> list[Any]:
        """Run one queue's (one partition's) send; refused for its layout (the queue was
        repartitioned, or Redis lost its records), read the record again and resend
        (``partitions.retried``)."""
        return retried(
            self.client, self.scripts, plan.keys, lambda: run_send(self.client, self.scripts, plan)
        )

    def publish(
        self,
        queue: str,
        payload: Any,
        *,
        headers: Mapping[str, Any] | None = None,
        delay: Delay = None,
        eta: dt.datetime | None = None,
        key: str | None = None,
    ) -> str:
        """Publish one message; every logical consumer of ``queue`` receives it.

        Arguments and errors as :meth:`prepare` and :meth:`send`.

        Returns:
            The message id. Immediate messages get their log entry id
            (``"1700000000000-0"``); delayed ones, and every one of a partitioned queue
            (entry ids repeat across partitions), a 32-character hex id.
        """
        with sending(self.hooks, queue, 1):
            # A keyed message takes the Envelope path: the fast one writes no key.
            if delay is None and eta is None and key is None and queue in self._registered:
                return self._publish_now(queue, payload, headers)
            envelope = self.prepare(queue, payload, headers=headers, delay=delay, eta=eta, key=key)
            return self.send([envelope])[0]

    @translate_errors
    def _publish_now(self, queue: str, payload: Any, headers: Mapping[str, Any] | None) -> str:
        """:meth:`prepare` and :meth:`send` of one immediate message to a queue this
        process recorded already, without the :class:`Envelope` and the grouping in
        between: the path most publishes take (same checks, hooks and write)."""
        if self.partitions.count(queue) > 1:  # ids of their own (plan_send)
            return self.send([self.prepare(queue, payload, headers=headers)])[0]
        keys = self.keys(queue)
        for hook in self.hooks:
            headers = hook.before_prepare(queue, headers)
        payload_json, headers_json = self.codec.encode_message(
            payload, headers, queue=queue, limit=self.config.max_payload_bytes
        )
        plan = plan_immediate(keys, payload_json, headers_json, trends_on=self.config.trends)
        return to_str(self._run_send(plan)[0])

    def publish_many(
        self,
        queue: str,
        payloads: Iterable[Any],
        *,
        headers: Mapping[str, Any] | None = None,
        delay: Delay = None,
        eta: dt.datetime | None = None,
        key: str | None = None,
    ) -> list[str]:
        """Publish several messages in one round trip, all or none.

        Every payload is encoded (and checked against the limit) before anything is
        sent, so an invalid payload publishes nothing. Arguments as :meth:`publish`;
        ``headers``, ``delay``, ``eta`` and ``key`` (one ordering key for the whole
        batch) apply to every message. On a partitioned queue the batch goes to one
        partition (its key's; without one, the partitions take turns by batch).

        Returns:
            The message ids, in the order of ``payloads``.
        """
        payloads = list(payloads)
        with sending(self.hooks, queue, len(payloads)):
            envelopes = self.prepare_many(
                queue, payloads, headers=headers, delay=delay, eta=eta, key=key
            )
            return self.send(envelopes)

    # -- consuming -----------------------------------------------------------------------

    def subscribe(
        self,
        where: str | Place,
        consumer: str,
        instance: str | None = None,
        *,
        policy: RetryPolicy | None = None,
        ordered: bool = False,
        partition: int | None = None,
        wait_replicas: int | None = None,
        **overrides: Any,
    ) -> Subscription:
        """An instance of logical consumer ``consumer``: fetches, acks and fails messages.

        Args:
            where: what it consumes: a queue, or on a partitioned queue the partition
                (``Place(queue, i)``, 0 to K - 1; required there): run instances on each.
            consumer: its logical consumer, registered (``consumers.ensure``).
            instance: the instance name, unique per running instance (default
                ``host:pid:random``); the consumer's instances share its messages.
            policy: its retry policy (default: the config's).
            ordered: the consumer is ordered (``core/ordered.py``): give it to every
                instance of the consumer, or none.
            partition: deprecated, the place's.
            wait_replicas: an ordered consumer's reads wait (``WAIT``, at most the
                config's ``ordered_wait_timeout_ms``) until this many replicas have them,
                before their messages run (default: the config's
                ``ordered_wait_replicas``; 0: no wait). See ``core/ordered.py``.
            **overrides: fields of the policy to change (``max_retries``, ``backoff_s``,
                ``max_backoff_s``, ``visibility_timeout_ms``).

        Raises:
            PartitionedQueueError: no partition on a partitioned queue, one on another,
                or out of range.
            PartitionsMismatch: Redis records another number of partitions.
            ConfigurationError: ``wait_replicas`` for a consumer that is not ordered.
        """
        place = place_of(where, partition, caller="Broker.subscribe")
        replica_wait = self._replica_wait(consumer, ordered, wait_replicas)
        keys = self.partitions.at(place, "the instance's messages")
        self.partitions.check(place.queue)
        return Subscription(
            client=self.client,
            scripts=self.scripts,
            config=self.config,
            keys=keys,
            consumer=consumer,
            instance=instance or default_instance_name(),
            policy=(policy or self.config.retry).evolve(**overrides),
            ordered=ordered,
            replica_wait=replica_wait,
        )

    def _replica_wait(
        self, consumer: str, ordered: bool, wait_replicas: int | None
    ) -> ReplicaWait | None:
        """The replica wait of a subscription's reads (None: none)."""
        if not ordered:
            if wait_replicas:
                raise ConfigurationError(
                    f"wait_replicas={wait_replicas!r} for consumer {consumer!r}: only an "
                    "ordered consumer waits for replicas (declare it ordered=True)."
                )
            return None
        replicas = self.config.ordered_wait_replicas if wait_replicas is None else wait_replicas
        if replicas <= 0:
            return None
        return ReplicaWait(replicas, self.config.ordered_wait_timeout_ms)


#: The Broker's methods of 0.9 that moved to the objects it holds: each still works, and
#: warns with its new place, for one minor version.
moved_methods(
    Broker,
    {
        "ensure_consumer": "consumers.ensure",
        "ensure_consumer_call": "consumers.ensure_call",
        "reset": "consumers.reset",
        "remove_consumer": "consumers.remove",
        "send_to_consumer": "consumers.deliver",
        "delete_dead": "dead_letters.delete",
        "redrive": "dead_letters.redrive",
        "redrive_envelope": "dead_letters.redrive_envelope",
        "redrive_envelopes": "dead_letters.redrive_envelopes",
        "partition_count": "partitions.count",
        "layout": "partitions.layout",
        "recorded_partitions": "partitions.recorded",
        "repartition": "partitions.change",
        "check_partitions": "partitions.check",
    },
)


def _by_queue(envelopes: Sequence[Envelope]) -> dict[str, list[int]]:
    """The indexes of ``envelopes`` by queue, queues in the order first met."""
    by_queue: dict[str, list[int]] = {}
    for index, envelope in enumerate(envelopes):
        by_queue.setdefault(envelope.queue, []).append(index)
    return by_queue
