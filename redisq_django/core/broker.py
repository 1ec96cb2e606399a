"""The broker: build a message once and send it anywhere; logical consumers, replay,
dead letters, retention and stats of one Redis."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, cast

import redis

from redisq_django.core import named_archives, redelivery, retention
from redisq_django.core.config import CoreConfig
from redisq_django.core.dead_entry import DeadEntry, redrive_fields
from redisq_django.core.envelope import Delay, Due, Envelope, due_of
from redisq_django.core.errors import (
    ConsumerNotFound,
    describe_client,
    is_nogroup,
    translate_errors,
)
from redisq_django.core.groups import default_instance_name, ensure_group, group_names, remove_group
from redisq_django.core.hooks import PublishHook, sending
from redisq_django.core.json import JsonCodec
from redisq_django.core.keys import QueueKeys, queue_keys, registry_key
from redisq_django.core.retry import RetryPolicy
from redisq_django.core.scripts import Scripts
from redisq_django.core.sending import send_direct, send_once, send_queue
from redisq_django.core.start import StartPoint
from redisq_django.core.stats import QueueStats, read_stats
from redisq_django.core.subscription import Subscription
from redisq_django.core.types import RedisClient, StreamEntries
from redisq_django.core.wire import to_bytes, to_str


class Broker:
    """Talks to Redis for one application; thread-safe, share one per process.

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
        self.hooks = list(hooks)
        self.codec = JsonCodec(self.config.json_encoder)
        self.scripts = Scripts(client)
        self._keys: dict[str, QueueKeys] = {}
        self._registered: set[str] = set()

    def __repr__(self) -> str:
        return f"<Broker {describe_client(self.client)} prefix={self.config.prefix!r}>"

    def keys(self, queue: str) -> QueueKeys:
        """The keys of ``queue`` (validates the name once)."""
        keys = self._keys.get(queue)
        if keys is None:
            keys = self._keys[queue] = queue_keys(self.config.prefix, queue)
        return keys

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

        Raises:
            InvalidName: the queue name is not allowed.
            PayloadTooLarge: the encoded payload and headers are over ``max_payload_bytes``.
            PayloadNotSerializable: payload or headers hold a non-JSON value.
            ValueError: both ``delay`` and ``eta``, a negative delay or a naive ``eta``.
        """
        return self._prepare(queue, payload, headers, due_of(delay, eta), id)

    def _prepare(
        self,
        queue: str,
        payload: Any,
        headers: Mapping[str, Any] | None,
        due: Due | None,
        id: str | None = None,
    ) -> Envelope:
        self.keys(queue)
        for hook in self.hooks:
            headers = hook.before_prepare(queue, headers)
        payload_json, headers_json = self.codec.encode_message(
            payload, headers, queue=queue, limit=self.config.max_payload_bytes
        )
        return Envelope.build(queue, id, payload_json, headers_json, due)

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
        prepared = [e.with_id() for e in envelopes] if once or batch else list(envelopes)
        by_queue: dict[str, list[int]] = {}
        for index, envelope in enumerate(prepared):
            by_queue.setdefault(envelope.queue, []).append(index)
        ids = [e.id or "" for e in prepared]
        for queue, indexes in by_queue.items():
            keys = self.keys(queue)
            self._register(queue)
            mine = [prepared[i] for i in indexes]
            counted = self.config.trends  # the queue's `published` trend, same write
            replies = send_queue(
                self.client, self.scripts, keys, mine, once=once, batch=batch, trends_on=counted
            )
            for i, reply in zip(indexes, replies, strict=True):
                ids[i] = ids[i] or to_str(reply)
        return ids

    def publish(
        self,
        queue: str,
        payload: Any,
        *,
        headers: Mapping[str, Any] | None = None,
        delay: Delay = None,
        eta: dt.datetime | None = None,
    ) -> str:
        """Publish one message; every logical consumer of ``queue`` receives it.

        Arguments and errors as :meth:`prepare` and :meth:`send`.

        Returns:
            The message id. Immediate messages get their log entry id
            (``"1700000000000-0"``); delayed ones a 32-character hex id.
        """
        with sending(self.hooks, queue, 1):
            envelope = self.prepare(queue, payload, headers=headers, delay=delay, eta=eta)
            return self.send([envelope])[0]

    def publish_many(
        self,
        queue: str,
        payloads: Iterable[Any],
        *,
        headers: Mapping[str, Any] | None = None,
        delay: Delay = None,
        eta: dt.datetime | None = None,
    ) -> list[str]:
        """Publish several messages in one round trip, all or none.

        Every payload is encoded (and checked against the limit) before anything is
        sent, so an invalid payload publishes nothing. Arguments as :meth:`publish`;
        ``headers``, ``delay`` and ``eta`` apply to every message.

        Returns:
            The message ids, in the order of ``payloads``.
        """
        due = due_of(delay, eta)  # one due time for the whole batch
        payloads = list(payloads)
        with sending(self.hooks, queue, len(payloads)):
            return self.send([self._prepare(queue, p, headers, due) for p in payloads])

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

    @property
    def archives(self) -> named_archives.Archives:
        """The queues' named archives: register, commit, list, remove
        (:class:`~redisq_django.core.named_archives.Archives`)."""
        return named_archives.Archives(self.client, self.scripts, self.keys)

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
        **overrides: Any,
    ) -> Subscription:
        """An instance of logical consumer ``consumer``: fetches, acks and fails messages.

        Args:
            queue, consumer: what it consumes; ``consumer`` must be registered
                (:meth:`ensure_consumer`).
            instance: the instance name, unique per running instance (default
                ``host:pid:random``); the consumer's instances share its messages.
            policy: its retry policy (default: the config's).
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
        )

    # -- dead letters ------------------------------------------------------------------

    @translate_errors
    def dead_letters(
        self, queue: str, consumer: str, *, count: int = 100, after: str | None = None
    ) -> list[DeadEntry]:
        """Dead letters of ``consumer`` still in Redis, oldest first (at most ``count``,
        after dead-stream entry id ``after`` when paging)."""
        gkeys = self.keys(queue).group(consumer)
        after_id = f"({after}" if after else "-"
        entries = cast("StreamEntries", self.client.xrange(gkeys.dead, after_id, "+", count=count))
        return [DeadEntry.from_entry(queue, eid, dict(f)) for eid, f in entries]

    @translate_errors
    def delete_dead(self, queue: str, consumer: str, entry_ids: Iterable[str]) -> int:
        """Remove dead letters from Redis (once stored elsewhere, or to discard them)."""
        ids = list(entry_ids)
        return int(self.client.xdel(self.keys(queue).group(consumer).dead, *ids)) if ids else 0

    @translate_errors
    def redrive(self, queue: str, consumer: str, entry_id: str) -> str | None:
        """Deliver the dead letter ``entry_id`` again to logical consumer ``consumer`` only.

        The attempt count starts again from zero; other consumers of the queue do not
        see the message again.

        Returns:
            The new delivery's entry id, or None when the dead letter is gone.

        Raises:
            NotRedrivable: the dead letter is undecodable (it would only die again).
        """
        gkeys = self.keys(queue).group(consumer)
        entries = cast("StreamEntries", self.client.xrange(gkeys.dead, entry_id, entry_id))
        if not entries:
            return None
        new_id = redelivery.redrive(
            self.scripts, gkeys, entry_id, redrive_fields(dict(entries[0][1])), self.config.history
        )
        return to_str(new_id) if new_id else None

    @translate_errors
    def redrive_envelope(self, queue: str, consumer: str, fields: Mapping[str | bytes, Any]) -> str:
        """Deliver an envelope (e.g. a dead letter kept in a database) to ``consumer`` only.

        Args:
            fields: envelope fields; ``payload`` is required (else ``NotRedrivable``);
                ``id``, ``headers`` and ``published_at`` keep the message's identity.

        Returns:
            The new delivery's entry id.
        """
        gkeys = self.keys(queue).group(consumer)
        envelope = redrive_fields({to_bytes(k): to_bytes(v) for k, v in fields.items()})
        return to_str(redelivery.redrive(self.scripts, gkeys, "", envelope, self.config.history))

    # -- retention, purge, stats -------------------------------------------------------

    @translate_errors
    def trim(self, queue: str, *, now: int | None = None) -> tuple[int, int]:
        """Apply retention to ``queue``'s log (bounded work: call it periodically).

        Removes entries every logical consumer has acknowledged and that are outside
        the replay window; never one a consumer still needs, unless a hard cap
        (``max_len`` / ``max_age_ms``) is set, in which case the drops are counted.

        Returns:
            ``(removed, dropped)``: removed safely, and unacknowledged ones dropped by a cap.
        """
        return retention.trim(self.scripts, self.keys(queue), self.config, now=now)

    @translate_errors
    def purge(self, queue: str) -> None:
        """Delete every message of ``queue`` (log, delayed, retries, dead letters in Redis)
        while keeping its logical consumers registered at the end of the (empty) log."""
        retention.purge(self.client, self.keys(queue), self.consumers(queue))

    @translate_errors
    def stats(self, queue: str) -> QueueStats:
        """Length, delayed, drops, archive lag, and per-consumer figures of ``queue``."""
        return read_stats(self.client, self.keys(queue), history=self.config.history)
