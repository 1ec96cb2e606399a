"""The broker: publishing, logical consumers, replay, dead letters, retention, stats."""

from __future__ import annotations

import datetime as dt
import math
import os
import socket
import uuid
from collections.abc import Iterable, Mapping
from typing import Any

import redis

from redisq_django.core import codec
from redisq_django.core._util import (
    describe_client,
    flatten,
    now_ms,
    to_bytes,
    to_str,
    translate_errors,
)
from redisq_django.core.config import CoreConfig
from redisq_django.core.envelope import DeadLetter, redrive_fields
from redisq_django.core.errors import ConsumerNotFound
from redisq_django.core.keys import GroupKeys, QueueKeys, queue_keys, registry_key
from redisq_django.core.lua import Scripts
from redisq_django.core.start import StartPoint
from redisq_django.core.stats import ConsumerStats, QueueStats, age_s

#: How long the outbox relay remembers that a message id was published: 1 day (ms).
SENT_MARKER_TTL_MS = 24 * 3600 * 1000
#: Above this many undelivered entries, Redis < 7 lag figures are reported as this cap.
LAG_COUNT_CAP = 10_000

Delay = float | int | dt.timedelta | None
_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)


def _is_nogroup(exc: redis.ResponseError) -> bool:
    return str(exc).startswith("NOGROUP")


