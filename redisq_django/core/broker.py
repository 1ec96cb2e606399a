"""The broker: logical consumers, replay, dead letters, retention, stats (and, from
:class:`~redisq_django.core.publisher.Publisher`, publishing)."""

from __future__ import annotations

import datetime as dt
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
from redisq_django.core.publisher import Delay, Publisher, new_message_id
from redisq_django.core.start import StartPoint
from redisq_django.core.stats import QueueStats, read_stats


def _is_nogroup(exc: redis.ResponseError) -> bool:
    return str(exc).startswith("NOGROUP")


class Broker(Publisher):
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
        return read_stats(self.client, self.keys(queue))


def default_instance_name() -> str:
    """``host:pid:random``: unique per running instance, readable in stats."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"


__all__ = ["Broker", "Delay", "GroupKeys", "default_instance_name", "new_message_id"]
