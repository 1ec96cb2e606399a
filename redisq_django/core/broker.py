"""The broker: build a message once and send it anywhere; logical consumers, replay and
subscriptions (dead letters, retention, stats and what it hands out: ``broker_upkeep``)."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from typing import Any

import redis

from redisq_django.core import redelivery
from redisq_django.core.broker_upkeep import BrokerUpkeep
from redisq_django.core.config import CoreConfig
from redisq_django.core.envelope import Delay, Due, Envelope, check_key, due_of
from redisq_django.core.errors import ConsumerNotFound, is_nogroup, translate_errors
from redisq_django.core.groups import (
    default_instance_name,
    ensure_call,
    ensure_group,
    group_names,
    remove_group,
)
from redisq_django.core.hooks import PublishHook, sending
from redisq_django.core.json import JsonCodec
from redisq_django.core.keys import registry_key
from redisq_django.core.retry import RetryPolicy
from redisq_django.core.scripts import ScriptCall
from redisq_django.core.sending import (
    QueueSend,
    plan_immediate,
    plan_queue,
    run_send,
    send_direct,
    send_once,
)
from redisq_django.core.start import StartPoint
from redisq_django.core.subscription import Subscription
from redisq_django.core.types import RedisClient
from redisq_django.core.wire import to_str


class Broker(BrokerUpkeep):
    """Talks to Redis for one application; thread-safe, share one per process.

    What callers do goes through its methods (publish, subscribe, ensure_consumer,
    dead letters, …); what an operator reads and does, through :attr:`operator`; task
    results, named archives and the schedules' records through the objects it hands
    out (:attr:`task_results`, :attr:`archives`, :attr:`schedule_ledger`).

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
        super().__init__(client, config)
        self.hooks = list(hooks)
        self.codec = JsonCodec(self.config.json_encoder)
        self._registered: set[str] = set()

    def __repr__(self) -> str:
        return f"<Broker {self.where} prefix={self.config.prefix!r}>"

    def _register(self, queue: str) -> None:
        # Queue names are recorded once per process: the operator views list them.
        if queue not in self._registered:
            self.client.sadd(registry_key(self.config.prefix), queue)
            self._registered.add(queue)

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
            self._register(plan.keys.queue)
            replies = run_send(self.client, self.scripts, plan)
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
        the replies give) and, per queue, the indexes of its envelopes and its send.
        With ``register``, a queue not recorded yet by this process is recorded in the
        same round trip (a quiet ``SADD``; :meth:`send` records it with a call of its
        own)."""
        counted = self.config.trends  # the queue's `published` trend, same write
        if len(envelopes) == 1 and not (once or batch):  # one publish: no grouping
            e = envelopes[0]
            record = [] if not register or e.queue in self._registered else [self._record(e.queue)]
            plan = plan_queue(self.keys(e.queue), [e], trends_on=counted, quiet=record)
            return [e.id or ""], [([0], plan)]
        prepared = [e.with_id() for e in envelopes] if once or batch else list(envelopes)
        by_queue: dict[str, list[int]] = {}
        for index, envelope in enumerate(prepared):
            by_queue.setdefault(envelope.queue, []).append(index)
        plans = []
        for queue, indexes in by_queue.items():
            keys = self.keys(queue)
            record = [] if not register or queue in self._registered else [self._record(queue)]
            mine = [prepared[i] for i in indexes]
            plan = plan_queue(keys, mine, once=once, batch=batch, trends_on=counted, quiet=record)
            plans.append((indexes, plan))
        return [e.id or "" for e in prepared], plans

    def _record(self, queue: str) -> tuple[str, str, str]:
        return ("SADD", registry_key(self.config.prefix), queue)

    def recorded(self, queue: str) -> None:
        """``queue`` is recorded in Redis (a send planned with ``register`` went through)."""
        self._registered.add(queue)

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
            (``"1700000000000-0"``); delayed ones a 32-character hex id.
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
        keys = self.keys(queue)
        for hook in self.hooks:
            headers = hook.before_prepare(queue, headers)
        payload_json, headers_json = self.codec.encode_message(
            payload, headers, queue=queue, limit=self.config.max_payload_bytes
        )
        plan = plan_immediate(keys, payload_json, headers_json, trends_on=self.config.trends)
        return to_str(run_send(self.client, self.scripts, plan)[0])

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
        batch) apply to every message.

        Returns:
            The message ids, in the order of ``payloads``.
        """
        due = due_of(delay, eta)  # one due time for the whole batch
        payloads = list(payloads)
        with sending(self.hooks, queue, len(payloads)):
            envelopes = [self.prepare_due(queue, p, headers, due, None, key) for p in payloads]
            return self.send(envelopes)

    @translate_errors
    def send_to_consumer(
        self, consumer: str, envelopes: Sequence[Envelope], *, once: bool = False
    ) -> list[str]:
        """Deliver envelopes at once to one logical consumer only (its private input), one
        round trip per queue (targeted replay); ``once``: at most once per message id and
        consumer. Returns the new entry ids (with ``once``: the message ids)."""
        out: list[str] = []
        for queue in dict.fromkeys(e.queue for e in envelopes):  # in order, once each
            mine = [e.with_id() if once else e for e in envelopes if e.queue == queue]
            keys = self.keys(queue)
            to = keys.group(consumer)
            sent = send_once(self.client, self.scripts, keys, mine, to=to) if once else None
            out += sent if sent is not None else send_direct(self.client, to, mine)
        return out

    # -- logical consumers -------------------------------------------------------------

    @translate_errors
    def ensure_consumer(
        self, queue: str, consumer: str, start: str | dt.datetime | StartPoint = "latest"
    ) -> bool:
        """Register logical consumer ``consumer`` on ``queue`` unless it exists.

        From then on it receives every message published (also while none of its
        instances runs). ``start`` says where a *new* consumer begins: ``"latest"``
        (only what comes next), ``"earliest"`` (everything still in the log), an aware
        datetime or a message id (inclusive). An existing consumer keeps its position;
        use :meth:`reset` to move it.

        Returns:
            True when it was created, False when it already existed.
        """
        created = ensure_group(
            self.scripts, self.keys(queue).group(consumer), StartPoint.parse(start)
        )
        self._register(queue)
        return created

    def ensure_consumer_call(
        self, queue: str, consumer: str, start: str | dt.datetime | StartPoint = "latest"
    ) -> ScriptCall:
        """The script call of :meth:`ensure_consumer`, the queue's name recorded in the
        same round trip (a quiet ``SADD``), for a client of its own to run (an asyncio
        one: ``core.asyncio_client.run_call``)."""
        call = ensure_call(self.keys(queue).group(consumer), StartPoint.parse(start))
        record = ("SADD", registry_key(self.config.prefix), queue)
        return replace(call, quiet=[*call.quiet, record])

    @translate_errors
    def reset(self, queue: str, consumer: str, start: str | dt.datetime | StartPoint) -> None:
        """Move logical consumer ``consumer`` to ``start`` to receive messages again (replay).

        Messages from the start point onwards that are still in the log (see the replay
        window) are delivered again, in order. Older history is replayed from the archive
        by the pipeline.

        Raises:
            ConsumerNotFound: ``consumer`` is not registered on ``queue``.
        """
        keys = self.keys(queue)
        keys.group(consumer)
        target = StartPoint.parse(start).to_last_delivered_id()
        try:
            redelivery.reset(self.client, keys.group(consumer), target, self.config.history)
        except redis.ResponseError as exc:
            if is_nogroup(exc):
                raise ConsumerNotFound(queue, consumer) from exc
            raise

    @translate_errors
    def consumers(self, queue: str) -> list[str]:
        """Names of the logical consumers registered on ``queue``."""
        return group_names(self.client, self.keys(queue))

    @translate_errors
    def remove_consumer(self, queue: str, consumer: str) -> None:
        """Unregister logical consumer ``consumer`` and delete its private keys.

        Its retries, dead letters still in Redis and in-flight state are discarded.
        """
        remove_group(self.client, self.keys(queue).group(consumer))

    @translate_errors
    def queues(self) -> list[str]:
        """Every queue name published to or consumed from (sorted)."""
        return sorted(to_str(q) for q in self.client.smembers(registry_key(self.config.prefix)))

    def subscribe(
        self,
        queue: str,
        consumer: str,
        instance: str | None = None,
        *,
        policy: RetryPolicy | None = None,
        ordered: bool = False,
        **overrides: Any,
    ) -> Subscription:
        """An instance of logical consumer ``consumer``: fetches, acks and fails messages.

        Args:
            queue, consumer: what it consumes; ``consumer`` must be registered
                (:meth:`ensure_consumer`).
            instance: the instance name, unique per running instance (default
                ``host:pid:random``); the consumer's instances share its messages.
            policy: its retry policy (default: the config's).
            ordered: the consumer is ordered (``core/ordered.py``): give it to every
                instance of the consumer, or none.
            **overrides: fields of the policy to change (``max_retries``, ``backoff_s``,
                ``max_backoff_s``, ``visibility_timeout_ms``).
        """
        return Subscription(
            client=self.client,
            scripts=self.scripts,
            config=self.config,
            keys=self.keys(queue),
            consumer=consumer,
            instance=instance or default_instance_name(),
            policy=(policy or self.config.retry).evolve(**overrides),
            ordered=ordered,
        )