class Broker:
    """Talks to Redis for one application; thread-safe, share one per process.

    Args:
        client: a redis-py ``Redis`` or ``RedisCluster`` client (bytes responses, i.e.
            ``decode_responses=False``, the default).
        config: settings; defaults when omitted.
    """

    def __init__(self, client: Any, config: CoreConfig | None = None) -> None:
        self.client = client
        self.config = config or CoreConfig()
        self.codec = codec.JsonCodec(self.config.json_encoder)
        self.scripts = Scripts(client)
        self._keys: dict[str, QueueKeys] = {}
        self._registered: set[str] = set()

    def __repr__(self) -> str:
        return f"<Broker {describe_client(self.client)} prefix={self.config.prefix!r}>"

    # -- keys --------------------------------------------------------------------------

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

    @staticmethod
    def _due_ms(delay: Delay, eta: dt.datetime | None) -> int | None:
        if delay is not None and eta is not None:
            raise ValueError("Pass either delay= or eta=, not both.")
        if delay is not None:
            seconds = delay.total_seconds() if isinstance(delay, dt.timedelta) else delay
            if seconds < 0:
                raise ValueError(f"delay must be >= 0 seconds, got {seconds}")
            # Round up: a due time before publish time + delay would deliver early.
            return now_ms() + math.ceil(seconds * 1000) if seconds > 0 else None
        if eta is not None:
            if eta.tzinfo is None:
                raise ValueError(f"eta {eta!r} has no time zone; pass an aware datetime.")
            # Round up: a due time in whole ms before the eta would deliver early.
            micros = (eta - _EPOCH) // dt.timedelta(microseconds=1)
            due = -(-micros // 1000)
            return due if due > now_ms() else None
        return None

    def _fields(self, queue: str, payload: Any, headers: Mapping[str, Any] | None) -> list[Any]:
        args: list[Any] = [
            codec.F_PAYLOAD,
            self.codec.encode_payload(payload, queue=queue, limit=self.config.max_payload_bytes),
        ]
        encoded_headers = self.codec.encode_headers(headers, queue=queue)
        if encoded_headers is not None:
            args += [codec.F_HEADERS, encoded_headers]
        return args

    def _delayed_member(self, fields: list[Any], due: int) -> tuple[str, bytes]:
        message_id = new_message_id()
        member = {to_str(fields[i]): to_str(fields[i + 1]) for i in range(0, len(fields), 2)}
        member.update(id=message_id, published_at=str(now_ms()), due_at=str(due))
        return message_id, self.codec.dumps(member, queue="")

    @translate_errors
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

        Args:
            queue: the queue (topic) name.
            payload: any JSON-serialisable value (datetime, date, time, timedelta,
                Decimal and UUID are converted as Django's JSON encoder does).
            headers: optional JSON-serialisable string-keyed metadata.
            delay: seconds (or a timedelta) before it may be delivered.
            eta: an aware datetime before which it is not delivered.

        Returns:
            The message id. Immediate messages get their log entry id
            (``"1700000000000-0"``); delayed ones a 32-character hex id.

        Raises:
            PayloadTooLarge: the encoded payload is over ``max_payload_bytes``.
            PayloadNotSerializable: payload or headers hold a non-JSON value.
            RedisUnavailable: Redis cannot be reached.
        """
        keys = self.keys(queue)
        fields = self._fields(queue, payload, headers)
        due = self._due_ms(delay, eta)
        self._register(queue)
        if due is None:
            return to_str(self.client.execute_command("XADD", keys.log, "*", *fields))
        message_id, member = self._delayed_member(fields, due)
        self.client.zadd(keys.delayed, {member: due})
        return message_id

    @translate_errors
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
        keys = self.keys(queue)
        all_fields = [self._fields(queue, p, headers) for p in payloads]
        if not all_fields:
            return []
        due = self._due_ms(delay, eta)
        self._register(queue)
        if due is not None:
            members = [self._delayed_member(f, due) for f in all_fields]
            self.client.zadd(keys.delayed, {m: due for _, m in members})
            return [mid for mid, _ in members]
        with self.client.pipeline(transaction=True) as pipe:
            for fields in all_fields:
                pipe.execute_command("XADD", keys.log, "*", *fields)
            return [to_str(i) for i in pipe.execute()]

    def _encoded(
        self,
        queue: str,
        message_id: str,
        payload_json: str | bytes,
        headers_json: str | bytes | None,
        published_at: dt.datetime | None,
        due_at: dt.datetime | None,
    ) -> tuple[list[str], int, bytes]:
        """Envelope fields, due time (0: now) and delayed member of pre-encoded JSON."""
        fields: dict[str, str] = {"payload": to_str(payload_json), "id": message_id}
        if headers_json:
            fields["headers"] = to_str(headers_json)
        if published_at is not None:
            fields["published_at"] = str(int(published_at.timestamp() * 1000))
        due = self._due_ms(None, due_at) if due_at is not None else None
        member = b""
        if due:
            fields["due_at"] = str(due)
            fields.setdefault("published_at", str(now_ms()))
            member = self.codec.dumps(fields, queue=queue)
        return [x for kv in fields.items() for x in kv], due or 0, member

    @translate_errors
    def publish_encoded(
        self,
        queue: str,
        message_id: str,
        payload_json: str | bytes,
        *,
        headers_json: str | bytes | None = None,
        published_at: dt.datetime | None = None,
        due_at: dt.datetime | None = None,
    ) -> None:
        """Publish JSON encoded earlier (see ``JsonCodec``) under a chosen message id.

        Used to validate a payload when a transaction asks for it and send it once the
        transaction commits.
        """
        keys = self.keys(queue)
        flat, due, member = self._encoded(
            queue, message_id, payload_json, headers_json, published_at, due_at
        )
        self._register(queue)
        if due:
            self.client.zadd(keys.delayed, {member: due})
        else:
            self.client.execute_command("XADD", keys.log, "*", *flat)

    @translate_errors
    def publish_encoded_many(
        self, queue: str, messages: list[tuple[str, bytes]], *, headers_json: bytes | None = None
    ) -> None:
        """Publish pre-encoded ``(message_id, payload_json)`` pairs now, in one round
        trip, all or none (see :meth:`publish_encoded`)."""
        keys = self.keys(queue)
        self._register(queue)
        with self.client.pipeline(transaction=True) as pipe:
            for message_id, payload_json in messages:
                flat, _, _ = self._encoded(
                    queue, message_id, payload_json, headers_json, None, None
                )
                pipe.execute_command("XADD", keys.log, "*", *flat)
            pipe.execute()

    @translate_errors
    def publish_once(
        self,
        queue: str,
        message_id: str,
        payload_json: str | bytes,
        *,
        headers_json: str | bytes | None = None,
        published_at: dt.datetime | None = None,
        due_at: dt.datetime | None = None,
        marker_ttl_ms: int = SENT_MARKER_TTL_MS,
    ) -> bool:
        """As :meth:`publish_encoded`, but at most once per message id.

        Used by the outbox relay: a relay that crashed after publishing but before
        marking its row sent publishes again, and that second call is a no-op (a marker
        key remembers the id for ``marker_ttl_ms``).

        Returns:
            True when published now, False when it had been published before.
        """
        keys = self.keys(queue)
        flat, due, member = self._encoded(
            queue, message_id, payload_json, headers_json, published_at, due_at
        )
        self._register(queue)
        done, _ = self.scripts(
            "publish_once",
            [keys.log, keys.delayed, keys.sent_marker(message_id)],
            [marker_ttl_ms, due, member, *flat],
        )
        return bool(done)

    # -- logical consumers -------------------------------------------------------------

    @translate_errors
    def ensure_consumer(
        self, queue: str, group: str, start: str | dt.datetime | StartPoint = "latest"
    ) -> bool:
        """Register logical consumer ``group`` on ``queue`` unless it exists.

        From then on it receives every message published (also while none of its
        instances runs). ``start`` says where a *new* consumer begins: ``"latest"``
        (only what comes next), ``"earliest"`` (everything still in the log), an aware
        datetime or a message id (inclusive). An existing consumer keeps its position;
        use :meth:`reset` to move it.

        Returns:
            True when it was created, False when it already existed.
        """
        gkeys = self.keys(queue).group(group)
        point = StartPoint.parse(start)
        created = self.scripts(
            "ensure_consumer",
            [gkeys.queue_keys.log, gkeys.direct],
            [group, point.to_last_delivered_id()],
        )
        self._register(queue)
        return bool(created)

    @translate_errors
    def reset(self, queue: str, group: str, start: str | dt.datetime | StartPoint) -> None:
        """Move logical consumer ``group`` to ``start`` to receive messages again (replay).

        Messages from the start point onwards that are still in the log (see the replay
        window) are delivered again, in order. Older history is replayed from the archive
        by the pipeline.

        Raises:
            ConsumerNotFound: ``group`` is not registered on ``queue``.
        """
        keys = self.keys(queue)
        keys.group(group)
        point = StartPoint.parse(start)
        target = point.to_last_delivered_id()
        try:
            self.client.execute_command("XGROUP", "SETID", keys.log, group, target)
        except redis.ResponseError as exc:
            if _is_nogroup(exc):
                raise ConsumerNotFound(queue, group) from exc
            raise

    @translate_errors
    def consumers(self, queue: str) -> list[str]:
        """Names of the logical consumers registered on ``queue``."""
        try:
            groups = self.client.xinfo_groups(self.keys(queue).log)
        except redis.ResponseError:  # no such key
            return []
        return sorted(to_str(g["name"]) for g in groups)

    @translate_errors
    def remove_consumer(self, queue: str, group: str) -> None:
        """Unregister logical consumer ``group`` and delete its private keys.

        Its retries, dead letters still in Redis and in-flight state are discarded.
        """
        keys = self.keys(queue)
        gkeys = keys.group(group)
        with self.client.pipeline(transaction=True) as pipe:
            pipe.execute_command("XGROUP", "DESTROY", keys.log, group)
            pipe.delete(gkeys.direct, gkeys.retry, gkeys.dead, gkeys.instances)
            pipe.execute(raise_on_error=False)

    @translate_errors
    def queues(self) -> list[str]:
        """Every queue name published to or consumed from (sorted)."""
        return sorted(to_str(q) for q in self.client.smembers(registry_key(self.config.prefix)))

    def subscribe(
        self,
        queue: str,
        group: str,
        consumer: str | None = None,
        **policy: Any,
    ) -> Any:
        """An instance of logical consumer ``group``: fetches, acks and fails messages.

        Args:
            queue, group: what it consumes; ``group`` must be registered
                (:meth:`ensure_consumer`).
            consumer: the instance name, unique per running instance (default
                ``host:pid:random``).
            **policy: ``max_retries``, ``backoff_s``, ``max_backoff_s``,
                ``visibility_timeout_ms``; defaults from the config.

        Returns:
            A :class:`~redisq_django.core.subscription.Subscription`.
        """
        from redisq_django.core.subscription import Subscription

        return Subscription(self, queue, group, consumer or default_instance_name(), **policy)

    # -- dead letters ------------------------------------------------------------------

    @translate_errors
    def dead_letters(
        self, queue: str, group: str, *, count: int = 100, after: str | None = None
    ) -> list[DeadLetter]:
        """Dead letters of ``group`` still in Redis, oldest first.

        Args:
            count: at most this many.
            after: only those after this dead-stream entry id (for paging).
        """
        gkeys = self.keys(queue).group(group)
        start = f"({after}" if after else "-"
        entries = self.client.xrange(gkeys.dead, start, "+", count=count)
        return [DeadLetter.from_entry(queue, eid, dict(f)) for eid, f in entries]

    @translate_errors
    def delete_dead(self, queue: str, group: str, entry_ids: Iterable[str]) -> int:
        """Remove dead letters from Redis (once stored elsewhere, or to discard them)."""
        ids = list(entry_ids)
        if not ids:
            return 0
        return int(self.client.xdel(self.keys(queue).group(group).dead, *ids))

    @translate_errors
    def redrive(self, queue: str, group: str, entry_id: str) -> str | None:
        """Deliver the dead letter ``entry_id`` again to logical consumer ``group`` only.

        The attempt count starts again from zero; other consumers of the queue do not
        see the message again.

        Returns:
            The new delivery's entry id, or None when the dead letter is gone.
        """
        gkeys = self.keys(queue).group(group)
        entries = self.client.xrange(gkeys.dead, entry_id, entry_id)
        if not entries:
            return None
        fields = redrive_fields(dict(entries[0][1]))
        new_id = self.scripts("redrive", [gkeys.dead, gkeys.direct], [entry_id, *flatten(fields)])
        return to_str(new_id) if new_id else None

    @translate_errors
    def redrive_envelope(self, queue: str, group: str, fields: Mapping[str | bytes, Any]) -> str:
        """Deliver an envelope (e.g. a dead letter kept in a database) to ``group`` only.

        Args:
            fields: envelope fields; ``payload`` is required, ``id``, ``headers`` and
                ``published_at`` keep the message's identity.

        Returns:
            The new delivery's entry id.
        """
        gkeys = self.keys(queue).group(group)
        envelope = redrive_fields({to_bytes(k): to_bytes(v) for k, v in fields.items()})
        if codec.F_PAYLOAD not in envelope:
            raise ValueError("An envelope to re-drive needs a 'payload' field.")
        new_id = self.scripts("redrive", [gkeys.dead, gkeys.direct], ["", *flatten(envelope)])
        return to_str(new_id)

    # -- retention ---------------------------------------------------------------------

    @translate_errors
    def trim(self, queue: str, *, now: int | None = None) -> tuple[int, int]:
        """Apply retention to ``queue``'s log (bounded work: call it periodically).

        Removes entries every logical consumer has acknowledged and that are outside
        the replay window; never one a consumer still needs, unless a hard cap
        (``max_len`` / ``max_age_ms``) is set, in which case the drops are counted.

        Returns:
            ``(removed, dropped)``: entries removed safely and unacknowledged entries
            removed by the hard cap.
        """
        keys = self.keys(queue)
        c = self.config
        removed, dropped = self.scripts(
            "trim",
            [keys.log, keys.meta],
            [
                now if now is not None else now_ms(),
                c.replay_window_ms,
                c.replay_window_len,
                c.max_len,
                c.max_age_ms,
                c.script_batch,
            ],
        )
        return int(removed), int(dropped)

    # -- purge -------------------------------------------------------------------------

    @translate_errors
    def purge(self, queue: str) -> None:
        """Delete every message of ``queue`` (log, delayed, retries, dead letters in Redis)
        while keeping its logical consumers registered at the end of the (empty) log."""
        keys = self.keys(queue)
        groups = self.consumers(queue)
        with self.client.pipeline(transaction=True) as pipe:
            pipe.execute_command("XTRIM", keys.log, "MAXLEN", 0)
            pipe.delete(keys.delayed)
            for group in groups:
                gkeys = keys.group(group)
                pipe.execute_command("XTRIM", gkeys.direct, "MAXLEN", 0)
                pipe.delete(gkeys.retry, gkeys.dead)
            pipe.execute()
        for group in groups:
            # Pending entries point at deleted entries: forget them by moving the
            # group to the end and re-creating it (keeps the registration).
            self._recreate_group(keys, group)

    def _recreate_group(self, keys: QueueKeys, group: str) -> None:
        gkeys = keys.group(group)
        with self.client.pipeline(transaction=True) as pipe:
            pipe.execute_command("XGROUP", "DESTROY", keys.log, group)
            pipe.execute_command("XGROUP", "DESTROY", gkeys.direct, group)
            pipe.execute_command("XGROUP", "CREATE", keys.log, group, "$", "MKSTREAM")
            pipe.execute_command("XGROUP", "CREATE", gkeys.direct, group, "0", "MKSTREAM")
            pipe.execute()

    # -- stats -------------------------------------------------------------------------

    @translate_errors
    def stats(self, queue: str) -> QueueStats:
        """Length, delayed, drops and per-consumer lag, in-flight, retries, dead, age."""
        keys = self.keys(queue)
        with self.client.pipeline(transaction=False) as pipe:
            pipe.xlen(keys.log)
            pipe.zcard(keys.delayed)
            pipe.hget(keys.meta, "dropped")
            pipe.xrange(keys.log, "-", "+", count=1)
            pipe.xinfo_groups(keys.log)
            length, delayed, dropped, first, groups = pipe.execute(raise_on_error=False)
        if isinstance(groups, Exception):
            groups = []
        now = dt.datetime.now(dt.UTC)
        now_score = int(now.timestamp() * 1000)
        consumers = []
        for info in groups:
            name = to_str(info["name"])
            gkeys = keys.group(name)
            last = to_str(info["last-delivered-id"])
            with self.client.pipeline(transaction=False) as pipe:
                pipe.xpending(keys.log, name)
                pipe.xpending(gkeys.direct, name)
                pipe.zcard(gkeys.retry)
                pipe.xlen(gkeys.direct)
                pipe.xlen(gkeys.dead)
                pipe.zcount(gkeys.instances, now_score, "+inf")
                pipe.xrange(keys.log, f"({last}", "+", count=1)
                pipe.xrange(gkeys.direct, "-", "+", count=1)
                p_log, p_direct, retry, direct, dead, alive, undelivered, first_direct = (
                    pipe.execute(raise_on_error=False)
                )
            p_direct = p_direct if isinstance(p_direct, dict) else {"pending": 0, "min": None}
            lag = info.get("lag")
            if lag is None:  # Redis < 7, or a lag Redis cannot compute: count, capped
                lag = self._count_after(keys.log, last) if undelivered else 0
            # The oldest of: pending in the log, first undelivered in the log, first
            # entry of the direct stream (retries and re-drives waiting or in flight).
            candidates = (
                p_log.get("min"),
                undelivered[0][0] if undelivered else None,
                first_direct[0][0] if isinstance(first_direct, list) and first_direct else None,
            )
            oldest = [to_str(x) for x in candidates if x]
            consumers.append(
                ConsumerStats(
                    name=name,
                    lag=int(lag),
                    in_flight=int(p_log["pending"]) + int(p_direct["pending"]),
                    waiting_retry=int(retry),
                    direct=int(direct) - int(p_direct["pending"]),
                    dead=int(dead),
                    oldest_unacked_age_s=age_s(min(oldest, key=_id_key), now) if oldest else None,
                    instances_alive=int(alive),
                    last_delivered_id=last,
                )
            )
        return QueueStats(
            name=queue,
            length=int(length) if not isinstance(length, Exception) else 0,
            delayed=int(delayed),
            dropped=int(dropped or 0),
            oldest_id=to_str(first[0][0]) if first and not isinstance(first, Exception) else None,
            consumers=sorted(consumers, key=lambda c: c.name),
        )

    def _count_after(self, log: str, last: str) -> int:
        ids = self.client.execute_command("XRANGE", log, f"({last}", "+", "COUNT", LAG_COUNT_CAP)
        return len(ids)


def _id_key(entry_id: str) -> tuple[int, int]:
    ms, _, seq = entry_id.partition("-")
    return int(ms), int(seq or 0)


def new_message_id() -> str:
    """A message id chosen before publishing: 32 hex characters."""
    return uuid.uuid4().hex


def default_instance_name() -> str:
    """``host:pid:random``: unique per running instance, readable in stats."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"


__all__ = ["Broker", "GroupKeys", "default_instance_name"]
