"""The broker: build a message once and send it anywhere, routed to a partitioned queue's
partitions (logical consumers, replay and subscriptions: ``broker_consumers``; dead
letters, retention, stats and what it hands out: ``broker_upkeep``)."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from redisq_django.core.broker_consumers import BrokerConsumers
from redisq_django.core.config import CoreConfig
from redisq_django.core.envelope import Delay, Due, Envelope, check_key, due_of
from redisq_django.core.errors import translate_errors
from redisq_django.core.hooks import PublishHook, sending
from redisq_django.core.json import JsonCodec
from redisq_django.core.keys import QueueKeys
from redisq_django.core.partitions import retried, route
from redisq_django.core.sending import (
    QueueSend,
    plan_immediate,
    plan_queue,
    run_send,
    send_direct,
    send_once,
)
from redisq_django.core.types import RedisClient
from redisq_django.core.wire import to_str


class Broker(BrokerConsumers):
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

    def __repr__(self) -> str:
        return f"<Broker {self.where} prefix={self.config.prefix!r}>"

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
            replies = self._run_send(plan)
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
        indexes of its envelopes and its send.
        With ``register``, a queue not recorded yet by this process is recorded in the
        same round trip (a quiet ``SADD``; :meth:`send` records it with a call of its
        own)."""
        counted = self.config.trends  # the queue's `published` trend, same write
        if len(envelopes) == 1 and not (once or batch):  # one publish: no grouping
            e = envelopes[0]
            record = [] if not register or e.queue in self._registered else [self._record(e.queue)]
            parts = self.partitions(e.queue)
            keys = self.keys(e.queue) if parts is None else route(parts, [e])[0][0]
            if parts is not None:
                e = e.with_id()  # entry ids repeat across partitions: an id of its own
            plan = plan_queue(keys, [e], trends_on=counted, quiet=record)
            return [e.id or ""], [([0], plan)]
        prepared = [e.with_id() for e in envelopes] if once or batch else list(envelopes)
        ids = [e.id or "" for e in prepared]
        plans = []
        for queue, indexes in _by_queue(prepared).items():
            record = [] if not register or queue in self._registered else [self._record(queue)]
            parts = self.partitions(queue)
            if parts is None:  # as before partitions: one send for the queue
                mine = [prepared[i] for i in indexes]
                plan = plan_queue(
                    self.keys(queue), mine, once=once, batch=batch, trends_on=counted, quiet=record
                )
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
                plans.append((chosen, plan))
                record = []  # once per queue
        return ids, plans

    def _run_send(self, plan: QueueSend) -> list[Any]:
        """Run one queue's (one partition's) send; refused for its layout (the queue was
        repartitioned, or Redis lost its records), read the record again and resend
        (``partitions.retried``)."""
        return retried(
            self.client, self.scripts, plan.keys, lambda: run_send(self.client, self.scripts, plan)
        )

    def _routed(
        self, queue: str, envelopes: Sequence[Envelope], once: bool, batch: str | None
    ) -> list[tuple[QueueKeys, list[int]]]:
        """Where ``queue``'s envelopes go: its keys, or its partitions'
        (``partitions.route``), with the indexes into ``envelopes`` of each's."""
        parts = self.partitions(queue)
        if parts is None:
            return [(self.keys(queue), list(range(len(envelopes))))]
        return route(parts, envelopes, once=once, batch=batch)

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
        if queue in self._partitioned:  # its messages need ids of their own (plan_send)
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
        out: list[str] = [""] * len(envelopes)
        prepared = [e.with_id() for e in envelopes] if once else list(envelopes)
        for queue, indexes in _by_queue(prepared).items():
            self.check_partitions(queue)
            for keys, mine in self._routed(queue, [prepared[i] for i in indexes], once, None):
                batch = [prepared[indexes[i]] for i in mine]
                to = keys.group(consumer)
                if once:
                    replies = retried(
                        self.client,
                        self.scripts,
                        keys,
                        lambda: send_once(self.client, self.scripts, keys, batch, to=to),  # noqa: B023
                    )
                else:
                    replies = retried(
                        self.client,
                        self.scripts,
                        keys,
                        lambda: send_direct(self.client, self.scripts, to, batch),  # noqa: B023
                    )
                for i, reply in zip(mine, replies, strict=True):
                    out[indexes[i]] = reply
        return out


def _by_queue(envelopes: Sequence[Envelope]) -> dict[str, list[int]]:
    """The indexes of ``envelopes`` by queue, queues in the order first met."""
    by_queue: dict[str, list[int]] = {}
    for index, envelope in enumerate(envelopes):
        by_queue.setdefault(envelope.queue, []).append(index)
    return by_queue
